#pragma once
// Where the hopper GQA kernel's values live: the swizzled shared-memory operands
// of its wgmmas, the accumulator registers a thread holds, and the head-dim
// permutations of the fp8 path. gqa_decode_hopper.cu's header tells the design;
// the maps the helpers below implement:
//
// fp8 fragment maps (r = lane / 4, c = lane % 4, w = warp):
//  * S^T, A = K: k-step 4g + s of thread (r, c) reads bytes 4s..4s+3 of the
//    16-byte chunk 4g + c of key rows r and r + 8: logical head dim 16 (4g + s)
//    + {2c, 2c+1 | 2c+8, 2c+9} is actual dim 64 g + 16 c + 4 s + {0,1 | 2,3};
//    Q is staged in that logical order.
//  * O^T, A = V^T: thread (w, r) owns actual dims (8 w + r) * kVBytes + j, j <
//    kVBytes = 2 * kDBlocks (one 4-byte word per key row at D = 128; 32 threads
//    of distinct (w, r) x kVBytes = D); logical row 16 w + r + 8 h of block db
//    is actual dim (8 w + r) * kVBytes + 2 db + h.
//    k-step ks reads key rows 16 ks + 2 c + {0, 1, 8, 9}, the keys of A's k
//    columns {2c, 2c+1, 2c+8, 2c+9}: keys stay in their natural order, so P^T is
//    stored straight from the S^T accumulator by stmatrix.trans (as for a 16-bit
//    cache); only the output dims are un-permuted at the end.

#include "common/fp8.cuh"
#include "common/transposed_rows.cuh"
#include "common/types.cuh"
#include "gqa/hopper_config.cuh"

namespace xqajit {
namespace gqa_hopper {

// Byte offset of 16-byte chunk `chunk` (of 8 16-bit values) of row `row` in a
// [64-column block][rows][128 B] operand with `rows` rows per block.
__device__ __forceinline__ u32 atom_off(int row, int chunk, int rows) {
  return (u32)((chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}
// acc_col, acc_slot (which query row a register holds): common/transposed_rows.cuh.
// P^T in shared memory, the K-major B operand of O^T ([64-key block][query row][128 B]),
// written by stmatrix.trans from the S^T accumulator: its 8x8 blocks (8 keys x 8 query
// rows) are matrices m = (key block mb, 8-row block j, key half hf), hf fastest, so
// matrix m holds accumulator registers 2m, 2m + 1 of block mb (kRegs / 2 matrices a
// block) and its 8 stored rows -- query rows 8 j + 0..7, keys 16 warp + 8 hf + 0..7 --
// start at byte 1024 (m / 2) (mb kN + 8 j rows of 128 B). Lane L addresses stored row
// L % 8 of matrix `m`; matrix m0 + g (m0 % 4 == 0) is then p_row_off(g) + 512 m0.
constexpr int kPMatrices = kMBlocks * kRegs / 2;
static_assert(kPMatrices % 4 == 0 || kPMatrices == 2, "stmatrix .x4, or .x2 for 8 rows x 64 keys");
__device__ __forceinline__ u32 p_row_off(int m, int lane, int warp) {
  const int row = lane & 7;
  return (u32)(1024 * (m >> 1) + 128 * row + (((2 * warp + (m & 1)) ^ row) << 4));
}
// fp8 raw V tile: chunk swizzle per key row. A k-step's V^T fragments read 4-byte words
// of key rows 2c + {0, 1, 8, 9} (c = lane % 4): spreading chunk bits 1-2 by key / 2 puts
// the four lanes' rows on distinct banks, and all four rows of a lane share it. (The
// portable kernel reads rows 4c + {0..3}: common/fp8.cuh's swizzle, by key / 4.)
__device__ __forceinline__ int fp8_v_swizzle(int tok) { return fp8_vt_chunk_swizzle<kRawChunks>(tok); }
// fp8: first of the kVBytes adjacent head dims thread (warp, lane / 4) owns in O^T.
__device__ __forceinline__ int fp8_v_dim0(int lane, int warp) { return (8 * warp + (lane >> 2)) * kVBytes; }
// Actual head dim of O^T accumulator register i of block db (see the fp8 maps above).
__device__ __forceinline__ int out_dim(int db, int i, int lane, int warp) {
  const int half = (i >> 1) & 1;
  if constexpr (kFp8Cache) return fp8_v_dim0(lane, warp) + 2 * db + half;
  return 64 * db + 16 * warp + (lane >> 2) + 8 * half;
}
// Actual head dim of logical head dim `k` (Q's staging order; identity for 16-bit).
__device__ __forceinline__ int q_dim(int k) {
  if constexpr (!kFp8Cache) return k;
  return fp8_k_dim(k);
}

}  // namespace gqa_hopper
}  // namespace xqajit
