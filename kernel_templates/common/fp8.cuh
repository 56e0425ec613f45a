#pragma once
// e4m3 -> fp16 dequantisation in registers, for mma fragments built straight
// from raw fp8 bytes in shared memory (no second shared-memory pass).
//
// The bit trick: an e4m3 code s.eeee.mmm moved to fp16 bits s.0eeee.mmm0000000
// is exactly the e4m3 value times 2^-8, subnormals included (both formats'
// subnormal steps keep the same 2^-8 ratio). The caller folds 2^8 into a
// float scale applied after the fp32 accumulation. NaN codes become finite,
// but NaN never reaches a tile: masked keys are zero-filled by cp.async.

#include "common/types.cuh"

namespace xqajit {

constexpr float kE4m3ToF16Rescale = 256.f;  // undo the trick's 2^-8

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// `t` holds two sign-extended bytes (int16 lanes, prmt's sign-replicate
// selectors); returns the two codes as an fp16 pair scaled by 2^-8.
__device__ __forceinline__ u32 sext_e4m3x2_to_f16x2(u32 t) { return (t << 7) & 0xBF80BF80u; }

// Bytes 0,1 (lo) or 2,3 (hi) of one word -> fp16 pair (byte 0 / 2 in the low half).
__device__ __forceinline__ u32 e4m3_lo_pair(u32 w) { return sext_e4m3x2_to_f16x2(prmt(w, 0u, 0x9180u)); }
__device__ __forceinline__ u32 e4m3_hi_pair(u32 w) { return sext_e4m3x2_to_f16x2(prmt(w, 0u, 0xB3A2u)); }

// Byte j of `a` (low half) and byte j of `b` (high half) -> fp16 pair: the
// 2x2 byte transpose that turns token rows into the k-pairs of a B fragment.
template <int j>
__device__ __forceinline__ u32 e4m3_column_pair(u32 a, u32 b) {
  constexpr u32 sel = (u32)j | ((8u + j) << 4) | ((4u + j) << 8) | ((12u + j) << 12);
  return sext_e4m3x2_to_f16x2(prmt(a, b, sel));
}

// Raw fp8 tiles ([key][head_dim] bytes, kChunks 16-byte chunks a row) swizzle
// their chunks per key row. K fragments read 16 bytes of two adjacent key rows
// per phase (flip chunk bit 2 on odd rows); V fragments read 4-byte words of key
// rows 4 apart (spread chunk bits 1-2 by key / 4).
template <int kChunks>
__device__ __forceinline__ int fp8_k_chunk_swizzle(int tok) { return ((tok & 1) << 2) & (kChunks - 1); }
template <int kChunks>
__device__ __forceinline__ int fp8_v_chunk_swizzle(int tok) { return (((tok >> 2) & 3) << 1) & (kChunks - 1); }

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
