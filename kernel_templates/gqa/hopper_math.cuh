#pragma once
// The hopper GQA kernel's softmax arithmetic: reductions over its key rows (a query
// row's values, row max and row sum, are spread over the 8 key rows of each warp and
// over the 4 warps), the lazy-max threshold, and the register cap that follows from them.

#include "common/transposed_rows.cuh"
#include "gqa/hopper_config.cuh"

namespace xqajit {
namespace gqa_hopper {

// reduce_over_key_rows and store_warp_columns (the reductions over key rows and warps):
// common/transposed_rows.cuh, shared with the MLA kernel's narrow schedule.

// Speculative decoding with an fp8 cache widens N (32 columns at q_len 8, group 4) and
// ptxas would take 155 registers: 3 CTAs per SM where the shared memory holds the 4 of
// the geometry's fp8 rule (ctas_per_sm). Capped there (H200 q_len 8: 222 -> 203-212 us, KERNEL_NOTES
// h5-h6); elsewhere a cap only costs (t128 q_len 1 at 128 registers: 545 -> 561 us).
// The explicit 1 matters too: with it ptxas allocates more freely (fp8 t64 98 -> 113
// registers, still 4 CTAs/SM) and fp8 128x8192 ran 1-2 % faster (h6).
constexpr int kMinCtasPerSm = kFp8Cache && kSpecDec ? kGeo.ctas_per_sm : 1;

// How far (log2 units) a tile's key may lead the running max before the tile takes the
// exact max over the warps (the lazy max in the loop): P <= 2^kMaxLead in fp16 (max 2^15.99).
constexpr float kMaxLead = 8.f;

}  // namespace gqa_hopper
}  // namespace xqajit
