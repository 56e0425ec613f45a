// The on-disk cubin cache. Correctness rests on two things: every file appears
// by an atomic rename of a fully written, fsynced temp file, and every read is
// checked against the manifest's size and SHA-256. Locks only avoid duplicate
// work and needless removals; a reader never trusts them.

#include "xqajit/cache/cache.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <utility>

#include "util/fs.hpp"
#include "util/log.hpp"
#include "xqajit/detail/sha256.hpp"
#include "xqajit/error.hpp"

namespace xqajit {
namespace fs = std::filesystem;
using detail::LockWait;
using detail::UniqueFd;

namespace {

constexpr char kCubinFile[] = "kernel.cubin";
constexpr char kManifestFile[] = "manifest.json";
constexpr char kLockSuffix[] = ".lock";
constexpr char kTrashPrefix[] = ".trash.";
// Leftovers younger than this may belong to a publish in flight.
constexpr auto kStrayAge = std::chrono::minutes(1);
// publish takes the entry lock unless this process holds it already, so only
// threads of one process sharing a lock can still race and pair one's cubin with
// the other's manifest; the last to finish notices and writes again, after a
// short random pause so that two such publishers do not keep colliding.
constexpr int kMaxPublishAttempts = 16;

void check_name(const std::string& name) {
  if (name.empty()) throw CacheError("cache entry name is empty; pass the spec's canonical name");
  // Names become single path components; a leading dot is reserved for temp and
  // trash files, and "<x>.lock" would collide with entry x's lock file.
  const bool ends_with_lock = name.size() >= 5 && name.compare(name.size() - 5, 5, kLockSuffix) == 0;
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos || name.front() == '.' ||
      ends_with_lock || name.size() > 200)
    throw CacheError("cache entry name '" + name +
                     "' is not a safe file name (no '/', no leading '.', no '.lock' suffix, at most 200 "
                     "characters); pass the spec's canonical name");
}

// Fingerprint directories look like "v<digits>-..." (or are our own); anything
// else in the root (a README, the user's own files) is never touched.
bool is_fingerprint_dir_name(const std::string& name, const std::string& ours) {
  if (name == ours) return true;
  if (name.size() < 3 || name[0] != 'v') return false;
  std::size_t i = 1;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  return i > 1 && i < name.size() && name[i] == '-';
}

bool is_entry_dir_name(const std::string& name) { return !name.empty() && name.front() != '.'; }

fs::path lock_path_of(const fs::path& entry_dir) { return entry_dir.string() + kLockSuffix; }

std::string utc_now_iso8601() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

struct EntryCheck {
  std::optional<std::vector<char>> cubin;  // set when the entry is complete and intact
  bool absent = false;                     // no entry directory at all: a plain miss
  bool half = false;                       // directory without a manifest: maybe a publish in flight
  std::string problem;                     // why it is not usable, for the warning
};

EntryCheck check_entry(const fs::path& dir, const std::string& fingerprint, const std::string& name) {
  EntryCheck check;
  std::vector<char> manifest_text;
  if (std::error_code ec = detail::read_whole_file(dir / kManifestFile, manifest_text)) {
    std::error_code exists_ec;
    const bool missing = ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory;
    if (missing && !fs::exists(dir, exists_ec)) {
      check.absent = true;
    } else if (missing) {
      check.half = true;
      check.problem = "the manifest is missing (a half-written entry)";
    } else {
      check.problem = "cannot read the manifest: " + ec.message();
    }
    return check;
  }
  std::uint64_t expected_bytes = 0;
  std::string expected_sha;
  try {
    const auto manifest = nlohmann::json::parse(manifest_text.begin(), manifest_text.end());
    const int version = manifest.at("format_version").get<int>();
    if (version != kCacheFormatVersion) {
      check.problem = "manifest format version " + std::to_string(version) + ", expected " +
                      std::to_string(kCacheFormatVersion);
      return check;
    }
    if (manifest.at("name").get<std::string>() != name ||
        manifest.at("fingerprint").get<std::string>() != fingerprint) {
      check.problem = "the manifest describes another entry (copied or moved by hand?)";
      return check;
    }
    expected_bytes = manifest.at("cubin_bytes").get<std::uint64_t>();
    expected_sha = manifest.at("sha256").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    check.problem = std::string("the manifest is garbled: ") + e.what();
    return check;
  }
  std::vector<char> cubin;
  if (std::error_code ec = detail::read_whole_file(dir / kCubinFile, cubin)) {
    check.problem = "cannot read the cubin: " + ec.message();
    return check;
  }
  if (cubin.size() != expected_bytes) {
    check.problem = "the cubin has " + std::to_string(cubin.size()) + " bytes, the manifest says " +
                    std::to_string(expected_bytes) + " (truncated?)";
    return check;
  }
  if (detail::sha256_hex(cubin.data(), cubin.size()) != expected_sha) {
    check.problem = "the cubin's SHA-256 does not match the manifest (corrupted on disk?)";
    return check;
  }
  check.cubin = std::move(cubin);
  return check;
}

// Makes an entry disappear at once (rename to a trash name), then deletes it,
// so no reader or publisher ever sees it partly removed. False if it was not there
// or could not be moved.
bool remove_entry_dir(const fs::path& dir) {
  const fs::path trash =
      dir.parent_path() / (kTrashPrefix + dir.filename().string() + "." + detail::unique_suffix());
  std::error_code ec;
  fs::rename(dir, trash, ec);
  if (ec) return false;
  fs::remove_all(trash, ec);
  return true;
}

// Removes an entry's lock file, but only while holding it, so that nobody is
// waiting on a file that is about to vanish (lock_file retakes a replaced file).
void remove_lock_file(const fs::path& entry_dir) {
  std::error_code ec;
  const fs::path path = lock_path_of(entry_dir);
  if (!fs::exists(path, ec)) return;
  UniqueFd held = detail::lock_file(path, LockWait::kTry, ec);
  if (held.valid()) ::unlink(path.c_str());
}

bool older_than_stray_age(const fs::path& path) {
  std::error_code ec;
  const auto mtime = fs::last_write_time(path, ec);
  return !ec && mtime < fs::file_time_type::clock::now() - kStrayAge;
}

std::vector<fs::path> subdirectories(const fs::path& dir) {
  std::vector<fs::path> result;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec) && !it->is_symlink(type_ec)) result.push_back(it->path());
  }
  std::sort(result.begin(), result.end());
  return result;
}

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
                     {"created", utc_now_iso8601()},          {"meta", std::move(meta)}}
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

