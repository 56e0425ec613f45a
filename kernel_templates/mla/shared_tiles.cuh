#pragma once
// MLA staging both backends share: Q rows and fp8 cache tiles become bf16 in
// shared memory (e4m3 is exact in bf16; an fp8ds value times its scale is rounded
// once). Each backend passes its own swizzle: `offset(row, chunk)` is the byte
// offset of 16-byte bf16 chunk `chunk` of `row`.

#include "common/fp8.cuh"
#include "common/memory.cuh"
#include "common/mma.cuh"
#include "common/types.cuh"
#include "mla/shared_flags.cuh"
#include "mla/shared_rows.cuh"

namespace xqajit {
namespace mla {

// 16 e4m3 values (one 16-byte chunk) -> 16 bf16 (two chunks).
__device__ __forceinline__ void e4m3x16_to_bf16(const U32x4& v, U32x4& lo, U32x4& hi) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
  u32* const o[2] = {&lo.x, &hi.x};
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j / 4][j % 4] = e4m3x2_to_x2<false>((u16)(w[j / 2] >> (16 * (j % 2))));
}

// Query row `row` (token row / kHeads, head row % kHeads) of request b in global memory.
__device__ __forceinline__ const unsigned char* q_row(const XqajitMlaArgs& args, int b, int row) {
  const int t = row / kHeads, h = row % kHeads;
  const long long off = ((long long)b * args.q_stride_batch + (long long)t * args.q_stride_token +
                         (long long)h * args.q_stride_head) * (kFp8Q ? 1 : 2);
  return static_cast<const unsigned char*>(args.q) + off;
}

// The CTA's kR rows of Q (row block rb of request b, shared_rows.cuh's real_row) -> bf16,
// zeros for padding rows. kAsync (a bf16 Q, where the caller has no cp.async group in flight):
// every chunk by cp.async, all in flight at once, waited for here (hopper m66: through
// registers the loop waited for memory a fourth of the chunks at a time); the caller's proxy
// fence and barrier publish them.
template <int kR, int kRowStride, int kRows, int kThreads, bool kAsync = false, class Offset>
__device__ __forceinline__ void stage_q(const XqajitMlaArgs& args, unsigned char* q_smem, int b, int rb,
                                        int tid, Offset offset) {
  static_assert(!kAsync || !kFp8Q, "cp.async copies a bf16 Q's rows as they are");
  constexpr int kChunks = kQk * (kFp8Q ? 1 : 2) / 16;  // 16-byte chunks of one Q row in global memory
  const u32 q_addr = smem_addr(q_smem);
  for (int i = tid; i < kR * kChunks; i += kThreads) {
    const int r = i / kChunks, chunk = i % kChunks;
    const int row = rb * kRowStride + r;
    const bool real = real_row<kR, kRowStride, kRows>(r, row);
    if constexpr (kAsync) {
      cp_async_16(q_addr + offset(r, chunk), real ? q_row(args, b, row) + chunk * 16 : args.q, real);
    } else {
      const unsigned char* const src = q_row(args, b, row);
      U32x4 v = {0, 0, 0, 0};
      if (real) v = *reinterpret_cast<const U32x4*>(src + chunk * 16);
      if constexpr (kFp8Q) {
        U32x4 lo, hi;
        e4m3x16_to_bf16(v, lo, hi);
        *reinterpret_cast<U32x4*>(q_smem + offset(r, 2 * chunk)) = lo;
        *reinterpret_cast<U32x4*>(q_smem + offset(r, 2 * chunk + 1)) = hi;
      } else {
        *reinterpret_cast<U32x4*>(q_smem + offset(r, chunk)) = v;
      }
    }
  }
  if constexpr (kAsync) {
    cp_async_commit();
    cp_async_wait<0>();
  }
}

// 16 e4m3 values times `scale` -> 16 bf16 (two chunks), rounded once, to nearest.
__device__ __forceinline__ void e4m3x16_scaled_to_bf16(const U32x4& v, float scale, U32x4& lo, U32x4& hi) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
  u32* const o[2] = {&lo.x, &hi.x};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float a, b;
    unpack_x2<true>(e4m3x2_to_x2<true>((u16)(w[j / 2] >> (16 * (j % 2)))), a, b);
    o[j / 4][j % 4] = pack_f32x2<false>(a * scale, b * scale);
  }
}

