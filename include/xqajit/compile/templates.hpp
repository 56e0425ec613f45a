#pragma once
/// The kernel templates NVRTC compiles: embedded in the library at build time,
/// or read from XQAJIT_TEMPLATE_DIR. Their hash enters the cache fingerprint,
/// so editing a template never serves a stale cubin.

#include <filesystem>
#include <string>
#include <vector>

namespace xqajit {

struct TemplateFile {
  std::string path;  // relative, '/'-separated, as used in #include "..."
  std::string text;
};

class TemplateSet {
 public:
  /// The copy compiled into the library.
  static TemplateSet embedded();
  /// Every *.cuh / *.cu / *.h file under `dir`; throws Error if it has none.
  static TemplateSet from_dir(const std::filesystem::path& dir);
  /// from_dir(dir) when dir is non-empty, else embedded().
  static TemplateSet load(const std::filesystem::path& dir);

  const std::vector<TemplateFile>& files() const { return files_; }
  const TemplateFile* find(const std::string& path) const;
  /// SHA-256 (hex) over every path and text, in path order.
  const std::string& hash() const { return hash_; }
  /// "embedded" or the folder they were read from.
  const std::string& origin() const { return origin_; }

 private:
  TemplateSet(std::vector<TemplateFile> files, std::string origin);
  std::vector<TemplateFile> files_;
  std::string hash_;
  std::string origin_;
};

}  // namespace xqajit
