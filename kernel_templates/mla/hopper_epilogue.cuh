#pragma once
// Hopper MLA backend, the epilogue: final bf16 rows (one split), or this
// split's partial rows, then the last CTA of the (request, row block) merges
// (common/split_merge.cuh, the same contract as GQA and the portable backend).

#include "common/split_merge.cuh"
#include "mla/balanced_plan.h"
#include "mla/hopper_config.cuh"
#include "mla/hopper_math.cuh"
#include "mla/shared_epilogue.cuh"

namespace xqajit {
namespace mla_hopper {

static_assert(mla::cluster_merge_bytes<kR>() <= kGeo.merge_bytes, "a split cluster's partial rows fit shared memory");
static_assert(mla::staged_rows_bytes<kR>() <= kSmemEnd, "one split's staged rows fit shared memory");
// Splits stage their partial rows where those fit (m68).
constexpr bool kStagePartials = mla::staged_partials_bytes<kR>() <= kSmemEnd;

// Warp `rt` (0..3) of warpgroup `wg` holds rows 16rt.. and dims 256wg.. of O. One split: the
// rows through shared memory, which every schedule has left free here (m67); splits: their
// partial rows so too (m68).
__device__ __forceinline__ void finish_rows(const XqajitMlaArgs& args, RowState& st, unsigned char* smem,
                                            int* s_is_last, int split, int rb, int b, int rt, int wg, float kv_scale,
                                            int lane) {
  if (args.num_splits == 1) {
    mla::store_rows_staged<kR, kRowStride, kRows, kThreads>(args, st, smem, rb, b, rt, wg * kWgDims, wg == 0,
                                                            kv_scale, lane, (wg * 4 + rt) * 32 + lane,
                                                            [] { math_sync(); });
    return;
  }
  mla::finish_rows<kR, kRowStride, kRows, kThreads, true, kStagePartials>(
      args, st, smem, kGeo.merge_bytes, s_is_last, split, rb, b, rt, wg * kWgDims, wg == 0, kv_scale, lane,
      [] { math_sync(); });
}

// The last piece of a cut request to arrive (m77b, m77c): the other pieces' partial rows (bf16,
// m70's rounding, staged as final rows are), one piece at a time by 16-byte copies into shared
// memory, folded into this CTA's own rows in registers (whose sums are whole, quad_sum'd).
// split_merge instead read every piece's fp32 rows back from the workspace, this CTA's own too,
// a few loads in flight a thread, and stored 4-byte pairs: ~20 us a launch at H=128 B=64 L=8192
// (session 41 runs 6-7).
constexpr int kFoldRowsBytes = mla::staged_rows_bytes<kR>();  // the staged rows, then their stats
static_assert(kFoldRowsBytes + kR * 8 <= kSmemEnd, "a piece's partial rows and stats fit shared memory");
__device__ __forceinline__ void fold_other_pieces(RowState& st, const SplitPartials<kR, kV>& partials, int own,
                                                  unsigned char* smem, int valid_rows, int rt, int dim0, int lane) {
  constexpr int kStride = mla::kStagedRowStride;
  constexpr int kChunks = kV / 8;  // 16-byte chunks of a bf16 row
  u16* const rows = reinterpret_cast<u16*>(smem);
  float* const stats = reinterpret_cast<float*>(smem + kFoldRowsBytes);  // [row][max, sum]
  const u16* const acc = reinterpret_cast<const u16*>(partials.acc);
  const int tid = threadIdx.x, quad_row = lane >> 2, quad_col = lane & 3;
  const float kInf = __int_as_float(0x7f800000);
  for (int j = 0; j < partials.splits; ++j) {
    if (j == own) continue;
    __syncthreads();  // every thread's reads of the region are done
    for (int c = tid; c < valid_rows * kChunks; c += kThreads) {
      const int r = c / kChunks, chunk = c % kChunks;
      cp_async_16(smem_addr(rows + r * kStride + chunk * 8), acc + partials.at(j, r, chunk * 8), true);
    }
    if (tid < kR / 2) cp_async_16(smem_addr(stats + tid * 4), partials.stats + partials.slot(j, 2 * tid) * 2, true);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = rt * 16 + quad_row + half * 8;
      const float m = stats[2 * r], l = stats[2 * r + 1];
      const float row_max = fmaxf(st.row_max[half], m);
      const float own_w = st.row_max[half] == -kInf ? 0.f : exp2f(st.row_max[half] - row_max);
      const float w = m == -kInf ? 0.f : exp2f(m - row_max);
#pragma unroll
      for (int i = 0; i < kAccTiles; ++i) {
        float x, y;
        unpack_x2<false>(*reinterpret_cast<const u32*>(rows + r * kStride + dim0 + i * 8 + 2 * quad_col), x, y);
        st.acc[i][2 * half] = st.acc[i][2 * half] * own_w + w * x;
        st.acc[i][2 * half + 1] = st.acc[i][2 * half + 1] * own_w + w * y;
      }
      st.row_sum[half] = st.row_sum[half] * own_w + l * w;
      st.row_max[half] = row_max;
    }
  }
}

// `splits` slots from slot `first` of row block rb's 2 Z in the balanced grid's workspace (its two
// forms alike, mla/balanced_plan.h): a request's pieces' partial rows, or the shares' table.
__device__ __forceinline__ SplitPartials<kR, kV> balanced_group(const XqajitMlaArgs& args, int rb, int row_blocks,
                                                                int first, int splits) {
  const int block_slots = 2 * args.balanced_parts;
  return SplitPartials<kR, kV>(args.partial, SlotRange{row_blocks * block_slots, rb * block_slots + first}, splits);
}

// A piece of the balanced plan (m77, mla/balanced_plan.h; grid (row blocks, Z + B)): final rows
// where it is all of its request; else its partial rows (bf16) into its slot of the request's,
// and the request's last piece to arrive folds the others' into its own and stores the final rows.
__device__ __forceinline__ void finish_piece(const XqajitMlaArgs& args, RowState& st, unsigned char* smem,
                                             int* s_is_last, const mla::BalancedPiece& pc, int rb, int rt, int wg,
                                             float kv_scale, int lane) {
  const auto sync = [] { math_sync(); };
  const int tid = (wg * 4 + rt) * 32 + lane;
  if (pc.splits > 1) {
    static_assert(kStagePartials, "the balanced plan stages its partial rows");
    st.row_sum[0] = quad_sum(st.row_sum[0]);
    st.row_sum[1] = quad_sum(st.row_sum[1]);
    const SplitPartials<kR, kV> partials = balanced_group(args, rb, gridDim.x, pc.first_slot, pc.splits);
    if (args.merge_launch) {  // a small batch's shares (m84): the merge launch folds them
      auto staged_sync = sync;
      mla::store_partials_staged<kR, kRowStride, kRows, kThreads, true>(partials, st, smem, pc.index, rb, rt,
                                                                         wg * kWgDims, wg == 0, lane, staged_sync);
      return;
    }
    unsigned* const counter = args.counters + (long long)pc.b * gridDim.x + rb;
    // A piece that finds every other piece counted is the last and stores no partial rows of its
    // own (m77c): at B=64 every walker's last piece would write them at the launch's end at once.
    if (!split_others_arrived(counter, (unsigned)pc.splits, s_is_last)) {
      auto staged_sync = sync;
      mla::store_partials_staged<kR, kRowStride, kRows, kThreads, true>(partials, st, smem, pc.index, rb, rt,
                                                                         wg * kWgDims, wg == 0, lane, staged_sync);
      if (!split_arrive_last(counter, (unsigned)pc.splits, s_is_last)) return;
    }
    const int first_row = rb * kRowStride;
    fold_other_pieces(st, partials, pc.index, smem, kRows - first_row < kRowStride ? kRows - first_row : kRowStride,
                      rt, wg * kWgDims, lane);
    // store_rows_staged sums each row's quad: the whole sum on one lane of it.
    st.row_sum[0] = (lane & 3) == 0 ? st.row_sum[0] : 0.f;
    st.row_sum[1] = (lane & 3) == 0 ? st.row_sum[1] : 0.f;
  }
  mla::store_rows_staged<kR, kRowStride, kRows, kThreads>(args, st, smem, rb, pc.b, rt, wg * kWgDims, wg == 0,
                                                          kv_scale, lane, tid, sync);
}

}  // namespace mla_hopper
}  // namespace xqajit
