#pragma once
/// Bundles: one read-only file of cubins with an index, for hosts with no
/// compiler. Format in docs/BUNDLE_FORMAT.md, pinned by tests/golden/.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace xqajit {

constexpr std::uint32_t kBundleFormatVersion = 1;

struct BundleEntry {
  std::string name;         // canonical spec name
  std::string arch;         // "sm_90a"
  std::string fingerprint;  // toolchain fingerprint it was built with
  std::uint64_t offset = 0; // of the cubin, from the start of the file
  std::uint64_t size = 0;
  std::string sha256;       // of the cubin, hex
};

/// A bundle opened read-only with mmap. Opening checks the header and the index
/// (every entry inside the file); read() checks the entry's checksum. Errors are
/// BundleError naming the file and, where it applies, the entry.
class BundleReader {
 public:
  static BundleReader open(const std::filesystem::path& file);
  BundleReader(BundleReader&&) noexcept;
  BundleReader& operator=(BundleReader&&) noexcept;
  ~BundleReader();

  const std::filesystem::path& path() const;
  const std::vector<BundleEntry>& entries() const;
  const BundleEntry* find(const std::string& name) const;
  /// The entry's cubin, checksum verified.
  std::vector<char> read(const BundleEntry& entry) const;
  /// Checks every entry's checksum; throws on the first bad one.
  void verify() const;

 private:
  BundleReader();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Collects cubins and writes them as one bundle, atomically (temp + fsync + rename).
class BundleWriter {
 public:
  void add(BundleEntry entry_without_offset, std::vector<char> cubin);
  void write(const std::filesystem::path& file) const;
  std::size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<BundleEntry, std::vector<char>>> entries_;
};

/// The bundle search path (XQAJIT_BUNDLES, Options::bundles): files, or folders
/// whose *.xqab files are bundles. A bad bundle is skipped with a warning.
class BundleSet {
 public:
  explicit BundleSet(const std::vector<std::filesystem::path>& files_or_dirs);
  struct Hit {
    std::vector<char> cubin;
    std::filesystem::path file;
    BundleEntry entry;
  };
  /// The first bundle entry named `name` whose fingerprint ends with
  /// `fingerprint_suffix` (the template-hash part: cubins built from other
  /// templates have another kernel ABI). A corrupt entry is skipped with a warning.
  std::optional<Hit> find(const std::string& name, const std::string& fingerprint_suffix) const;
  std::size_t size() const { return readers_.size(); }

 private:
  std::vector<std::shared_ptr<BundleReader>> readers_;
};

}  // namespace xqajit
