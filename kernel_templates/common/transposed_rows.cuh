#pragma once
// Query rows held as accumulator columns: the transposed products S^T = K Q^T and
// O^T = V^T P^T (wgmma m64nN, keys or output dims in M) that the hopper GQA kernel
// and the hopper MLA kernel's narrow schedule compute. Register i = 4j + e of
// lane L holds key row L / 4 + 8 (e / 2) of its warp's 16 and query row (column)
// 8 j + 2 (L % 4) + e % 2; a thread's query rows are its N / 4 "slots"
// c = 2 j + e % 2, and a query row's values are spread over the 8 key rows of each
// warp (lanes of equal L % 4) and over the warpgroup's 4 warps.

#include "common/types.cuh"

namespace xqajit {

// Query row (column) of accumulator register 4j + e.
__device__ __forceinline__ int acc_col(int j, int e, int lane) { return 8 * j + 2 * (lane & 3) + (e & 1); }
// Which of the thread's slots accumulator register i holds (row max, row sum, ...).
__device__ __forceinline__ constexpr int acc_slot(int i) { return 2 * (i >> 2) + (i & 1); }
// Query row (column) of slot c.
__device__ __forceinline__ int slot_col(int c, int lane) { return acc_col(c >> 1, c, lane); }

// Per query row (the thread's kCols slots): combines the values of the warp's 8 key
// rows (lanes with equal lane % 4) ...
template <int kCols, typename Op>
__device__ __forceinline__ void reduce_over_key_rows(float (&v)[kCols], Op op) {
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    v[c] = op(v[c], __shfl_xor_sync(0xffffffffu, v[c], 4));
    v[c] = op(v[c], __shfl_xor_sync(0xffffffffu, v[c], 8));
    v[c] = op(v[c], __shfl_xor_sync(0xffffffffu, v[c], 16));
  }
}
// ... and lanes 0-3 publish the warp's result per query row to xchg[warp][4 kCols],
// for the reduction over the 4 warps.
template <int kCols>
__device__ __forceinline__ void store_warp_columns(const float (&v)[kCols], float* xchg, int warp, int lane) {
  constexpr int kN = 4 * kCols;
  if (lane < 4) {
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      float2 w;
      w.x = v[2 * j];
      w.y = v[2 * j + 1];
      *reinterpret_cast<float2*>(xchg + warp * kN + 8 * j + 2 * lane) = w;
    }
  }
}

}  // namespace xqajit
