#pragma once
// The hopper GQA kernel's output store: one row's 4 head dims, normalised, scaled
// and converted (common/output.cuh), for the direct, merged and cluster epilogues.

#include "common/output.cuh"
#include "gqa/hopper_config.cuh"

namespace xqajit {
namespace gqa_hopper {

__device__ __forceinline__ void store_out(const XqajitDecodeArgs& args, int b, int h, int row, int d,
                                          const float (&o)[4], float row_max, float row_sum, float out_scale) {
  store_output_vec<kGroup, kFp8Out, kFp16>(args, b, h, row, d, o, row_max, row_sum, out_scale);
}

}  // namespace gqa_hopper
}  // namespace xqajit
