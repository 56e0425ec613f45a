#pragma once
// e4m3 -> fp16 dequantisation in registers, for mma fragments built straight
// from raw fp8 bytes in shared memory (no second shared-memory pass).
//
// cvt.rn.f16x2.e4m3x2 is exact (every e4m3 value, subnormals included, is an
// fp16 value) and took fewer issue slots than the 3-op bit trick
// ((sign-extended byte << 7) & 0xBF80, x 2^-8) in run 4 of docs/PERF.md
// (fp8 64x4096: 180.6 -> 170.8 us at t64). NaN never reaches a tile: masked
// keys are zero-filled by cp.async.

#include "common/types.cuh"

namespace xqajit {

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Bytes (0,1) -> lo and (2,3) -> hi, as fp16 pairs (the lower byte in the low half).
__device__ __forceinline__ void e4m3x4_to_f16x2x2(u32 w, u32& lo, u32& hi) {
  asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;}"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
}

// e4m3 -> bf16 without the fp16 and fp32 detour (the MLA producer's fp8ds rows, m100): the
// byte's sign, exponent and mantissa moved into bf16's fields as they are, s eeee mmm ->
// s 0000 eeee mmm 0000, is the e4m3 value times 2^-120 exactly, subnormals included (a bf16
// subnormal then), for any code but NaN (never selected: masked keys are zeros). PRMT puts
// byte a and its replicated sign in the low half, byte b and its sign in the high half, so
// one shift and one mask finish both. `sel`: kE4m3Bytes01 or kE4m3Bytes23 of the word.
constexpr u32 kE4m3Bytes01 = 0x9180u, kE4m3Bytes23 = 0xb3a2u;
__device__ __forceinline__ u32 e4m3x2_to_bf16x2_biased(u32 w, u32 sel) {
  return (prmt(w, 0u, sel) << 4) & 0x87f087f0u;
}

// a x b for both bf16 halves, rounded to nearest once.
__device__ __forceinline__ u32 bf16x2_mul(u32 a, u32 b) {
  u32 r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// Bytes j and j+1 of two key rows a, b -> fp16 pairs (a.j, b.j) and (a.j+1, b.j+1):
// the byte transpose that turns key rows into the k-pairs of V's B fragments.
template <int j>
__device__ __forceinline__ void e4m3_columns_to_f16x2x2(u32 a, u32 b, u32& col_j, u32& col_j1) {
  constexpr u32 sel = (u32)j | ((4u + j) << 4) | ((j + 1u) << 8) | ((5u + j) << 12);
  e4m3x4_to_f16x2x2(prmt(a, b, sel), col_j, col_j1);
}

// (a, b) -> hi + lo as e4m3 pairs (the lower value in the low byte): hi = e4m3(x), lo =
// e4m3(x - hi), through fp16. Two e4m3 wgmmas over hi and lo then carry ~8 significant bits
// (2^-8 relative) with an absolute floor of 2^-10, about bf16's precision, for values up to 448
// (mla/hopper_qgmma.cuh: a bf16 Q and P on the fp8 tensor cores).
__device__ __forceinline__ void f32x2_to_e4m3x2_split(float a, float b, u16& hi, u16& lo) {
  asm("{.reg .b32 x, h;\n\t"
      "cvt.rn.f16x2.f32 x, %3, %2;\n\t"
      "cvt.rn.satfinite.e4m3x2.f16x2 %0, x;\n\t"
      "cvt.rn.f16x2.e4m3x2 h, %0;\n\t"
      "sub.rn.f16x2 x, x, h;\n\t"
      "cvt.rn.satfinite.e4m3x2.f16x2 %1, x;}"
      : "=h"(hi), "=h"(lo)
      : "f"(a), "f"(b));
}

// Raw fp8 tiles ([key][head_dim] bytes, kChunks 16-byte chunks a row) swizzle
// their chunks per key row. K fragments read 16 bytes of two adjacent key rows
// per phase (flip chunk bit 2 on odd rows); V fragments read 4-byte words of key
// rows 4 apart (spread chunk bits 1-2 by key / 4).
template <int kChunks>
__device__ __forceinline__ int fp8_k_chunk_swizzle(int tok) { return ((tok & 1) << 2) & (kChunks - 1); }
template <int kChunks>
__device__ __forceinline__ int fp8_v_chunk_swizzle(int tok) { return (((tok >> 2) & 3) << 1) & (kChunks - 1); }

// The transposed products' fp8 A fragments (S^T = K Q^T, O^T = V^T P^T: the hopper GQA
// kernel and the MLA narrow schedule). K: k-step 4 g + s of thread (r, c) = (lane / 4,
// lane % 4) reads bytes 4 s..4 s + 3 of the 16-byte chunk 4 g + c of its two key rows, so
// logical dim 16 (4 g + s) + {2c, 2c+1 | 2c+8, 2c+9} is actual dim 64 g + 16 c + 4 s +
// {0,1 | 2,3}; the B operand (Q) is staged in that logical order. fp8_k_dim: the actual
// dim of logical dim k.
__device__ __forceinline__ int fp8_k_dim(int k) {
  const int step = k >> 4, j = k & 15;  // k-step 4 g + s, position j in it
  return 64 * (step >> 2) + 16 * ((j & 7) >> 1) + 4 * (step & 3) + 2 * (j >> 3) + (j & 1);
}
// V^T: k-step ks reads key rows 16 ks + 2 c + {0, 1, 8, 9}; spreading chunk bits 1-2 by
// key / 2 puts the four lanes' rows on distinct banks (for rows of 64 mod 128 bytes), and
// all four rows of a lane share it. kChunks: the swizzled chunks of a row, a power of two.
template <int kChunks>
__device__ __forceinline__ int fp8_vt_chunk_swizzle(int tok) { return (((tok >> 1) & 3) << 1) & (kChunks - 1); }

// Fragment layouts of the fp8 path. In S = Q K^T, n-tile n's column c reads key
// 16 (n/2) + 4 (c/2) + 2 (n%2) + c%2, so score accumulator (n, e) of quad column
// q holds key 16 (n/2) + 4 q + 2 (n%2) + e%2: each thread's P fragment covers
// keys 4q..4q+3, the rows whose V words it dequantises. In O += P V, n-tile
// 4m + j's column c is head dim 32 m + 4 c + j, so one 4-byte word per key row
// serves 4 n-tiles.
__device__ __forceinline__ int fp8_score_key(int n, int e, int quad_col) {
  return 16 * (n >> 1) + 4 * quad_col + 2 * (n & 1) + (e & 1);
}
__device__ __forceinline__ int fp8_acc_col(int i, int e, int quad_col) {
  return 32 * (i >> 2) + 8 * quad_col + 4 * (e & 1) + (i & 3);
}

}  // namespace xqajit
