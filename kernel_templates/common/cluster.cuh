#pragma once
// Thread-block clusters (sm_90+): where this CTA sits in its cluster, the
// cluster-wide barrier, and a peer CTA's shared memory (distributed shared memory):
// loads from it, arrivals on its barriers and bulk copies into it. Launched without
// a cluster, a CTA is a cluster of one.

#include "common/memory.cuh"
#include "common/types.cuh"

namespace xqajit {

// The cluster's extent along the grid's x, this CTA's place along it, and its rank
// (x fastest) in the whole cluster.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define XQAJIT_SREG(name, fallback)                \
  u32 v;                                           \
  asm("mov.u32 %0, %%" name ";" : "=r"(v));        \
  return v
#else
#define XQAJIT_SREG(name, fallback) return fallback
#endif
__device__ __forceinline__ u32 cluster_dim_x() { XQAJIT_SREG("cluster_nctaid.x", 1u); }
__device__ __forceinline__ u32 cluster_cta_x() { XQAJIT_SREG("cluster_ctaid.x", 0u); }
__device__ __forceinline__ u32 cluster_cta_rank() { XQAJIT_SREG("cluster_ctarank", 0u); }
#undef XQAJIT_SREG

// Every thread of every CTA of the cluster: the writes to shared memory before
// it are visible to the peers' distributed-shared-memory reads after it.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// Every thread of every CTA of the cluster, no ordering: after it no peer will
// read this CTA's shared memory any more (a CTA may leave only then).
__device__ __forceinline__ void cluster_sync_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// The address of `local` (a shared::cta address of this CTA) in the cluster CTA `rank`.
__device__ __forceinline__ u32 peer_smem_addr(u32 local, u32 rank) {
  u32 remote = local;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
#endif
  return remote;
}
__device__ __forceinline__ F32x4 ld_peer_f32x4(u32 addr) {
  F32x4 v{};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
#endif
  return v;
}
__device__ __forceinline__ void ld_peer_f32x2(u32 addr, float& x, float& y) {
  x = y = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v2.f32 {%0,%1}, [%2];" : "=f"(x), "=f"(y) : "r"(addr) : "memory");
#endif
}

// An arrival on the barrier at `remote` (a shared::cluster address, peer_smem_addr) that
// says this thread is done reading what the barrier guards (a consumer's release: CUTLASS's
// cluster pipelines arrive so). Release at CTA scope: at cluster scope ptxas puts a
// MEMBAR.ALL.GPU before each arrival, on the math warps' chain once a tile (m58).
__device__ __forceinline__ void mbarrier_arrive_remote(u32 remote) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.release.cta.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
#endif
}

// `bytes` (a multiple of 16) of this CTA's shared memory at `local` -> a peer's at `remote`
// by the bulk copy engine, completing as transaction bytes of the current phase of the
// peer's barrier at `remote_bar` (both shared::cluster addresses of the same CTA; all three
// 16-byte aligned). Asynchronous: the peer sees the bytes once it has waited for that phase,
// and `local` must not change before then. (The engine reads shared memory through the
// async proxy: a thread's earlier st.shared there needs fence.proxy.async first.)
__device__ __forceinline__ void bulk_copy_to_peer(u32 remote, u32 local, u32 bytes, u32 remote_bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          remote),
      "r"(local), "r"(bytes), "r"(remote_bar)
      : "memory");
#endif
}

}  // namespace xqajit
