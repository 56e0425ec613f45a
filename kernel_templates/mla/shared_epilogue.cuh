#pragma once
// The MLA epilogue both backends share: final bf16 rows (one split; the hopper backend
// stages them in shared memory, store_rows_staged), or this split's partial rows, then the
// last CTA of the (request, row block) merges
// (common/split_merge.cuh, the same contract as GQA) -- or, where the host plans
// it (args.merge_launch), a second launch merges: xqajit_mla_merge, whose body
// is merge_launch_row below -- or, where the host launched the splits of a
// (request, row block) as one thread-block cluster (MlaDecodePlan::split_cluster,
// hopper), through distributed shared memory (common/cluster_merge.cuh).

#include "common/cluster_merge.cuh"
#include "common/online_softmax.cuh"
#include "common/pdl.cuh"
#include "common/split_merge.cuh"
#include "mla/shared_flags.cuh"
#include "mla/shared_rows.cuh"
#include "mla/shared_split.cuh"

namespace xqajit {
namespace mla {

// Per-thread state of a warp's 16 rows: rows quad_row and quad_row + 8, and
// kAccTiles n8 column tiles of the output.
template <int kAccTiles>
struct RowStateOf {
  float row_max[2], row_sum[2];
  unsigned bits[2];  // visible draft keys of each row
  float acc[kAccTiles][4];
};

// Rows rt * 16 + quad_row (+ 8) of row block rb before the first tile: nothing seen, and
// the drafts each row's query token sees (padding rows take any valid token's: their
// output is dropped).
template <int kRowStride, int kAccTiles>
__device__ __forceinline__ void init_rows(RowStateOf<kAccTiles>& st, const XqajitMlaArgs& args, int b, int rb,
                                          int rt, int quad_row) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int t = (rb * kRowStride + rt * 16 + quad_row + half * 8) / kHeads;
    t = t < kQLen ? t : kQLen - 1;
    st.bits[half] = draft_bits(args, b, t, kQLen);
    st.row_max[half] = -__int_as_float(0x7f800000);
    st.row_sum[half] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < kAccTiles; ++i) st.acc[i][0] = st.acc[i][1] = st.acc[i][2] = st.acc[i][3] = 0.f;
}

// A partial row's floats in the cluster merge, padded off the bank of the next row.
constexpr int kClusterRowStride = kV + 4;
// The cluster merge's shared memory: the partial rows, their (max, sum), their final scales.
template <int kR>
constexpr int cluster_merge_bytes() {
  return kR * kClusterRowStride * 4 + kR * 8 + kR * 4;
}

// A staged bf16 row (store_rows_staged, store_partials_staged<kBf16>): 1040 bytes, so a warp's 8 rows x
// 4 pairs hit 32 banks.
constexpr int kStagedRowStride = kV + 8;
template <int kR>
constexpr int staged_rows_bytes() {
  return kR * kStagedRowStride * 2;
}

struct NoSync {
  __device__ __forceinline__ void operator()() const {}
};

