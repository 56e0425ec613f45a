#pragma once
// Portable MLA backend, the producer side: KV tiles by 16-byte cp.async (the
// page of the next tile looked up one tile early, so issuing never waits on
// the block table), Q rows staged as swizzled bf16, and the fp8 -> bf16 tile
// conversion (e4m3 is exact in bf16).

#include "common/mma.cuh"
#include "common/memory.cuh"
#include "common/paged_kv.cuh"
#include "mla/portable_config.cuh"

namespace xqajit {
namespace mla_portable {

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
  long long next_page;                  // page of the next tile to issue (kPageSize >= kTile)

  __device__ __forceinline__ long long page_of(int tile) const {
    const int pos = split_begin + tile * kTile;
    if (pos >= split_end) return 0;  // never read the table past the sequence (nothing is loaded there)
    return table_row[(pos < max_len ? pos : max_len - 1) / kPageSize];
  }

  // Tile `tile` -> raw stage at `dst`: zero-filled past the split (no load of
  // pages past the sequence, no NaN tails). bf16 rows land swizzled for ldmatrix.
  __device__ __forceinline__ void issue(int tile, u32 dst, int tid) {
    constexpr int kChunks = kRawRowBytes / 16;
    const int tile_start = split_begin + tile * kTile;
    auto put = [&](int tok, int chunk, const unsigned char* src, bool valid) {
      const u32 off = kFp8Cache ? (u32)(tok * kRawRowBytes + chunk * 16) : swizzle(tok, chunk, kRowBytes);
      cp_async_16(dst + off, valid ? src : kv_base, valid);
    };
    if constexpr (kPageSize >= kTile) {
      // Tiles start on multiples of kTile, so a tile never crosses a page.
      const unsigned char* const row0 =
          kv_base + (next_page * stride_page + (long long)(tile_start % kPageSize) * stride_token) * kCacheBytes;
      const long long tok_bytes = stride_token * kCacheBytes;
      next_page = page_of(tile + 1);  // consumed one tile later: its latency hides behind a tile
#pragma unroll 3
      for (int i = tid; i < kTile * kChunks; i += kThreads) {
        const int tok = i / kChunks, chunk = i % kChunks;
        put(tok, chunk, row0 + tok * tok_bytes + chunk * 16, tile_start + tok < split_end);
      }
    } else {
#pragma unroll 3
      for (int i = tid; i < kTile * kChunks; i += kThreads) {
        const int tok = i / kChunks, chunk = i % kChunks;
        const int pos = tile_start + tok;
        put(tok, chunk,
            paged_row<kPageSize, kCacheBytes>(kv_base, table_row, pos, max_len, stride_page, stride_token, 0) +
                chunk * 16,
            pos < split_end);
      }
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
      *reinterpret_cast<U32x4*>(q_smem + swizzle(r, 2 * chunk, kRowBytes)) = lo;
      *reinterpret_cast<U32x4*>(q_smem + swizzle(r, 2 * chunk + 1, kRowBytes)) = hi;
    } else {
      *reinterpret_cast<U32x4*>(q_smem + swizzle(r, chunk, kRowBytes)) = v;
    }
  }
}

// A landed raw e4m3 tile -> swizzled bf16 rows (every thread takes a share).
__device__ __forceinline__ void convert_tile(const unsigned char* raw, unsigned char* tile16, int tid) {
  constexpr int kChunks = kRawRowBytes / 16;
#pragma unroll 2
  for (int i = tid; i < kTile * kChunks; i += kThreads) {
    const int tok = i / kChunks, chunk = i % kChunks;
    U32x4 lo, hi;
    e4m3x16_to_bf16(*reinterpret_cast<const U32x4*>(raw + tok * kRawRowBytes + chunk * 16), lo, hi);
    *reinterpret_cast<U32x4*>(tile16 + swizzle(tok, 2 * chunk, kRowBytes)) = lo;
    *reinterpret_cast<U32x4*>(tile16 + swizzle(tok, 2 * chunk + 1, kRowBytes)) = hi;
  }
}

}  // namespace mla_portable
}  // namespace xqajit
