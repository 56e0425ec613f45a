#pragma once
/// The on-disk cubin cache.
///
///   <root>/<fingerprint>/<spec name>/kernel.cubin     the cubin
///   <root>/<fingerprint>/<spec name>/manifest.json    written last: the publish point
///   <root>/<fingerprint>/<spec name>.lock             per-entry lock (flock; the kernel
///                                                     releases it if the holder dies)
///
/// The fingerprint (format version, NVRTC version, template hash) keeps cubins
/// from another toolchain or other templates apart, so upgrades never load a
/// stale cubin. Readers take no lock; a reader that finds a half-written or
/// corrupt entry treats it as a miss.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace xqajit {

/// Bumped whenever the on-disk layout or manifest changes.
constexpr int kCacheFormatVersion = 1;

/// "v1-nvrtc13.0-t<first 16 hex of the template hash>": the directory that
/// holds every entry built by one toolchain from one set of templates.
std::string toolchain_fingerprint(const std::string& nvrtc_version, const std::string& template_hash);

struct CacheEntry {
  std::string fingerprint;
  std::string name;
  std::filesystem::path dir;
  std::uint64_t bytes = 0;               // cubin + manifest
  std::string sha256;                    // of the cubin, from the manifest
  std::filesystem::file_time_type last_used;  // manifest mtime, touched on every hit
};

/// An exclusive per-entry lock, held for the lifetime of the object.
class EntryLock {
 public:
  EntryLock() = default;
  explicit EntryLock(int fd) : fd_(fd) {}
  EntryLock(EntryLock&& other) noexcept;
  EntryLock& operator=(EntryLock&& other) noexcept;
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;
  ~EntryLock();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

class DiskCache {
 public:
  /// Creates <root>/<fingerprint> if it can. If the root cannot be written the
  /// cache is read-only (writable() is false) and one warning is logged.
  DiskCache(std::filesystem::path root, std::string fingerprint);

  const std::filesystem::path& root() const { return root_; }
  const std::string& fingerprint() const { return fingerprint_; }
  bool writable() const { return writable_; }

  /// The cubin, if a complete entry with a matching checksum exists; a corrupt
  /// or half-written entry is logged, removed (when writable) and reported as a miss.
  std::optional<std::vector<char>> load(const std::string& name) const;

  /// Publishes atomically: cubin to a unique temp file, fsync, rename; then the
  /// manifest the same way, last. Returns the entry directory, or nullopt (with a
  /// warning) when the cache cannot be written — never throws for I/O trouble.
  /// `meta` (JSON text) is stored in the manifest under "meta".
  std::optional<std::filesystem::path> publish(const std::string& name, const std::vector<char>& cubin,
                                               const std::string& meta_json = "{}");

  /// Blocks until this process holds the entry's lock. When the cache is not
  /// writable, returns an unheld lock (callers carry on without cross-process
  /// exclusion).
  EntryLock lock(const std::string& name) const;

  std::filesystem::path entry_dir(const std::string& name) const;

  /// Entries of every fingerprint under the root (all_fingerprints) or only of ours.
  std::vector<CacheEntry> list(bool all_fingerprints = true) const;
  /// Total bytes of all entries under the root.
  std::uint64_t size_bytes() const;
  /// Removes every entry under the root (all fingerprints). Returns entries removed.
  std::size_t clear();
  /// Evicts least-recently-used entries (any fingerprint, other fingerprints first)
  /// until the root holds at most max_bytes. Returns bytes freed.
  std::uint64_t gc(std::uint64_t max_bytes);

 private:
  std::filesystem::path root_;
  std::string fingerprint_;
  bool writable_ = false;
};

}  // namespace xqajit
