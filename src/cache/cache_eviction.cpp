// DiskCache's listing and eviction (include/xqajit/cache/cache.hpp): list, size, clear
// and gc (stray temp and trash files first, then whole entries, least recently used
// first, other fingerprints before ours). An entry goes by rename, so a reader never
// sees it half removed; lock files go only while held.

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cache/entry_files.hpp"
#include "util/fs.hpp"
#include "xqajit/cache/cache.hpp"

namespace xqajit {

using namespace cache_files;
using detail::LockWait;
using detail::UniqueFd;

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
