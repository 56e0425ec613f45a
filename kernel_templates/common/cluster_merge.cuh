#pragma once
// Split-KV merge through a thread-block cluster (sm_90+), shared by every kernel
// family. When the host launches the splits of one merge group as one cluster
// (cluster dims = (num_splits, 1, 1): the split index is the CTA's rank), each
// CTA keeps its partial rows (unnormalised output, max in log2 units, sum) in
// its own shared memory and the cluster merges them through distributed shared
// memory: no workspace writes, no fence, no arrival counter, no second pass
// over L2 -- the tail that is serial time for small batches. Every CTA of the
// cluster merges a share of the output vectors. Launched without a cluster (or
// built for an older arch) `cluster_merge_launch()` is false and the kernel
// takes the workspace path (common/split_merge.cuh).

#include "common/memory.cuh"
#include "common/types.cuh"

namespace xqajit {

constexpr int kMaxClusterSplits = 16;  // the largest (non-portable) cluster on sm_90

// Whether this launch groups the splits into a cluster (uniform over the grid).
__device__ __forceinline__ bool cluster_merge_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  u32 n;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n > 1;
#else
  return false;
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Every thread of every CTA of the cluster; release/acquire order shared-memory
// writes before it against peers' reads after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The address of shared-memory address `addr` (of this CTA) in CTA `rank` of the cluster.
__device__ __forceinline__ u32 cluster_map(u32 addr, int rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ float2 cluster_load_f32x2(u32 addr) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0,%1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ F32x4 cluster_load_f32x4(u32 addr) {
  F32x4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
#endif

// The cluster's merge of `valid_rows` rows of `kDim` floats. Each CTA's partial
// row r lives in its own shared memory: `acc_row(r)` is the shared address of its
// first float (16-byte aligned), `stats_row(r)` that of its [max, sum] pair; the
// same in every CTA (one kernel, one layout). Called by every thread of every CTA
// of the cluster once those rows are written (it synchronises the cluster
// first, and again before returning: no CTA leaves while a peer reads its shared
// memory). `store(row, d, o[4], row_max, row_sum)` writes one output vector.
template <int kDim, int kThreads, typename AccRow, typename StatsRow, typename Store>
__device__ __forceinline__ void cluster_split_merge(int splits, int valid_rows, AccRow&& acc_row,
                                                    StatsRow&& stats_row, Store&& store) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const float kInf = __int_as_float(0x7f800000);
  constexpr int kVecs = kDim / 4;
  u32 rank;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  cluster_sync();
  // Output vectors dealt round-robin over the cluster's CTAs, then its threads.
  // Splits in batches of 8: every load of a batch is issued before the first use
  // (one DSMEM round trip per batch), the running max rescales across batches.
  constexpr int kBatch = 8;
  for (int i = (int)rank + splits * (int)threadIdx.x; i < valid_rows * kVecs; i += splits * kThreads) {
    const int r = i / kVecs, d = (i % kVecs) * 4;
    float m = -kInf, sum = 0.f, o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s0 = 0; s0 < kMaxClusterSplits; s0 += kBatch) {
      if (s0 >= splits) break;
      float2 st[kBatch];
      F32x4 a[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (s0 + j < splits) {
          st[j] = cluster_load_f32x2(cluster_map(stats_row(r), s0 + j));
          a[j] = cluster_load_f32x4(cluster_map(acc_row(r) + 4u * d, s0 + j));
        } else {
          st[j] = make_float2(-kInf, 0.f);
          a[j] = F32x4{0.f, 0.f, 0.f, 0.f};
        }
      }
      float mb = m;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) mb = fmaxf(mb, st[j].x);
      const float rescale = m == -kInf ? 0.f : exp2f(m - mb);  // never -inf - -inf
      sum *= rescale;
      o[0] *= rescale; o[1] *= rescale; o[2] *= rescale; o[3] *= rescale;
      m = mb;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (st[j].x != -kInf) {  // an empty split adds nothing
          const float w = exp2f(st[j].x - m);
          sum += w * st[j].y;
          o[0] += w * a[j].x; o[1] += w * a[j].y; o[2] += w * a[j].z; o[3] += w * a[j].w;
        }
      }
    }
    store(r, d, o, m, sum);
  }
  cluster_sync();
#endif
}

}  // namespace xqajit