// A split's partial rows (unnormalised) through shared memory (`smem`:
// staged_partials_bytes<kR>(), free once `sync()`, a barrier over the kThreads threads, has seen
// every thread's last read of it), the (max, sum) by their owners in fp32: each thread's pairs
// into its rows there, `sync()`, then every row by 16-byte stores, a warp's 512 contiguous bytes
// an instruction. SplitPartials::store_pair wrote 8-byte pairs, 8 rows x 32 bytes a warp
// instruction, the pattern m67 removed from the one-split rows: m68 took dense H=128 B=1 L=8192
// from 31.7 to 21.1 us and sparse B=32 top-k 2048 from 70.8 to 59.2 (session 38 run 1).
// kBf16 (where a merge launch reads them, m70): the rows as bf16, staged as store_rows_staged
// stages the final rows, into the first half of each slot's fp32 space (slot x kV bf16 from
// partials.acc: the workspace keeps its size). Half of the fp32 rows' bytes, written here and
// read by the merge launch: the round trip had cost dense H=128 B=1 L=8192 (64 splits) 2.3 us
// of 21.1 (session 38 run 3). A bf16 rounding (2^-9 relative) of each split's unnormalised
// rows, which the merge weighs and sums: the output's own rounding.
// Two warpgroups: `dim0` (0 or kV / 2) names the thread's.
constexpr int kStagedPartialStride = kV + 8;  // floats: a half-warp's 4 rows x 4 float2 on distinct banks
template <int kR>
constexpr int staged_partials_bytes() {
  return kR * kStagedPartialStride * 4;
}
// A staged partial row's element, 16-byte chunk and stride (in elements).
template <bool kBf16>
struct StagedPartial {
  using Elem = float;
  using Chunk = F32x4;
  static constexpr int kStride = kStagedPartialStride;
};
template <>
struct StagedPartial<true> {
  using Elem = u16;
  using Chunk = U32x4;
  static constexpr int kStride = kStagedRowStride;
};
template <int kR, int kRowStride, int kRows, int kThreads, bool kBf16, int kAccTiles, class Sync>
__device__ __forceinline__ void store_partials_staged(const SplitPartials<kR, kV>& partials,
                                                      RowStateOf<kAccTiles>& st, unsigned char* smem, int split,
                                                      int rb, int rt, int dim0, bool stats_owner, int lane,
                                                      Sync& sync) {
  using Elem = typename StagedPartial<kBf16>::Elem;
  using Chunk = typename StagedPartial<kBf16>::Chunk;
  constexpr int kStride = StagedPartial<kBf16>::kStride;
  constexpr int kPerChunk = 16 / sizeof(Elem);
  constexpr int kChunks = kV / kPerChunk;  // 16-byte chunks of a row
  Elem* const rows = reinterpret_cast<Elem*>(smem);
  Elem* const out = reinterpret_cast<Elem*>(partials.acc);
  const int quad_row = lane >> 2, quad_col = lane & 3;
  const int first_row = rb * kRowStride;
  const int tid = ((dim0 / (kV / 2)) * 4 + rt) * 32 + lane;
  sync();  // the schedule's last reads of shared memory are done
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = rt * 16 + quad_row + half * 8;
#pragma unroll
    for (int i = 0; i < kAccTiles; ++i) {
      Elem* const pair = rows + r * kStride + dim0 + i * 8 + 2 * quad_col;
      if constexpr (kBf16)
        *reinterpret_cast<u32*>(pair) = pack_f32x2<false>(st.acc[i][2 * half], st.acc[i][2 * half + 1]);
      else
        *reinterpret_cast<float2*>(pair) = make_float2(st.acc[i][2 * half], st.acc[i][2 * half + 1]);
    }
    if (stats_owner && quad_col == 0 && real_row<kR, kRowStride, kRows>(r, first_row + r))
      partials.store_stats(split, r, st.row_max[half], st.row_sum[half]);
  }
  sync();
  for (int c = tid; c < kR * kChunks; c += kThreads) {
    const int r = c / kChunks, chunk = c % kChunks;
    if (real_row<kR, kRowStride, kRows>(r, first_row + r))  // padding rows are neither stored nor merged
      *reinterpret_cast<Chunk*>(out + partials.at(split, r, chunk * kPerChunk)) =
          *reinterpret_cast<const Chunk*>(rows + r * kStride + chunk * kPerChunk);
  }
}

// The split grid's merge group of (request b, row block rb): num_splits slots of its own,
// which its splits store (finish_rows) and the merge launch reads (merge_launch_row).
template <int kR>
__device__ __forceinline__ SplitPartials<kR, kV> split_group(const XqajitMlaArgs& args, int rb, int b) {
  return SplitPartials<kR, kV>(args.partial, (long long)args.batch * gridDim.y, args.num_splits,
                               (long long)b * gridDim.y + rb);
}

