#include "compile/nvrtc_api.hpp"

#include <fmt/format.h>

#include <memory>

#include "xqajit/error.hpp"

namespace xqajit::detail {
namespace {

template <typename Fn>
void bind(const DynLib& lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(lib.symbol(name));
  if (!fn)
    throw LibraryError(fmt::format("{} lacks the symbol {}; it is too old or not NVRTC", lib.path(), name));
}

std::unique_ptr<NvrtcApi> load(const std::string& explicit_path) {
  auto api = std::make_unique<NvrtcApi>();
  api->lib = DynLib::open_first(
      "NVRTC (libnvrtc, the CUDA runtime compiler)",
      cuda_library_candidates(explicit_path, {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}, true),
      "Without NVRTC xqajit cannot compile kernels, but it still serves kernels from bundles "
      "(XQAJIT_BUNDLES) and from the disk cache. Install the CUDA toolkit's NVRTC or set "
      "XQAJIT_LIBNVRTC to its path.");
  const DynLib& l = api->lib;
#define XQAJIT_BIND(name) bind(l, api->name, #name)
  XQAJIT_BIND(nvrtcVersion);
  XQAJIT_BIND(nvrtcGetNumSupportedArchs);
  XQAJIT_BIND(nvrtcGetSupportedArchs);
  XQAJIT_BIND(nvrtcCreateProgram);
  XQAJIT_BIND(nvrtcDestroyProgram);
  XQAJIT_BIND(nvrtcCompileProgram);
  XQAJIT_BIND(nvrtcGetProgramLogSize);
  XQAJIT_BIND(nvrtcGetProgramLog);
  XQAJIT_BIND(nvrtcGetCUBINSize);
  XQAJIT_BIND(nvrtcGetCUBIN);
  XQAJIT_BIND(nvrtcGetErrorString);
#undef XQAJIT_BIND
  int major = 0, minor = 0;
  XQAJIT_NVRTC_CHECK(*api, nvrtcVersion(&major, &minor));
  api->version = fmt::format("{}.{}", major, minor);
  int n = 0;
  XQAJIT_NVRTC_CHECK(*api, nvrtcGetNumSupportedArchs(&n));
  api->supported_archs.resize(static_cast<size_t>(n));
  XQAJIT_NVRTC_CHECK(*api, nvrtcGetSupportedArchs(api->supported_archs.data()));
  return api;
}

}  // namespace

const NvrtcApi& nvrtc_api(const std::string& explicit_path) { return load_once(explicit_path, &load); }

}  // namespace xqajit::detail
