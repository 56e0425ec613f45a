#pragma once
// Portable MLA backend, the producer side: KV tiles by 16-byte cp.async (the
// page of the next tile looked up one tile early, so issuing never waits on
// the block table), Q rows staged as swizzled bf16, and the fp8 -> bf16 tile
// conversion (e4m3 is exact in bf16).

#include "common/mma.cuh"
#include "common/memory.cuh"
#include "common/paged_kv.cuh"
#include "mla/portable_config.cuh"
#include "mla/shared_sparse.cuh"
#include "mla/shared_tiles.cuh"

namespace xqajit {
namespace mla_portable {

struct TileLoader {
  const unsigned char* kv_base;
  const int* table_row;
  long long stride_page, stride_token;  // elements of the cache type
  int max_len, split_begin, split_end;
  long long next_page;                  // page of the next tile to issue (kPageSize >= kTile)
  mla::SparseList list;                 // sparse: this CTA's query token's index list

  __device__ __forceinline__ long long page_of(int tile) const {
    if constexpr (MLA_SPARSE) return 0;    // no block table: every row has its own page
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
    if constexpr (MLA_SPARSE) {
      // One gathered row per list position; an invalid slot or a position past the
      // split is zero-filled, never read (its logit is masked in phase B).
#pragma unroll 3
      for (int i = tid; i < kTile * kChunks; i += kThreads) {
        const int tok = i / kChunks, chunk = i % kChunks;
        const int pos = tile_start + tok;
        const int slot = list.slot_in_split(pos, split_end);
        const long long row = slot < 0 ? 0 : list.row_offset(slot, stride_page, stride_token);
        put(tok, chunk, kv_base + row * kCacheBytes + chunk * 16, slot >= 0);
      }
    } else if constexpr (kPageSize >= kTile) {
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

// The CTA's Q rows and fp8 tiles -> bf16 in this backend's swizzled layout (mla/shared_tiles.cuh).
__device__ __forceinline__ void stage_q(const XqajitMlaArgs& args, unsigned char* q_smem, int b, int rb, int tid) {
  mla::stage_q<kR, kR, kRows, kThreads>(args, q_smem, b, rb, tid,
                                        [](int r, int c) { return swizzle(r, c, kRowBytes); });
}
__device__ __forceinline__ void convert_tile(const unsigned char* raw, unsigned char* tile16, int tid) {
  mla::convert_tile<kThreads>(raw, tile16, tid, [](int r, int c) { return swizzle(r, c, kRowBytes); });
}

}  // namespace mla_portable
}  // namespace xqajit