// Warp row tile `rt` holds rows 16 rt.. and output dims dim0..; `stats_owner`:
// this warp writes the rows' (max, sum) partials (one warp per row tile). Row r of the
// CTA is the request's rb * kRowStride + r (shared_rows.cuh's real_row).
// kClusterMerge: the kernel may run as split clusters (the host decides per launch).
// kStagePartials: a split's partial rows go through shared memory (store_partials_staged; `sync`
// a barrier over the kThreads threads), as bf16 where a merge launch reads them
// (merge_launch_row's kBf16Partials).
template <int kR, int kRowStride, int kRows, int kThreads, bool kClusterMerge, bool kStagePartials = false,
          int kAccTiles, class Sync = NoSync>
__device__ __forceinline__ void finish_rows(const XqajitMlaArgs& args, RowStateOf<kAccTiles>& st,
                                            unsigned char* smem, int merge_bytes, int* s_is_last, int split,
                                            int rb, int b, int rt, int dim0, bool stats_owner, float kv_scale,
                                            int lane, Sync sync = {}) {
  const int quad_row = lane >> 2, quad_col = lane & 3;
  st.row_sum[0] = quad_sum(st.row_sum[0]);
  st.row_sum[1] = quad_sum(st.row_sum[1]);
  const bool multi = args.num_splits > 1;
  const long long cta_id = (long long)b * gridDim.y + rb;
  const int first_row = rb * kRowStride;
  const int valid_rows = kRows - first_row < kRowStride ? kRows - first_row : kRowStride;
  // A merged row -> its bf16 output, LSE and sink (every merge path).
  const auto store_merged = [&](int r, int d, const float(&o)[4], float m, float sum) {
    const float scale =
        row_extras<kHeads>(args, b, first_row + r, m, sum, row_out_scale(m, sum, kv_scale), d == 0);
    store_out_pair<kHeads>(args, b, first_row + r, d, o[0], o[1], scale);
    store_out_pair<kHeads>(args, b, first_row + r, d + 2, o[2], o[3], scale);
  };
  if constexpr (kClusterMerge) {
    if (splits_form_cluster(args.num_splits)) {
      // This CTA's partial rows -> its own shared memory, where the cluster's splits read
      // them: no workspace round trip and no merge launch (B=32 H=128 with two splits
      // spent ~25 us on those, session 22 run 5).
      constexpr int kAccStride = kClusterRowStride;
      float* const acc = reinterpret_cast<float*>(smem);
      float* const stats = acc + kR * kAccStride;
      __syncthreads();  // the pipeline region is free
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = rt * 16 + quad_row + half * 8;
#pragma unroll
        for (int i = 0; i < kAccTiles; ++i) {
          const int d = dim0 + i * 8 + 2 * quad_col;
          *reinterpret_cast<float2*>(acc + r * kAccStride + d) =
              make_float2(st.acc[i][2 * half], st.acc[i][2 * half + 1]);
        }
        if (stats_owner && quad_col == 0) stats[2 * r] = st.row_max[half], stats[2 * r + 1] = st.row_sum[half];
      }
      if (args.lse == nullptr && args.attn_sink == nullptr) {
        split_merge_in_cluster<kV, kThreads>(acc, kAccStride, stats, args.num_splits, valid_rows,
                                             store_merged);
        return;
      }
      // lse or sinks: each row's final scale once, not once per output vector on the merge's
      // serial tail (that cost B=32 H=128 +4 % for lse, +8 % with sinks; session 22 run 15).
      float* const row_scale = stats + 2 * kR;
      cluster_sync();  // every split's (max, sum) is in its shared memory
      const int split_id = static_cast<int>(cluster_cta_x());
      const u32 rank0 = cluster_cta_rank() - static_cast<u32>(split_id);
      for (int r = threadIdx.x; r < valid_rows; r += kThreads) {
        float m[kXqajitMlaClusterSplits], l[kXqajitMlaClusterSplits];
        float row_max = -__int_as_float(0x7f800000), sum = 0.f;
#pragma unroll
        for (int p = 0; p < kXqajitMlaClusterSplits; ++p) {
          m[p] = -__int_as_float(0x7f800000), l[p] = 0.f;
          if (p < args.num_splits) ld_peer_f32x2(peer_smem_addr(smem_addr(stats + 2 * r), rank0 + p), m[p], l[p]);
          row_max = fmaxf(row_max, m[p]);
        }
#pragma unroll
        for (int p = 0; p < kXqajitMlaClusterSplits; ++p)
          if (m[p] != -__int_as_float(0x7f800000)) sum += l[p] * exp2f(m[p] - row_max);
        row_scale[r] = row_extras<kHeads>(args, b, first_row + r, row_max, sum,
                                          row_out_scale(row_max, sum, kv_scale), split_id == 0);
      }
      // (the merge's own cluster barrier orders these before its stores read them)
      split_merge_in_cluster<kV, kThreads>(
          acc, kAccStride, stats, args.num_splits, valid_rows,
          [&](int r, int d, const float(&o)[4], float, float) {
            store_out_pair<kHeads>(args, b, first_row + r, d, o[0], o[1], row_scale[r]);
            store_out_pair<kHeads>(args, b, first_row + r, d + 2, o[2], o[3], row_scale[r]);
          });
      return;
    }
  }
  const SplitPartials<kR, kV> partials = split_group<kR>(args, rb, b);
  // Once this split's partials are out: the last split of the (request, row block) merges them.
  const auto merge_if_last = [&] {
    if (!split_arrive_last(args.counters + cta_id, (unsigned)args.num_splits, s_is_last)) return;
    __syncthreads();  // the pipeline region becomes the merge buffer
    split_merge<kR, kV, kThreads>(smem, merge_bytes, partials, valid_rows, store_merged);
  };
  if constexpr (kStagePartials) {
    if (multi) {  // m68: the partial rows through shared memory, 16-byte stores
      if (args.merge_launch) {  // m70: as bf16
        store_partials_staged<kR, kRowStride, kRows, kThreads, true>(partials, st, smem, split, rb, rt, dim0,
                                                                     stats_owner, lane, sync);
        return;
      }
      store_partials_staged<kR, kRowStride, kRows, kThreads, false>(partials, st, smem, split, rb, rt, dim0,
                                                                    stats_owner, lane, sync);
      merge_if_last();
      return;
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = rt * 16 + quad_row + half * 8, row = first_row + r;
    if (!real_row<kR, kRowStride, kRows>(r, row)) continue;  // padding rows are neither stored nor merged
    float scale = row_out_scale(st.row_max[half], st.row_sum[half], kv_scale);
    if (!multi)
      scale = row_extras<kHeads>(args, b, row, st.row_max[half], st.row_sum[half], scale, stats_owner && quad_col == 0);
#pragma unroll
    for (int i = 0; i < kAccTiles; ++i) {
      const int d = dim0 + i * 8 + 2 * quad_col;
      if (multi) partials.store_pair(split, r, d, st.acc[i][2 * half], st.acc[i][2 * half + 1]);
      else store_out_pair<kHeads>(args, b, row, d, st.acc[i][2 * half], st.acc[i][2 * half + 1], scale);
    }
    if (multi && stats_owner && quad_col == 0) partials.store_stats(split, r, st.row_max[half], st.row_sum[half]);
  }
  if (!multi || args.merge_launch) return;
  merge_if_last();
}

