#pragma once
// The architecture a kernel is compiled for, as the geometry functions the host
// plans with take it (sm_90a -> 90), so a kernel sizes itself as its launch did.

namespace xqajit {

// A function, not a constant: NVRTC emits every namespace-scope constant into the
// PTX under its name, so each backend keeps its own kArch = target_arch().
constexpr int target_arch() {
#ifdef __CUDA_ARCH__
  return __CUDA_ARCH__ / 10;
#else
  return 90;  // no device pass (nvcc's host pass, an editor): any arch the geometry accepts
#endif
}

}  // namespace xqajit
