#pragma once
// Portable MLA backend, the epilogue: final bf16 rows (one split), or this
// split's partial rows, then the last CTA of the (request, row block) merges
// (common/split_merge.cuh, the same contract as GQA).

#include "mla/portable_config.cuh"
#include "mla/portable_math.cuh"
#include "mla/shared_epilogue.cuh"

namespace xqajit {
namespace mla_portable {

__device__ __forceinline__ void finish_rows(const XqajitMlaArgs& args, RowState& st, unsigned char* smem, int* s_is_last,
                                            int split, int rb, int b, int rt, int slice, float kv_scale, int lane) {
  mla::finish_rows<kR, kR, kRows, kThreads, false>(args, st, smem, kGeo.merge_bytes, s_is_last, split, rb, b,
                                                   rt, slice * kSliceDims, slice == 0, kv_scale, lane);
}

}  // namespace mla_portable
}  // namespace xqajit
