#pragma once
// One cache entry's files on disk, as DiskCache's reads, publishes and eviction see
// them: the names (entry, fingerprint directory, lock, trash), the integrity check of
// a manifest and its cubin, and removal that no reader ever sees half done.

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace xqajit::cache_files {

namespace fs = std::filesystem;

constexpr char kCubinFile[] = "kernel.cubin";
constexpr char kManifestFile[] = "manifest.json";
constexpr char kLockSuffix[] = ".lock";
constexpr char kTrashPrefix[] = ".trash.";
// Leftovers younger than this may belong to a publish in flight.
constexpr auto kStrayAge = std::chrono::minutes(1);

/// Throws CacheError unless `name` is safe as one path component of an entry.
void check_name(const std::string& name);
/// A fingerprint directory of the root ("v<digits>-...", or `ours`); nothing else is touched.
bool is_fingerprint_dir_name(const std::string& name, const std::string& ours);
/// An entry directory (not a temp or trash name).
bool is_entry_dir_name(const std::string& name);
fs::path lock_path_of(const fs::path& entry_dir);

/// What an entry directory holds.
struct EntryCheck {
  std::optional<std::vector<char>> cubin;  // set when the entry is complete and intact
  bool absent = false;                     // no entry directory at all: a plain miss
  bool half = false;                       // directory without a manifest: maybe a publish in flight
  std::string problem;                     // why it is not usable, for the warning
};

/// Reads and checks an entry: its manifest (format, name, fingerprint) and its cubin
/// (size and SHA-256 against the manifest).
EntryCheck check_entry(const fs::path& dir, const std::string& fingerprint, const std::string& name);
/// Renames the entry to a trash name, then deletes it; false if it was not there or could not move.
bool remove_entry_dir(const fs::path& dir);
/// Removes an entry's lock file, only while holding it.
void remove_lock_file(const fs::path& entry_dir);
bool older_than_stray_age(const fs::path& path);
/// The directories (not links) in `dir`, sorted.
std::vector<fs::path> subdirectories(const fs::path& dir);

}  // namespace xqajit::cache_files
