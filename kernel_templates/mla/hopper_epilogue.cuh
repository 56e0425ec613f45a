#pragma once
// Hopper MLA backend, the epilogue: final bf16 rows (one split), or this
// split's partial rows, then the last CTA of the (request, row block) merges
// (common/split_merge.cuh, the same contract as GQA and the portable backend).

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

}  // namespace mla_hopper
}  // namespace xqajit
