// The on-disk cubin cache. Correctness rests on two things: every file appears
// by an atomic rename of a fully written, fsynced temp file, and every read is
// checked against the manifest's size and SHA-256. Locks only avoid duplicate
// work and needless removals; a reader never trusts them.

#include "xqajit/cache/cache.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <utility>

#include "cache/entry_files.hpp"
#include "util/fs.hpp"
#include "util/iso_time.hpp"
#include "util/log.hpp"
#include "xqajit/detail/sha256.hpp"
#include "xqajit/error.hpp"

namespace xqajit {
namespace fs = std::filesystem;
using detail::LockWait;
using detail::UniqueFd;

using namespace cache_files;

namespace {

// publish takes the entry lock unless this process holds it already, so only
// threads of one process sharing a lock can still race and pair one's cubin with
// the other's manifest; the last to finish notices and writes again, after a
// short random pause so that two such publishers do not keep colliding.
constexpr int kMaxPublishAttempts = 16;

}  // namespace

std::string toolchain_fingerprint(const std::string& nvrtc_version, const std::string& template_hash) {
  return "v" + std::to_string(kCacheFormatVersion) + "-nvrtc" + nvrtc_version + "-t" +
         template_hash.substr(0, 16);
}

EntryLock::EntryLock(EntryLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

EntryLock& EntryLock::operator=(EntryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      detail::forget_held_lock(fd_);
      ::close(fd_);  // closing the descriptor releases the flock
    }
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

EntryLock::~EntryLock() {
  if (fd_ >= 0) {
    detail::forget_held_lock(fd_);
    ::close(fd_);
  }
}

DiskCache::DiskCache(fs::path root, std::string fingerprint)
    : root_(std::move(root)), fingerprint_(std::move(fingerprint)) {
  if (fingerprint_.empty() || fingerprint_.front() == '.' || fingerprint_.find('/') != std::string::npos)
    throw CacheError("cache fingerprint '" + fingerprint_ +
                     "' is not a single directory name; build it with xqajit::toolchain_fingerprint()");
  const fs::path dir = root_ / fingerprint_;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) {
    // Probe with a real file: permission bits alone miss read-only mounts, ACLs
    // and root's exemption from them.
    const char byte = 0;
    std::string probe_name = (dir / ".probe.tmp.").string() + detail::unique_suffix();
    UniqueFd fd(::open(probe_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd.valid() || ::write(fd.get(), &byte, 1) != 1) ec = std::error_code(errno, std::generic_category());
    if (fd.valid()) ::unlink(probe_name.c_str());
  }
  writable_ = !ec;
  if (!writable_)
    detail::logger()->warn(
        "xqajit cache: {} is not writable ({}); compiled kernels will be kept in memory only. Point "
        "XQAJIT_CACHE_DIR at a writable directory to keep them across runs.",
        dir.string(), ec.message());
}

fs::path DiskCache::entry_dir(const std::string& name) const {
  check_name(name);
  return root_ / fingerprint_ / name;
}

std::optional<std::vector<char>> DiskCache::load(const std::string& name) const {
  const fs::path dir = entry_dir(name);
  EntryCheck check = check_entry(dir, fingerprint_, name);
  if (check.absent) return std::nullopt;
  if (!check.cubin && writable_) {
    // Only the lock holder may remove a bad entry: a publisher holds the lock
    // while it writes, so what looks broken may simply be unfinished.
    std::error_code ec;
    UniqueFd held = detail::lock_file(lock_path_of(dir), LockWait::kTry, ec);
    if (!held.valid()) {
      // Someone is working on the entry; what we saw may be a publish in flight, so look once more.
      check = check_entry(dir, fingerprint_, name);
      if (check.cubin) {
        detail::touch(dir / kManifestFile);
        return check.cubin;
      }
      if (!check.half && !check.absent)
        detail::logger()->warn("xqajit cache: ignoring entry {}: {}; it will be rebuilt", dir.string(),
                               check.problem);
      return std::nullopt;
    }
    check = check_entry(dir, fingerprint_, name);  // it may have been finished meanwhile
    if (check.absent) return std::nullopt;
    if (!check.cubin) {
      detail::logger()->warn("xqajit cache: removing broken entry {}: {}; it will be rebuilt", dir.string(),
                             check.problem);
      remove_entry_dir(dir);
      return std::nullopt;
    }
  }
  if (!check.cubin) {
    detail::logger()->warn("xqajit cache: ignoring entry {} in a read-only cache: {}", dir.string(),
                           check.problem);
    return std::nullopt;
  }
  detail::touch(dir / kManifestFile);  // LRU bookkeeping; best effort (read-only caches just skip it)
  return check.cubin;
}

std::optional<fs::path> DiskCache::publish(const std::string& name, const std::vector<char>& cubin,
                                           const std::string& meta_json) {
  const fs::path dir = entry_dir(name);
  nlohmann::json meta = nlohmann::json::parse(meta_json, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded())
    throw CacheError("cache metadata for '" + name + "' is not valid JSON: " + meta_json);
  if (!writable_) return std::nullopt;  // already warned once, in the constructor

  const std::string sha = detail::sha256_hex(cubin.data(), cubin.size());
  EntryCheck existing = check_entry(dir, fingerprint_, name);
  if (existing.cubin && *existing.cubin == cubin) {
    detail::touch(dir / kManifestFile);
    return dir;  // another process published the same bytes first
  }
  const std::string manifest =
      nlohmann::json{{"format_version", kCacheFormatVersion}, {"name", name},
                     {"fingerprint", fingerprint_},           {"cubin_file", kCubinFile},
                     {"cubin_bytes", cubin.size()},           {"sha256", sha},
                     {"created", detail::utc_iso8601(std::time(nullptr))},          {"meta", std::move(meta)}}
          .dump(2) +
      "\n";

  // Publish under the entry lock, so publishers never interleave and a reader
  // that sees the entry mid-write leaves it alone. Callers normally hold it
  // already (lock, load, compile, publish); otherwise take it here.
  std::error_code ec;
  UniqueFd publish_lock;
  if (!detail::this_process_holds_lock(lock_path_of(dir)))
    publish_lock = detail::lock_file(lock_path_of(dir), LockWait::kBlock, ec);  // best effort

  thread_local std::minstd_rand backoff_random(std::random_device{}());
  for (int attempt = 0; attempt < kMaxPublishAttempts; ++attempt) {
    if (attempt > 0) {
      std::uniform_int_distribution<int> pause_us(0, 500 * attempt);
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us(backoff_random)));
      if (check_entry(dir, fingerprint_, name).cubin) return dir;  // a racing publisher finished cleanly
    }
    fs::create_directories(dir, ec);
    // Unpublish the old manifest first: a reader must never pair it with the new cubin.
    if (!ec && ::unlink((dir / kManifestFile).c_str()) != 0 && errno != ENOENT)
      ec = std::error_code(errno, std::generic_category());
    if (!ec) ec = detail::write_file_atomically(dir / kCubinFile, cubin.data(), cubin.size());
    if (!ec) ec = detail::write_file_atomically(dir / kManifestFile, manifest.data(), manifest.size());
    if (!ec) ec = detail::fsync_directory(dir);
    if (!ec) ec = detail::fsync_directory(dir.parent_path());
    if (ec == std::errc::no_such_file_or_directory) continue;  // a reader removed the entry under us
    if (ec) {
      detail::logger()->warn(
          "xqajit cache: could not publish {} ({}); the kernel stays in memory only for this process",
          dir.string(), ec.message());
      remove_entry_dir(dir);  // never leave half an entry (or a full disk) behind
      return std::nullopt;
    }
    // Whoever renames a manifest last checks that the pair on disk matches and,
    // if a racing publisher's cubin landed in between, writes again.
    if (check_entry(dir, fingerprint_, name).cubin) return dir;
  }
  detail::logger()->warn("xqajit cache: gave up publishing {} after {} attempts racing other publishers",
                         dir.string(), kMaxPublishAttempts);
  return std::nullopt;
}

EntryLock DiskCache::lock(const std::string& name) const {
  const fs::path dir = entry_dir(name);
  if (!writable_) return EntryLock();
  std::error_code ec;
  fs::create_directories(dir.parent_path(), ec);  // clear() may have removed it
  UniqueFd fd = detail::lock_file(lock_path_of(dir), LockWait::kBlock, ec);
  if (!fd.valid()) {
    detail::logger()->warn("xqajit cache: cannot lock {} ({}); carrying on without cross-process exclusion",
                           lock_path_of(dir).string(), ec.message());
    return EntryLock();
  }
  detail::remember_held_lock(fd.get());
  return EntryLock(fd.release());
}

}  // namespace xqajit
