// One cache entry's files on disk (entry_files.hpp): every file appears by an
// atomic rename, every read is checked against the manifest's size and SHA-256.

#include "cache/entry_files.hpp"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "util/fs.hpp"
#include "xqajit/cache/cache.hpp"
#include "xqajit/detail/sha256.hpp"
#include "xqajit/error.hpp"

namespace xqajit::cache_files {

using detail::LockWait;
using detail::UniqueFd;

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

}  // namespace xqajit::cache_files
