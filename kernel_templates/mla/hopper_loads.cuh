#pragma once
// Hopper MLA backend, the producer side: KV tiles by 16-byte cp.async (zero
// fill past the split: no page past the sequence is read, no NaN tail lands),
// Q staged as bf16 in the wgmma 128-byte-swizzled layout, and the fp8 -> bf16
// tile conversion (e4m3 is exact in bf16, so the bf16 wgmma path loses nothing).
//
// A bf16 cache tile lands directly in the swizzled operand layout that both
// wgmmas read: K-major B of S = Q K^T and MN-major B of O = P V (the K tile
// IS the V tile: each latent row is loaded once).

#include "common/memory.cuh"
#include "common/mma.cuh"
#include "common/paged_kv.cuh"
#include "mla/hopper_config.cuh"

namespace xqajit {
namespace mla_hopper {

// 16 e4m3 values (one 16-byte chunk) -> 16 bf16 (two chunks).
__device__ __forceinline__ void e4m3x16_to_bf16(const U32x4& v, U32x4& lo, U32x4& hi) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
  u32* const o[2] = {&lo.x, &hi.x};
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j / 4][j % 4] = e4m3x2_to_x2<false>((u16)(w[j / 2] >> (16 * (j % 2))));
}

struct TileLoader {
  const unsigned char* kv_base;
  const int* table_row;
  long long stride_page, stride_token;  // elements of the cache type
  int max_len, split_begin, split_end;

  // Tile `tile` of this split -> stage at `dst` (every thread takes a share).
  __device__ __forceinline__ void issue(int tile, u32 dst, int tid) const {
    constexpr int kChunks = kRawRowBytes / 16;
    const int tile_start = split_begin + tile * kTile;
#pragma unroll 4
    for (int i = tid; i < kTile * kChunks; i += kThreads) {
      const int tok = i / kChunks, chunk = i % kChunks;
      const int pos = tile_start + tok;
      const bool valid = pos < split_end;
      const u32 off = kFp8Cache ? (u32)(tok * kRawRowBytes + chunk * 16) : sw128_offset(tok, chunk, kTile);
      const unsigned char* src =
          valid ? paged_row<kPageSize, kCacheBytes>(kv_base, table_row, pos, max_len, stride_page, stride_token, 0) +
                      chunk * 16
                : kv_base;
      cp_async_16(dst + off, src, valid);
    }
  }
};

// The CTA's Q rows -> shared memory as swizzled bf16 (zeros for padding rows).
__device__ __forceinline__ void stage_q(const XqajitMlaArgs& args, unsigned char* q_smem, int b, int rb, int tid) {
  constexpr int kChunks = kQk * (kFp8Q ? 1 : 2) / 16;  // 16-byte chunks of one Q row in global memory
  const unsigned char* const q = static_cast<const unsigned char*>(args.q);
  for (int i = tid; i < kR * kChunks; i += kThreads) {
    const int r = i / kChunks, chunk = i % kChunks;
    const int row = rb * kR + r;
    U32x4 v = {0, 0, 0, 0};
    const int t = row / kHeads, h = row % kHeads;
    const long long off = ((long long)b * args.q_stride_batch + (long long)t * args.q_stride_token +
                           (long long)h * args.q_stride_head) * (kFp8Q ? 1 : 2);
    if (row < kRows) v = *reinterpret_cast<const U32x4*>(q + off + chunk * 16);
    if constexpr (kFp8Q) {
      U32x4 lo, hi;
      e4m3x16_to_bf16(v, lo, hi);
      *reinterpret_cast<U32x4*>(q_smem + sw128_offset(r, 2 * chunk, kR)) = lo;
      *reinterpret_cast<U32x4*>(q_smem + sw128_offset(r, 2 * chunk + 1, kR)) = hi;
    } else {
      *reinterpret_cast<U32x4*>(q_smem + sw128_offset(r, chunk, kR)) = v;
    }
  }
}

// A landed raw e4m3 tile -> swizzled bf16 operand tile.
__device__ __forceinline__ void convert_tile(const unsigned char* raw, unsigned char* tile16, int tid) {
  constexpr int kChunks = kRawRowBytes / 16;
#pragma unroll 2
  for (int i = tid; i < kTile * kChunks; i += kThreads) {
    const int tok = i / kChunks, chunk = i % kChunks;
    U32x4 lo, hi;
    e4m3x16_to_bf16(*reinterpret_cast<const U32x4*>(raw + tok * kRawRowBytes + chunk * 16), lo, hi);
    *reinterpret_cast<U32x4*>(tile16 + sw128_offset(tok, 2 * chunk, kTile)) = lo;
    *reinterpret_cast<U32x4*>(tile16 + sw128_offset(tok, 2 * chunk + 1, kTile)) = hi;
  }
}

}  // namespace mla_hopper
}  // namespace xqajit
