#include "fs.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <utility>

namespace xqajit::detail {
namespace fs = std::filesystem;

namespace {

std::error_code last_error() { return {errno, std::generic_category()}; }

constexpr std::string_view kTempMarker = ".tmp.";

struct FileId {
  dev_t device;
  ino_t inode;
};

// Leaked on purpose: locks may be released during static destruction.
std::mutex& held_locks_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::map<int, FileId>& held_locks() {
  static auto* locks = new std::map<int, FileId>;
  return *locks;
}

}  // namespace

UniqueFd::UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(std::exchange(other.fd_, -1));
  return *this;
}

UniqueFd::~UniqueFd() { reset(); }

int UniqueFd::release() { return std::exchange(fd_, -1); }

void UniqueFd::reset(int fd) {
  // close() is not retried on EINTR: on Linux the descriptor is released anyway.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string unique_suffix() {
  // A per-process random seed plus a counter: unique within the process without
  // a lock, and across processes thanks to the pid (and the seed, for pid reuse).
  static const unsigned long long seed = std::random_device{}();
  static std::atomic<unsigned long long> counter{0};
  const unsigned long long value = seed * 0x9E3779B97F4A7C15ull + counter.fetch_add(1);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%ld.%016llx", static_cast<long>(::getpid()), value);
  return buffer;
}

bool is_temp_file_name(std::string_view filename) {
  return filename.size() > 1 && filename.front() == '.' &&
         filename.find(kTempMarker) != std::string_view::npos;
}

std::error_code write_file_atomically(const fs::path& target, const void* data, std::size_t size) {
  std::string temp_name = (target.parent_path() / ("." + target.filename().string())).string();
  temp_name += std::string(kTempMarker) + unique_suffix() + ".XXXXXX";
  UniqueFd fd(::mkostemp(temp_name.data(), O_CLOEXEC));
  if (!fd.valid()) return last_error();

  auto fail = [&](std::error_code ec) {
    fd.reset();
    ::unlink(temp_name.c_str());
    return ec;
  };
  // mkstemp creates 0600; cache files are meant to be shared like any other cache.
  if (::fchmod(fd.get(), 0644) != 0) return fail(last_error());
  const char* bytes = static_cast<const char*>(data);
  std::size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd.get(), bytes + written, size - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(last_error());
    }
    written += static_cast<std::size_t>(n);
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at an
  // empty or partial file on filesystems that reorder metadata and data.
  if (::fsync(fd.get()) != 0) return fail(last_error());
  if (::close(fd.release()) != 0) return fail(last_error());
  if (::rename(temp_name.c_str(), target.c_str()) != 0) return fail(last_error());
  return {};
}

std::error_code fsync_directory(const fs::path& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return last_error();
  if (::fsync(fd.get()) != 0) return last_error();
  return {};
}

std::error_code read_whole_file(const fs::path& path, std::vector<char>& out) {
  out.clear();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return last_error();
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return last_error();
  if (!S_ISREG(info.st_mode)) return std::make_error_code(std::errc::invalid_argument);
  out.reserve(static_cast<std::size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return last_error();
    }
    if (n == 0) break;
    out.insert(out.end(), buffer, buffer + n);
  }
  return {};
}

std::error_code touch(const fs::path& path) {
  if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) != 0) return last_error();
  return {};
}

UniqueFd lock_file(const fs::path& path, LockWait wait, std::error_code& ec) {
  ec.clear();
  for (;;) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd.valid()) {
      ec = last_error();
      return {};
    }
    const int operation = LOCK_EX | (wait == LockWait::kTry ? LOCK_NB : 0);
    int rc;
    do {
      rc = ::flock(fd.get(), operation);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      ec = (errno == EWOULDBLOCK) ? std::make_error_code(std::errc::resource_unavailable_try_again)
                                  : last_error();
      return {};
    }
    // The lock only counts if the file we locked is still the one at `path`.
    struct stat locked {
    }, current{};
    if (::fstat(fd.get(), &locked) != 0) {
      ec = last_error();
      return {};
    }
    if (::stat(path.c_str(), &current) == 0 && current.st_dev == locked.st_dev &&
        current.st_ino == locked.st_ino)
      return fd;
    // Replaced or removed under us: drop this lock and take the current file's.
  }
}

void remember_held_lock(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return;
  std::lock_guard<std::mutex> guard(held_locks_mutex());
  held_locks()[fd] = {info.st_dev, info.st_ino};
}

void forget_held_lock(int fd) {
  std::lock_guard<std::mutex> guard(held_locks_mutex());
  held_locks().erase(fd);
}

bool this_process_holds_lock(const fs::path& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return false;
  std::lock_guard<std::mutex> guard(held_locks_mutex());
  for (const auto& [fd, id] : held_locks())
    if (id.device == info.st_dev && id.inode == info.st_ino) return true;
  return false;
}

}  // namespace xqajit::detail