std::vector<CacheEntry> DiskCache::list(bool all_fingerprints) const {
  std::vector<CacheEntry> entries;
  for (const fs::path& fingerprint_dir : subdirectories(root_)) {
    const std::string fingerprint = fingerprint_dir.filename().string();
    if (!is_fingerprint_dir_name(fingerprint, fingerprint_) ||
        (!all_fingerprints && fingerprint != fingerprint_))
      continue;
    for (const fs::path& dir : subdirectories(fingerprint_dir)) {
      if (!is_entry_dir_name(dir.filename().string())) continue;
      std::error_code ec;
      const fs::path manifest_path = dir / kManifestFile;
      CacheEntry entry;
      entry.last_used = fs::last_write_time(manifest_path, ec);
      if (ec) continue;  // half entries are not entries
      entry.fingerprint = fingerprint;
      entry.name = dir.filename().string();
      entry.dir = dir;
      const auto manifest_bytes = fs::file_size(manifest_path, ec);
      entry.bytes = ec ? 0 : manifest_bytes;
      const auto cubin_bytes = fs::file_size(dir / kCubinFile, ec);
      entry.bytes += ec ? 0 : cubin_bytes;
      std::vector<char> text;
      if (!detail::read_whole_file(manifest_path, text)) {
        const auto manifest = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
        if (manifest.is_object() && manifest.contains("sha256") && manifest["sha256"].is_string())
          entry.sha256 = manifest["sha256"].get<std::string>();
      }
      entries.push_back(std::move(entry));
    }
  }
  return entries;
}