// One split's final rows through shared memory (`smem`: staged_rows_bytes<kR>(), 16-byte
// aligned, free once `sync()`, a barrier over the kThreads threads, has seen every thread's
// last read of it): each thread's pairs of O, scaled, into its rows there, `sync()`, then every
// row's 1 KB by 16-byte stores, a warp's 512 contiguous bytes an instruction. Straight from the
// accumulators (finish_rows: 4-byte pairs, 8 rows x 16 bytes a warp instruction) the epilogue
// took ~10 us a CTA of the sparse H=128 kernel (session 37 run 7). `tid`: 0..kThreads-1.
template <int kR, int kRowStride, int kRows, int kThreads, int kAccTiles, class Sync>
__device__ __forceinline__ void store_rows_staged(const XqajitMlaArgs& args, RowStateOf<kAccTiles>& st,
                                                  unsigned char* smem, int rb, int b, int rt, int dim0,
                                                  bool stats_owner, float kv_scale, int lane, int tid, Sync&& sync) {
  constexpr int kStride = kStagedRowStride;
  constexpr int kChunks = kV / 8;  // 16-byte chunks of a row
  u16* const rows = reinterpret_cast<u16*>(smem);
  const int quad_row = lane >> 2, quad_col = lane & 3;
  const int first_row = rb * kRowStride;
  sync();  // the schedule's last reads of shared memory are done
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = quad_sum(st.row_sum[half]);
    const int r = rt * 16 + quad_row + half * 8, row = first_row + r;
    float scale = row_out_scale(st.row_max[half], sum, kv_scale);
    if (real_row<kR, kRowStride, kRows>(r, row))
      scale = row_extras<kHeads>(args, b, row, st.row_max[half], sum, scale, stats_owner && quad_col == 0);
#pragma unroll
    for (int i = 0; i < kAccTiles; ++i)
      *reinterpret_cast<u32*>(rows + r * kStride + dim0 + i * 8 + 2 * quad_col) =
          pack_f32x2<false>(st.acc[i][2 * half] * scale, st.acc[i][2 * half + 1] * scale);
  }
  sync();
  for (int c = tid; c < kR * kChunks; c += kThreads) {
    const int r = c / kChunks, chunk = c % kChunks, row = first_row + r;
    if (real_row<kR, kRowStride, kRows>(r, row))  // padding rows are not stored
      store_out_chunk<kHeads>(args, b, row, chunk, *reinterpret_cast<const U32x4*>(rows + r * kStride + chunk * 8));
  }
}

