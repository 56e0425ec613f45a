#pragma once
// Programmatic dependent launch (sm_90+; no-ops elsewhere and when the launch
// did not ask for it). The next kernel in the stream may start its CTAs while
// this one drains; everything before pdl_wait() must therefore compute nothing
// from global memory that an upstream kernel may write (q, caches, block table,
// seq_lens, scales behind pointers, the workspace) and write none of it:
// griddepcontrol.wait returns once every upstream grid has completed and its
// writes are visible. The one exception is a hint: common/l2_prefetch.cuh reads
// the table and length as they stand to warm L2, where a stale value costs only
// a useless prefetch.

namespace xqajit {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next grid launch its CTAs (they block in their own pdl_wait until
// this grid has completed). Called after pdl_wait, so at most two grids overlap.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace xqajit
