#pragma once
/// libnvrtc, loaded with dlopen on first use; the function table and a check macro.

#include <nvrtc.h>

#include <string>
#include <vector>

#include "util/dynlib.hpp"

namespace xqajit::detail {

struct NvrtcApi {
  DynLib lib;
  decltype(&::nvrtcVersion) nvrtcVersion = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) nvrtcGetNumSupportedArchs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) nvrtcGetSupportedArchs = nullptr;
  decltype(&::nvrtcCreateProgram) nvrtcCreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) nvrtcDestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) nvrtcCompileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) nvrtcGetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) nvrtcGetProgramLog = nullptr;
  decltype(&::nvrtcGetCUBINSize) nvrtcGetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) nvrtcGetCUBIN = nullptr;
  decltype(&::nvrtcGetErrorString) nvrtcGetErrorString = nullptr;

  std::string version;              // "13.0"
  std::vector<int> supported_archs; // {75, 80, ...}
};

/// The loaded NVRTC (once per process and path; thread-safe). Throws LibraryError.
const NvrtcApi& nvrtc_api(const std::string& explicit_path);

}  // namespace xqajit::detail

/// Calls an NVRTC function through the table; throws CudaError with file:line.
#define XQAJIT_NVRTC_CHECK(api, call)                                                      \
  do {                                                                                     \
    const nvrtcResult xqajit_res_ = (api).call;                                            \
    if (xqajit_res_ != NVRTC_SUCCESS)                                                      \
      throw ::xqajit::CudaError(#call, static_cast<int>(xqajit_res_),                      \
                                (api).nvrtcGetErrorString(xqajit_res_), __FILE__, __LINE__); \
  } while (0)
