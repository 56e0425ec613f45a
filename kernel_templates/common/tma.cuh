#pragma once
// Hopper (sm_90) bulk tensor copies (TMA) and the shared-memory barriers they
// complete on; inline PTX only (NVRTC: no toolkit headers).
//
// One thread arms a stage's barrier with the bytes it is about to copy
// (mbarrier_arrive_expect_tx) and issues the copies; every consumer waits for
// the barrier's phase to flip (mbarrier_wait_parity). The copy engine writes
// shared memory through the async proxy, the proxy wgmma reads through, so a
// landed tile needs no proxy fence and no CTA barrier before the wgmma that
// reads it -- what the cp.async path needed on every tile.
//
// The tensor map (xqajit/tensor_map.h) is built on the host and passed by value
// as a __grid_constant__ kernel parameter: its address is then a param-space
// address the copy instruction accepts, and a graph replay carries it with the
// rest of the launch.

#include "common/types.cuh"
#include "xqajit/tensor_map.h"

namespace xqajit {

typedef unsigned long long u64;  // as in common/wgmma.cuh (a repeated typedef is legal)

__device__ __forceinline__ void mbarrier_init(u32 bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// Ends the barrier's life (before an mbarrier_init reuses its word): no thread may be waiting
// on it and no copy may still complete on it.
__device__ __forceinline__ void mbarrier_inval(u32 bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// Makes mbarrier_init visible to the async proxy (the copy engine) before any copy
// completes on the barrier; a CTA barrier after it publishes it to the other threads.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// This thread's arrival, and `bytes` more that the copies issued next will deliver.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// This thread's arrival (release: its earlier writes are visible to whoever waits for
// the phase).
__device__ __forceinline__ void mbarrier_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// `bytes` more that copies from elsewhere will deliver to this phase, without an
// arrival (the bytes may land before it: the barrier's count of pending bytes goes
// negative until then, and the phase cannot complete before this thread arrives).
__device__ __forceinline__ void mbarrier_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Blocks until the barrier's phase `parity` (0 or 1) has completed.
__device__ __forceinline__ void mbarrier_wait_parity(u32 bar, u32 parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_%=;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// An L2 policy that evicts the copied lines first: every cache row is read once
// per CTA, and keeping it would push out what the next CTAs share (Q, the tables).
__device__ __forceinline__ u64 l2_evict_first_policy() {
  u64 policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// One box of a rank-3 tiled tensor map at element coordinates (c0, c1, c2) ->
// shared memory at `dst`, completing on `bar`.
__device__ __forceinline__ void tma_load_3d(u32 dst, const XqajitTensorMap& map, int c0, int c1, int c2, u32 bar,
                                            u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(policy)
      : "memory");
}

}  // namespace xqajit
