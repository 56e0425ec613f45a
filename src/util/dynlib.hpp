#pragma once
/// A dlopen'ed shared library (move-only RAII) and the search that finds it.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace xqajit::detail {

class DynLib {
 public:
  DynLib() = default;
  DynLib(DynLib&& other) noexcept : handle_(other.handle_), path_(std::move(other.path_)) {
    other.handle_ = nullptr;
  }
  DynLib& operator=(DynLib&& other) noexcept;
  DynLib(const DynLib&) = delete;
  DynLib& operator=(const DynLib&) = delete;
  ~DynLib();

  /// Tries each candidate in order (a bare soname goes through the dynamic
  /// linker's search; a path is used as is). On failure throws LibraryError
  /// listing every candidate with dlerror()'s answer, followed by `what_still_works`.
  static DynLib open_first(const std::string& what, const std::vector<std::string>& candidates,
                           const std::string& what_still_works);

  /// The symbol, or nullptr.
  void* symbol(const char* name) const;
  const std::string& path() const { return path_; }
  explicit operator bool() const { return handle_ != nullptr; }

 private:
  void* handle_ = nullptr;
  std::string path_;
};

/// Candidates for a CUDA library: an explicit path alone when given, else the
/// sonames, then the same under $CUDA_HOME/lib64, $CUDA_PATH/lib64 and /usr/local/cuda/lib64.
std::vector<std::string> cuda_library_candidates(const std::string& explicit_path,
                                                 const std::vector<std::string>& sonames,
                                                 bool search_toolkit_dirs);

/// The API table `load(path)` builds: one load per path, kept for the process lifetime
/// and shared by every caller. A failed load is retried on the next call (the user may
/// fix the path) and rethrown meanwhile.
template <class Api>
const Api& load_once(const std::string& path, std::unique_ptr<Api> (*load)(const std::string&)) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Api>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = loaded[path];
  if (!slot) slot = load(path);
  return *slot;
}

}  // namespace xqajit::detail
