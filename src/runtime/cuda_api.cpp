#include "runtime/cuda_api.hpp"

#include <fmt/format.h>

#include <memory>

#include "xqajit/error.hpp"

// cuda.h #defines many entry points to versioned names (cuCtxPushCurrent ->
// cuCtxPushCurrent_v2); stringizing after expansion looks up the right symbol.
#define XQAJIT_STR2(x) #x
#define XQAJIT_STR(x) XQAJIT_STR2(x)

namespace xqajit::detail {
namespace {

std::unique_ptr<CudaApi> load(const std::string& explicit_path) {
  auto api = std::make_unique<CudaApi>();
  api->lib = DynLib::open_first(
      "the CUDA driver (libcuda)",
      cuda_library_candidates(explicit_path, {"libcuda.so.1", "libcuda.so"}, false),
      "Without a driver xqajit can still validate specs, compile kernels with NVRTC, fill the "
      "cache and pack bundles (e.g. `xqajit prewarm arch=sm_90a ...`), but it cannot launch. "
      "Install the NVIDIA driver or set XQAJIT_LIBCUDA to libcuda's path.");
#define XQAJIT_BIND(name)                                                                \
  api->name = reinterpret_cast<decltype(api->name)>(api->lib.symbol(XQAJIT_STR(name)));  \
  if (!api->name)                                                                        \
    throw LibraryError(fmt::format("{} lacks {}: the driver is too old for xqajit (needs CUDA 12.0+)", \
                                   api->lib.path(), XQAJIT_STR(name)));
  XQAJIT_CUDA_FUNCTIONS(XQAJIT_BIND)
#undef XQAJIT_BIND
  XQAJIT_CU_CHECK(*api, cuInit(0));
  return api;
}

}  // namespace

const CudaApi& cuda_api(const std::string& explicit_path) { return load_once(explicit_path, &load); }

std::string cu_error_text(const CudaApi& api, CUresult res) {
  const char* text = nullptr;
  if (api.cuGetErrorString) api.cuGetErrorString(res, &text);
  return text ? text : "";
}

}  // namespace xqajit::detail
