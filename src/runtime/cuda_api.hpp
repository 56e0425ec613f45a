#pragma once
/// libcuda, loaded with dlopen on first use; the function table and a check macro.
/// Symbols are looked up by the names cuda.h maps them to (e.g. cuCtxPushCurrent_v2).

#include <cuda.h>

#include <string>

#include "util/dynlib.hpp"

namespace xqajit::detail {

struct CudaApi {
  DynLib lib;
#define XQAJIT_CUDA_FUNCTIONS(X)                                                              \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)   \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)               \
  X(cuDevicePrimaryCtxRetain) X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxGetCurrent)       \
  X(cuCtxGetDevice) X(cuStreamGetCtx) X(cuStreamIsCapturing) X(cuModuleLoadData)              \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncGetAttribute) X(cuFuncSetAttribute)        \
  X(cuLaunchKernelEx) X(cuOccupancyMaxActiveClusters) X(cuTensorMapEncodeTiled)                 \
  /* the tuner (src/tuning/tuner_gpu.cpp, tools/xqajit/tune_problem.cpp) */                   \
  X(cuMemAlloc) X(cuMemFree) X(cuMemsetD8Async) X(cuStreamCreate)                            \
  X(cuMemcpyHtoD) X(cuMemcpyDtoD) X(cuDevicePrimaryCtxRelease)                                \
  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate) X(cuEventRecord)                 \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy) X(cuMemGetInfo)               \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch)        \
  X(cuGraphExecDestroy) X(cuGraphDestroy)
#define XQAJIT_DECLARE(name) decltype(&::name) name = nullptr;
  XQAJIT_CUDA_FUNCTIONS(XQAJIT_DECLARE)
#undef XQAJIT_DECLARE
};

/// The loaded driver, cuInit done (once per process and path; thread-safe).
/// Throws LibraryError, or CudaError when cuInit fails (e.g. no device).
const CudaApi& cuda_api(const std::string& explicit_path = {});

/// "CUDA_ERROR_X: description" for a CUresult.
std::string cu_error_text(const CudaApi& api, CUresult res);

}  // namespace xqajit::detail

/// Calls a driver function through the table; throws CudaError with the call
/// text, the CUresult name and file:line.
#define XQAJIT_CU_CHECK(api, call)                                                         \
  do {                                                                                     \
    const CUresult xqajit_res_ = (api).call;                                               \
    if (xqajit_res_ != CUDA_SUCCESS) {                                                     \
      const char* xqajit_name_ = nullptr;                                                  \
      (api).cuGetErrorName(xqajit_res_, &xqajit_name_);                                    \
      throw ::xqajit::CudaError(#call, static_cast<int>(xqajit_res_),                      \
                                xqajit_name_ ? xqajit_name_ : "unknown CUresult", __FILE__, \
                                __LINE__, ::xqajit::detail::cu_error_text(api, xqajit_res_)); \
    }                                                                                      \
  } while (0)
