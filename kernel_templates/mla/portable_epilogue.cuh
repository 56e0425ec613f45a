#pragma once
// Portable MLA backend, the epilogue: final bf16 rows (one split), or this
// split's partial rows, then the last CTA of the (request, row block) merges
// (common/split_merge.cuh, the same contract as GQA).

#include "common/split_merge.cuh"
#include "mla/portable_config.cuh"
#include "mla/portable_math.cuh"
#include "mla/shared_rows.cuh"

namespace xqajit {
namespace mla_portable {

__device__ __forceinline__ void finish_rows(const XqajitMlaArgs& args, RowState& st, unsigned char* smem, int* s_is_last,
                                            int split, int rb, int b, int rt, int slice, float kv_scale, int lane) {
  const int quad_row = lane >> 2, quad_col = lane & 3;
  const int dim0 = slice * kSliceDims;
  st.row_sum[0] = quad_sum(st.row_sum[0]);
  st.row_sum[1] = quad_sum(st.row_sum[1]);
  const bool multi = args.num_splits > 1;
  const long long cta_id = (long long)b * gridDim.y + rb;
  const SplitPartials<kR, kV> partials(args.partial, (long long)args.batch * gridDim.y, args.num_splits, cta_id);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = rt * 16 + quad_row + half * 8, row = rb * kR + r;
    if (row >= kRows) continue;  // padding rows are neither stored nor merged
    const float scale = mla::row_out_scale(st.row_max[half], st.row_sum[half], kv_scale);
#pragma unroll
    for (int i = 0; i < kDimTiles; ++i) {
      const int d = dim0 + i * 8 + 2 * quad_col;
      if (multi) partials.store_pair(split, r, d, st.acc[i][2 * half], st.acc[i][2 * half + 1]);
      else mla::store_out_pair<kHeads>(args, b, row, d, st.acc[i][2 * half], st.acc[i][2 * half + 1], scale);
    }
    if (multi && slice == 0 && quad_col == 0) partials.store_stats(split, r, st.row_max[half], st.row_sum[half]);
  }
  if (!multi) return;

  if (!split_arrive_last(args.counters + cta_id, (unsigned)args.num_splits, s_is_last)) return;
  __syncthreads();  // the pipeline region becomes the merge buffer
  const int valid_rows = kRows - rb * kR < kR ? kRows - rb * kR : kR;
  split_merge<kR, kV, kThreads>(smem, kGeo.merge_bytes, partials, valid_rows,
                                [&](int r, int d, const float(&o)[4], float m, float sum) {
                                  const float scale = mla::row_out_scale(m, sum, kv_scale);
                                  mla::store_out_pair<kHeads>(args, b, rb * kR + r, d, o[0], o[1], scale);
                                  mla::store_out_pair<kHeads>(args, b, rb * kR + r, d + 2, o[2], o[3], scale);
                                });
}

}  // namespace mla_portable
}  // namespace xqajit
