#pragma once
// The L2 warm-up a CTA issues before pdl_wait() (programmatic dependent launch).
// The CTAs of a dependent launch become resident while the grid before them
// drains -- at small batch a merge tail of ~2.5 us in which the DRAM idles
// (docs/KERNEL_NOTES.md, "small-batch latency") -- and then wait. Meanwhile they
// can ask the memory system for the first keys of their split, so the copies
// they issue after the wait hit L2 instead of starting the DRAM round trip then.
//
// Only hints are issued here: the block table and the length are read as they
// stand (an upstream kernel may still be writing them), and a stale value merely
// warms the wrong lines. Every read that computes something happens after
// pdl_wait(). A page index outside [0, num_pages) is skipped, so no hint leaves
// the caller's cache; num_pages == 0 (unknown, or a launch without PDL, where
// the wait returns at once and the copies follow anyway) issues nothing.

#include "common/paged_kv.cuh"

namespace xqajit {

// A load that may race with an upstream kernel's writes: relaxed, never cached
// in a register across pdl_wait() (whose asm clobbers memory).
__device__ __forceinline__ int racy_load(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Asks L2 for the K and V rows of the first kKeys keys of [begin, end) (end at
// most the table row's length): one bulk prefetch per row of kRowBytes (a multiple
// of 16) of kElemBytes elements, spread over the CTA's threads.
template <int kPageSize, int kElemBytes, int kRowBytes, int kThreads, int kKeys>
__device__ __forceinline__ void prefetch_split_start(const PagedKvRows& kv, int begin, int end, int num_pages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(kRowBytes % 16 == 0, "bulk prefetches move multiples of 16 bytes");
  // This thread's rows are all K (even threads) or all V (odd): kThreads is even.
  const bool v = threadIdx.x & 1;
  long long base = (long long)(v ? kv.v_base : kv.k_base) + (v ? kv.v_head : kv.k_head) * kElemBytes;
  long long stride_page = (v ? kv.v_stride_page : kv.k_stride_page) * kElemBytes;
  long long stride_token = (v ? kv.v_stride_token : kv.k_stride_token) * kElemBytes;
  // Opaque copies: products of the loaders' own strides, shared with the main loop,
  // would otherwise be computed here once and held in registers through it.
  asm volatile("" : "+l"(base), "+l"(stride_page), "+l"(stride_token));
  const int last = begin + kKeys < end ? begin + kKeys : end;
#pragma unroll
  for (int j = 0; j < (2 * kKeys + kThreads - 1) / kThreads; ++j) {
    const int pos = begin + ((int)threadIdx.x >> 1) + j * (kThreads / 2);
    const int page = pos < last ? racy_load(kv.table_row + pos / kPageSize) : -1;
    const long long row = base + page * stride_page + (pos % kPageSize) * stride_token;
    if ((unsigned)page < (unsigned)num_pages)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row), "n"(kRowBytes) : "memory");
  }
#endif
}

}  // namespace xqajit