// One CTA of xqajit_mla_merge: grid (rows_per_cta, row_blocks, batch), 128 threads
// (a vector of 4 dims each) times the split groups the host picks, 1-4; merges row
// blockIdx.x of row block blockIdx.y of request blockIdx.z over every split.
constexpr int kMergeMaxGroups = kXqajitMlaMergeMaxGroups;  // the host sizes the block (mla_args.h)
constexpr int kMergeMaxThreads = kMergeMaxGroups * kV / 4;
constexpr int kMergeMaxSplits = 64;  // the host's kMaxSplits (split_plan.hpp)

// The merge launches' finish of request b's row `row` (split_row_weights' `finish`): its sink
// asked for now, beside the row's statistics, then (max, sum) -> the row's output scale, its
// lse stored. Read on each output vector's tail instead, the sink cost sparse H=128 B=1 and
// dense H=16 B=1 L=8192 ~2 % (session 46 run 6).
__device__ __forceinline__ auto merged_row_finish(const XqajitMlaArgs& args, int b, int row, float kv_scale) {
  const float sink = args.attn_sink != nullptr ? args.attn_sink[row % kHeads] : 0.f;
  return [&args, b, row, kv_scale, sink](float m, float sum) {
    return row_extras<kHeads>(args, b, row, m, sum, row_out_scale(m, sum, kv_scale), true,
                              [sink](int) { return sink; });
  };
}

// A merged row's 4-wide vector times its scale -> its bf16 output (the merge launches').
__device__ __forceinline__ void store_merged(const XqajitMlaArgs& args, int b, int row, int d, const float (&o)[4],
                                             float scale) {
  store_out_pair<kHeads>(args, b, row, d, o[0], o[1], scale);
  store_out_pair<kHeads>(args, b, row, d + 2, o[2], o[3], scale);
}