// 16 e4m3 values times `scale2` (bf16, both halves: the group's scale x 2^(120 - k), rounded
// to bf16; k: hopper's kDsTileLog2) -> the 16 values x scale x 2^-k as bf16, by bits (common/fp8.cuh, m100): 4
// instructions a pair where the fp16 -> fp32 -> bf16 route takes 6.5. The product rounds once;
// the scale's own rounding is exact for DeepSeek-V3.2's power-of-two scales (FlashMLA's
// dequantisation multiplies by the scale rounded to bf16 too).
__device__ __forceinline__ void e4m3x16_times_bf16_scale(const U32x4& v, u32 scale2, U32x4& lo, U32x4& hi) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
  u32* const o[2] = {&lo.x, &hi.x};
#pragma unroll
  for (int j = 0; j < 8; ++j)
    o[j / 4][j % 4] = bf16x2_mul(e4m3x2_to_bf16x2_biased(w[j / 2], j % 2 ? kE4m3Bytes23 : kE4m3Bytes01), scale2);
}

// A landed fp8-with-scales tile (MLA_FP8DS: rows of XQAJIT_MLA_FP8DS_ROW_BYTES, unswizzled)
// -> bf16 rows: the 512 latent values times their group's float32 scale, the 64 bf16 rope
// values copied. Work items are a row's 32 latent chunks and 8 rope chunks.
template <int kThreads, class Offset>
__device__ __forceinline__ void convert_scaled_tile(const unsigned char* raw, unsigned char* tile16, int tid,
                                                    Offset offset) {
  constexpr int kLatentChunks = kV / 16, kRopeChunks = (kQk - kV) * 2 / 16;
  constexpr int kItems = kLatentChunks + kRopeChunks;
  constexpr int kScaleOff = kV, kRopeOff = kV + kV / XQAJIT_MLA_FP8DS_GROUP * 4;
  static_assert(kRopeOff + kRopeChunks * 16 == XQAJIT_MLA_FP8DS_ROW_BYTES,
                "the fp8ds row: latent, scales, rope");
#pragma unroll 2
  for (int i = tid; i < kTile * kItems; i += kThreads) {
    const int tok = i / kItems, item = i % kItems;
    const unsigned char* const row = raw + tok * kRawRowBytes;
    if (item < kLatentChunks) {
      const float scale =
          *reinterpret_cast<const float*>(row + kScaleOff + item * 16 / XQAJIT_MLA_FP8DS_GROUP * 4);
      U32x4 lo, hi;
      e4m3x16_scaled_to_bf16(*reinterpret_cast<const U32x4*>(row + item * 16), scale, lo, hi);
      *reinterpret_cast<U32x4*>(tile16 + offset(tok, 2 * item)) = lo;
      *reinterpret_cast<U32x4*>(tile16 + offset(tok, 2 * item + 1)) = hi;
    } else {
      const int rope = item - kLatentChunks;  // bf16 chunk 64 + rope of the row
      *reinterpret_cast<U32x4*>(tile16 + offset(tok, 2 * kLatentChunks + rope)) =
          *reinterpret_cast<const U32x4*>(row + kRopeOff + rope * 16);
    }
  }
}

// A landed raw e4m3 tile (rows of kRawRowBytes, unswizzled) -> bf16 rows.
template <int kThreads, class Offset>
__device__ __forceinline__ void convert_tile(const unsigned char* raw, unsigned char* tile16, int tid, Offset offset) {
  if constexpr (MLA_FP8DS) {
    convert_scaled_tile<kThreads>(raw, tile16, tid, offset);
  } else {
    constexpr int kChunks = kRawRowBytes / 16;
#pragma unroll 2
    for (int i = tid; i < kTile * kChunks; i += kThreads) {
      const int tok = i / kChunks, chunk = i % kChunks;
      U32x4 lo, hi;
      e4m3x16_to_bf16(*reinterpret_cast<const U32x4*>(raw + tok * kRawRowBytes + chunk * 16), lo, hi);
      *reinterpret_cast<U32x4*>(tile16 + offset(tok, 2 * chunk)) = lo;
      *reinterpret_cast<U32x4*>(tile16 + offset(tok, 2 * chunk + 1)) = hi;
    }
  }
}

}  // namespace mla
}  // namespace xqajit
