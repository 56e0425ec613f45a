#pragma once
// Split-KV merged through distributed shared memory: where the launch made the
// splits of one merge group a thread-block cluster along the grid's x
// (DecodePlan::split_cluster), each CTA keeps its partial rows in its own shared
// memory and the splits merge them together, each a share of the output vectors,
// reading every peer's rows over the cluster's network. No workspace round trip,
// no fence and no arrival counter: the global-memory merge tail
// (common/split_merge.cuh) costs 1.7-2.7 us at small batch (docs/KERNEL_NOTES.md h26).

#include "common/cluster.cuh"
#include "common/memory.cuh"
#include "common/mma.cuh"
#include "common/types.cuh"
#include "xqajit/decode_args.h"

namespace xqajit {

// True when this launch merges its splits in the cluster: the cluster spans all of them.
__device__ __forceinline__ bool splits_form_cluster(int num_splits) {
  return num_splits > 1 && num_splits <= xqajit_max_cluster_splits && cluster_dim_x() == (u32)num_splits;
}

// Called by every thread of every split of the cluster once `acc` ([row][acc_stride]
// floats, unnormalised) and `stats` ([row][max in log2 units, sum]) hold this CTA's
// partial rows in shared memory. `store(row, d, o[4], row_max, row_sum)` writes one
// 4-wide output vector of the merged rows (as split_merge's).
//
// Output vector i is merged by split i % splits, so every CTA takes an equal share,
// and within a CTA by a group of `lanes` adjacent lanes (a power of two >= splits),
// lane j reading split j's values: one network round trip, a few registers, and
// shuffles for the max and the weighted sums.
template <int kDim, int kThreads, typename Store>
__device__ __forceinline__ void split_merge_in_cluster(const float* acc, int acc_stride, const float* stats,
                                                       int splits, int valid_rows, Store&& store) {
  const float kInf = __int_as_float(0x7f800000);
  constexpr int kVecs = kDim / 4;
  const int split = (int)cluster_cta_x();
  const u32 rank0 = cluster_cta_rank() - (u32)split;  // the peers: ranks rank0 .. rank0 + splits - 1
  const u32 acc_local = smem_addr(acc), stats_local = smem_addr(stats);
  static_assert(xqajit_max_cluster_splits <= 8, "a lane group of 8 covers the splits");
  const int lanes = splits <= 2 ? 2 : splits <= 4 ? 4 : 8;
  const int peer = (int)threadIdx.x % lanes;
  const int per_pass = kThreads / lanes * splits;  // output vectors the cluster merges per pass
  cluster_sync();  // every peer's partial rows are in its shared memory

  for (int first = 0; first < valid_rows * kVecs; first += per_pass) {  // the same trip count for all
    const int i = first + split + splits * ((int)threadIdx.x / lanes);
    const int r = i / kVecs, d = (i % kVecs) * 4;
    const bool live = i < valid_rows * kVecs;
    float m = -kInf, l = 0.f;
    F32x4 a{0.f, 0.f, 0.f, 0.f};
    if (live && peer < splits) {
      ld_peer_f32x2(peer_smem_addr(stats_local + r * 8, rank0 + peer), m, l);
      a = ld_peer_f32x4(peer_smem_addr(acc_local + (r * acc_stride + d) * 4, rank0 + peer));
    }
    float row_max = m;
    for (int o = 1; o < lanes; o <<= 1) row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, o));
    const float w = m == -kInf ? 0.f : exp2f(m - row_max);  // an empty split (or no split) weighs nothing
    float v[5] = {w * l, w * a.x, w * a.y, w * a.z, w * a.w};
    for (int o = 1; o < lanes; o <<= 1)
#pragma unroll
      for (int k = 0; k < 5; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
    const float out[4] = {v[1], v[2], v[3], v[4]};
    if (live && peer == 0) store(r, d, out, row_max, v[0]);
  }
  cluster_sync_relaxed();  // no CTA leaves while a peer may still read its rows
}

}  // namespace xqajit
