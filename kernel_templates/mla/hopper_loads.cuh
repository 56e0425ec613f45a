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
#include "mla/shared_tiles.cuh"

namespace xqajit {
namespace mla_hopper {

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

// The CTA's Q rows and fp8 tiles -> bf16 in this backend's swizzled layout (mla/shared_tiles.cuh).
__device__ __forceinline__ void stage_q(const XqajitMlaArgs& args, unsigned char* q_smem, int b, int rb, int tid) {
  mla::stage_q<kR, kRows, kThreads>(args, q_smem, b, rb, tid, [](int r, int c) { return sw128_offset(r, c, kR); });
}
__device__ __forceinline__ void convert_tile(const unsigned char* raw, unsigned char* tile16, int tid) {
  mla::convert_tile<kThreads>(raw, tile16, tid, [](int r, int c) { return sw128_offset(r, c, kTile); });
}

}  // namespace mla_hopper
}  // namespace xqajit
