#include "util/dynlib.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>

#include "xqajit/error.hpp"

namespace xqajit::detail {

DynLib& DynLib::operator=(DynLib&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    handle_ = other.handle_;
    path_ = std::move(other.path_);
    other.handle_ = nullptr;
  }
  return *this;
}

DynLib::~DynLib() {
  // Never dlclose libcuda/libnvrtc at exit: their own atexit teardown may still
  // run after us. Only failed opens are closed (handled above); keep the handle.
}

DynLib DynLib::open_first(const std::string& what, const std::vector<std::string>& candidates,
                          const std::string& what_still_works) {
  std::string tried;
  for (const auto& c : candidates) {
    dlerror();
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      DynLib lib;
      lib.handle_ = h;
      lib.path_ = c;
      return lib;
    }
    const char* err = dlerror();
    tried += fmt::format("\n  {}: {}", c, err ? err : "not found");
  }
  throw LibraryError(fmt::format("could not load {}; tried:{}\n{}", what, tried, what_still_works));
}

void* DynLib::symbol(const char* name) const { return handle_ ? dlsym(handle_, name) : nullptr; }

std::vector<std::string> cuda_library_candidates(const std::string& explicit_path,
                                                 const std::vector<std::string>& sonames,
                                                 bool search_toolkit_dirs) {
  if (!explicit_path.empty()) return {explicit_path};
  std::vector<std::string> out = sonames;
  if (!search_toolkit_dirs) return out;
  std::vector<std::string> dirs;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) dirs.push_back(std::string(v) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  for (const auto& d : dirs)
    for (const auto& s : sonames) out.push_back(d + "/" + s);
  return out;
}

}  // namespace xqajit::detail