std::uint64_t DiskCache::size_bytes() const {
  std::uint64_t total = 0;
  for (const CacheEntry& entry : list(true)) total += entry.bytes;
  return total;
}

std::size_t DiskCache::clear() {
  std::size_t removed = 0;
  for (const fs::path& fingerprint_dir : subdirectories(root_)) {
    if (!is_fingerprint_dir_name(fingerprint_dir.filename().string(), fingerprint_)) continue;
    std::error_code ec;
    for (const fs::path& dir : subdirectories(fingerprint_dir)) {
      const std::string name = dir.filename().string();
      if (name.rfind(kTrashPrefix, 0) == 0) {
        fs::remove_all(dir, ec);
      } else if (is_entry_dir_name(name) && remove_entry_dir(dir)) {
        ++removed;
      }
    }
    // Then lock files (each only while we can hold it) and stray temp files.
    for (fs::directory_iterator it(fingerprint_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& path = it->path();
      const std::string file = path.filename().string();
      if (path.extension() == kLockSuffix && it->is_regular_file(ec)) {
        remove_lock_file(path.parent_path() / path.stem());
      } else if (detail::is_temp_file_name(file)) {
        fs::remove(path, ec);
      }
      ec.clear();
    }
    fs::remove(fingerprint_dir, ec);  // only if empty; a held lock file keeps it
  }
  return removed;
}

std::uint64_t DiskCache::gc(std::uint64_t max_bytes) {
  // First the leftovers of crashed or interrupted publishers.
  for (const fs::path& fingerprint_dir : subdirectories(root_)) {
    if (!is_fingerprint_dir_name(fingerprint_dir.filename().string(), fingerprint_)) continue;
    std::error_code ec;
    for (fs::directory_iterator it(fingerprint_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string file = it->path().filename().string();
      if (detail::is_temp_file_name(file) && older_than_stray_age(it->path())) fs::remove(it->path(), ec);
      ec.clear();
    }
    for (const fs::path& dir : subdirectories(fingerprint_dir)) {
      const std::string name = dir.filename().string();
      if (name.rfind(kTrashPrefix, 0) == 0) {
        if (older_than_stray_age(dir)) fs::remove_all(dir, ec);
        continue;
      }
      if (!is_entry_dir_name(name)) continue;
      for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (detail::is_temp_file_name(it->path().filename().string()) && older_than_stray_age(it->path()))
          fs::remove(it->path(), ec);
        ec.clear();
      }
      if (!fs::exists(dir / kManifestFile, ec) && older_than_stray_age(dir)) {
        UniqueFd held = detail::lock_file(lock_path_of(dir), LockWait::kTry, ec);
        if (held.valid() && !fs::exists(dir / kManifestFile, ec) && remove_entry_dir(dir))
          ::unlink(lock_path_of(dir).c_str());
      }
    }
  }

  std::vector<CacheEntry> entries = list(true);
  std::uint64_t total = 0;
  for (const CacheEntry& entry : entries) total += entry.bytes;
  // Entries of other fingerprints belong to older toolchains or templates: they go first.
  std::sort(entries.begin(), entries.end(), [&](const CacheEntry& a, const CacheEntry& b) {
    const bool a_ours = a.fingerprint == fingerprint_, b_ours = b.fingerprint == fingerprint_;
    if (a_ours != b_ours) return !a_ours;
    return a.last_used < b.last_used;
  });
  std::uint64_t freed = 0;
  for (const CacheEntry& entry : entries) {
    if (total <= max_bytes) break;
    if (!remove_entry_dir(entry.dir)) continue;
    remove_lock_file(entry.dir);
    total -= entry.bytes;
    freed += entry.bytes;
  }
  for (const fs::path& fingerprint_dir : subdirectories(root_)) {
    std::error_code ec;
    const std::string name = fingerprint_dir.filename().string();
    if (name != fingerprint_ && is_fingerprint_dir_name(name, fingerprint_))
      fs::remove(fingerprint_dir, ec);  // only if empty
  }
  return freed;
}

}  // namespace xqajit