// Both merge launches, once their CTA's rows are real: `merge(partials, kv_scale)` over
// `group(rb, b)`, the SplitPartials of (request b, row block rb), unless (kMayBeWhole) that
// request ran whole and stored its final rows itself.
template <bool kMayBeWhole, class Group, class Merge>
__device__ __forceinline__ void merge_group_rows(const XqajitMlaArgs& args, Group& group, int rb, int b,
                                                 Merge&& merge) {
  const float kv_scale = scales(args).kv;
  const auto partials = group(rb, b);
  if (kMayBeWhole && partials.splits < 2) return;
  merge(partials, kv_scale);
}

// kBf16Partials: the decode kernel stored them as bf16 (store_partials_staged<kBf16>).
// `group(rb, b)`: the SplitPartials of (request b, row block rb): split_group, or (kMayBeWhole)
// a group whose request may have run whole, its final rows stored (fewer than two splits: the
// hopper balanced plan's shares, m84).
template <int kR, int kRowStride, int kRows, bool kBf16Partials = false, bool kMayBeWhole = false, class Group>
__device__ __forceinline__ void merge_launch_row(const XqajitMlaArgs& args, Group&& group) {
  const int r = blockIdx.x, rb = blockIdx.y, b = blockIdx.z;
  pdl_wait();  // the partials are the decode grid's
  pdl_launch_dependents();
  const int row = rb * kRowStride + r;
  if (!real_row<kR, kRowStride, kRows>(r, row)) return;  // padding rows
  merge_group_rows<kMayBeWhole>(args, group, rb, b, [&](const SplitPartials<kR, kV>& partials, float kv_scale) {
    split_merge_row<kR, kV, kMergeMaxSplits, kMergeMaxGroups, kBf16Partials>(
        partials, r, [&](int) { return merged_row_finish(args, b, row, kv_scale); },
        [&](int d, const float(&o)[4], float scale) { store_merged(args, b, row, d, o, scale); });
  });
}

// One CTA of xqajit_mla_merge_rows (m92; hopper, where every row has few splits:
// MlaDecodePlan::merge_rows): grid (ceil(a row block's real rows / kXqajitMlaMergeRows),
// row_blocks, batch), kXqajitMlaMergeRowsThreads threads; merges rows blockIdx.x x
// kXqajitMlaMergeRows.. of row block blockIdx.y of request blockIdx.z over every split. `group`
// as merge_launch_row's.
template <int kR, int kRowStride, int kRows, bool kBf16Partials = false, bool kMayBeWhole = false, class Group>
__device__ __forceinline__ void merge_launch_rows(const XqajitMlaArgs& args, Group&& group) {
  static_assert(kXqajitMlaMergeRows == kV / 32 && kXqajitMlaMergeRowsThreads == kV,
                "split_merge_rows: a warp a row, four groups of kV / 4 threads");
  const int r0 = blockIdx.x * kXqajitMlaMergeRows, rb = blockIdx.y, b = blockIdx.z;
  pdl_wait();  // the partials are the decode grid's
  pdl_launch_dependents();
  // The row block's real rows (real_row): its first kRowStride, and none past the request's.
  const int block_rows = kRowStride < kRows - rb * kRowStride ? kRowStride : kRows - rb * kRowStride;
  const int num_rows = block_rows - r0 < kXqajitMlaMergeRows ? block_rows - r0 : kXqajitMlaMergeRows;
  if (num_rows <= 0) return;
  merge_group_rows<kMayBeWhole>(args, group, rb, b, [&](const SplitPartials<kR, kV>& partials, float kv_scale) {
    split_merge_rows<kR, kV, kMergeMaxSplits, kBf16Partials>(
        partials, r0, num_rows,
        [&](int r) { return merged_row_finish(args, b, rb * kRowStride + r, kv_scale); },
        [&](int i, int d, const float(&o)[4], float scale) {
          store_merged(args, b, rb * kRowStride + r0 + i, d, o, scale);
        });
  });
}

}  // namespace mla
}  // namespace xqajit
