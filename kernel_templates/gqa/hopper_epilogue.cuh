#pragma once
// The hopper GQA kernel's output store: one row's 4 head dims, normalised, scaled
// and converted (common/output.cuh), for the direct, merged and cluster epilogues.

#include "common/output.cuh"
#include "gqa/hopper_config.cuh"

namespace xqajit {
namespace gqa_hopper {

// One query token (kSinksEarly): the kernel copies its CTA's heads' sinks into shared memory
// at its start (a 4-byte cp.async a head, in the first tile's copy group), so the epilogue reads
// them there. Read from global memory, each output vector's sink was a dependent L2 round trip
// on the last CTA's merge tail, where a thread's vectors run one after another (+0.3 us at
// B=1 L=8192 with 16 splits, docs/PERF.md "Session 23" run 6; +1.1 % since, "Session 46" run 5).
// Speculative decoding keeps the global read: the copy for every q_len gained its sinks <= 0.1 us
// and cost one q_len 8 kernel 0.3 us without them ("Session 46" run 7; session 34's form +5 %).
constexpr bool kSinksEarly = kQLen == 1;

// `s_sinks`: the copy, Q heads h * kGroup.. (kSinksEarly; unused otherwise).
__device__ __forceinline__ void store_out(const XqajitDecodeArgs& args, int b, int h, int row, int d,
                                          const float (&o)[4], float row_max, float row_sum, float out_scale,
                                          const float* s_sinks) {
  if constexpr (kSinksEarly)
    store_output_vec<kGroup, kFp8Out, kFp16>(args, b, h, row, d, o, row_max, row_sum, out_scale,
                                             [&](int hq) { return s_sinks[hq - h * kGroup]; });
  else
    store_output_vec<kGroup, kFp8Out, kFp16>(args, b, h, row, d, o, row_max, row_sum, out_scale);
}

}  // namespace gqa_hopper
}  // namespace xqajit
