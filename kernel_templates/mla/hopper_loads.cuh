#pragma once
// Hopper MLA backend, the producer side: KV tiles by 16-byte cp.async (zero
// fill past the split: no page past the sequence is read, no NaN tail lands),
// Q staged as bf16 in the wgmma 128-byte-swizzled layout, and the fp8 -> bf16
// tile conversion (e4m3 is exact in bf16, so the bf16 wgmma path loses nothing).
//
// A bf16 cache tile lands directly in the swizzled operand layout that both
// wgmmas read: K-major B of S = Q K^T and MN-major B of O = P V (the K tile
// IS the V tile: each latent row is loaded once).

#include "common/fp8.cuh"
#include "common/memory.cuh"
#include "common/mma.cuh"
#include "common/paged_kv.cuh"
#include "common/tma.cuh"
#include "mla/hopper_config.cuh"
#include "mla/shared_sparse.cuh"
#include "mla/shared_tiles.cuh"

namespace xqajit {
namespace mla_hopper {

// Byte offset of 16-byte chunk `chunk` of raw fp8 row `tok` in a stage: unswizzled rows, for
// the bf16 conversion pass.
__device__ __forceinline__ u32 raw_offset(int tok, int chunk) { return (u32)(tok * kRawRowBytes + chunk * 16); }

struct TileLoader {
  const unsigned char* kv_base;
  const int* table_row;
  long long stride_page, stride_token;  // elements of the cache type
  int max_len, split_begin, split_end;
  mla::SparseList list;     // sparse: this CTA's query token's index list
  unsigned char* key_ok;    // sparse: [tile parity][kTile] flags, 1 where the key's row landed

  // Tile `tile` of this split -> stage at `dst`: kThreads / kTile threads a key row, each
  // looking its row up once and copying every (kThreads / kTile)-th 16-byte chunk of it, so
  // a warp's copy covers 8 rows x 64 contiguous bytes and a thread's address math is one
  // table lookup a tile (m5: each thread looked up the page of every chunk before).
  // Sparse: the row is the slot of the key's list position; an invalid slot or a position
  // past the split is zero-filled, never read, and flagged 0 for the softmax's mask.
  // Sparse: `entry`, the list entry of this thread's key, loaded ahead by entry() (the
  // caller keeps it a tile, so that the load's latency is not this tile's).
  static constexpr int kLanesPerRow = kThreads / kTile;
  __device__ __forceinline__ int entry(int tile, int tid) const {
    if constexpr (!MLA_SPARSE) return -1;
    return list.entry_in_split(split_begin + tile * kTile + tid / kLanesPerRow, split_end);
  }
  __device__ __forceinline__ void issue(int tile, u32 dst, int tid, int entry) const {
    // 16-byte chunks of a row: 72 (bf16), 36 (fp8), 41 (fp8ds).
    constexpr int kChunks = kRawRowBytes / 16;
    static_assert(kThreads % kTile == 0, "whole rows per thread group");
    const int tok = tid / kLanesPerRow, first = tid % kLanesPerRow;
    const int pos = split_begin + tile * kTile + tok;
    const unsigned char* row = kv_base;
    bool valid;
    if constexpr (MLA_SPARSE) {
      const int slot = list.slot_of(entry);
      valid = slot >= 0;
      if (valid) row += list.row_offset(slot, stride_page, stride_token) * kCacheBytes;
      if (first == 0) key_ok[(tile & 1) * kTile + tok] = valid;
    } else {
      valid = pos < split_end;
      if (valid) row = paged_row<kPageSize, kCacheBytes>(kv_base, table_row, pos, max_len, stride_page, stride_token, 0);
    }
#pragma unroll
    for (int j = 0; j < (kChunks + kLanesPerRow - 1) / kLanesPerRow; ++j) {
      const int chunk = first + j * kLanesPerRow;
      if (kChunks % kLanesPerRow != 0 && chunk >= kChunks) break;
      const u32 off = kFp8Cache ? raw_offset(tok, chunk) : sw128_offset(tok, chunk, kTile);
      cp_async_16(dst + off, valid ? row + chunk * 16 : kv_base, valid);
    }
  }
};

// A bf16 cache's tiles by TMA, issued by one thread (m6): per page of the tile, nine
// boxes of 64 values x the page's rows land straight in the swizzled operand layout
// ([column block][key][128 B]; the copy engine applies the 128-byte swizzle by address,
// as wgmma reads it). A tile is one page or two (pages of 64 or 32 keys; splits start on
// tile boundaries). A page past the split is not copied: its table entry may be stale,
// and the kernel zeroes the keys past the split's end in the last tile instead.
struct TmaTileLoader {
  static constexpr int kPagesPerTile = kTile / kPageSize;
  static constexpr int kBoxCols = kXqajitMlaHopperBoxBytes / kCacheBytes;  // 64 bf16, or 128 e4m3 (QGMMA)
  static constexpr u32 kPageBytes = kColBlocks * kPageSize * kColBlock * 2;
  static_assert(kTile % kPageSize == 0, "a tile holds whole pages");
  const XqajitTensorMap* map;
  const int* table_row;
  int split_begin, split_end;
  u64 policy;

  // The page ids of tile `tile` (-1: past the split), read a tile ahead of issue().
  __device__ __forceinline__ void pages(int tile, int (&ids)[kPagesPerTile]) const {
    const int first = split_begin + tile * kTile;
#pragma unroll
    for (int j = 0; j < kPagesPerTile; ++j)
      ids[j] = first + j * kPageSize < split_end ? table_row[(first + j * kPageSize) / kPageSize] : -1;
  }

  // Where column block cb starts in a row: 128 bytes a block, but an fp8ds row's fifth block is
  // its bf16 rope, after the scales (bytes 528-655; the scales are read apart, m51).
  static __device__ __forceinline__ int box_x(int cb) {
    if constexpr (MLA_FP8DS) return cb == kQ8Blocks - 1 ? XQAJIT_MLA_FP8DS_ROW_BYTES - 128 : cb * kBoxCols;
    return cb * kBoxCols;
  }

  // Column blocks kFirst..kLast-1 of the tile -> the buffer at `dst`, block cb completing
  // on its own barrier at bars + 8 cb (the seesaw refills a buffer by the blocks each
  // warpgroup has finished with, and S waits block by block).
  template <int kFirst, int kLast>
  __device__ __forceinline__ void issue_cols(const int (&ids)[kPagesPerTile], u32 dst, u32 bars) const {
    u32 bytes = 0;
#pragma unroll
    for (int j = 0; j < kPagesPerTile; ++j) bytes += ids[j] >= 0 ? kPageSize * 128u : 0u;
    // Not unrolled: one thread runs it, and unrolled it was ~4 KB of each seesaw loop's
    // SASS, which the instruction cache holds for every warp (m15).
#pragma unroll 1
    for (int cb = kFirst; cb < kLast; ++cb) {
      mbarrier_arrive_expect_tx(bars + 8 * cb, bytes);
#pragma unroll
      for (int j = 0; j < kPagesPerTile; ++j)
        if (ids[j] >= 0)
          tma_load_3d(dst + cb * kTile * 128 + j * kPageSize * 128, *map, box_x(cb), 0, ids[j], bars + 8 * cb,
                      policy);
    }
  }

  __device__ __forceinline__ void issue(const int (&ids)[kPagesPerTile], u32 dst, u32 bar) const {
    u32 bytes = 0;
#pragma unroll
    for (int j = 0; j < kPagesPerTile; ++j) bytes += ids[j] >= 0 ? kPageBytes : 0u;
    mbarrier_arrive_expect_tx(bar, bytes);
#pragma unroll
    for (int j = 0; j < kPagesPerTile; ++j) {
      if (ids[j] < 0) continue;
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb)
        tma_load_3d(dst + cb * kTile * 128 + j * kPageSize * 128, *map, cb * kBoxCols, 0, ids[j], bar, policy);
    }
  }
};

// Keys `valid`.. of a landed bf16 tile -> zeros (the last tile of a split that ends
// inside it: its page's unused slots may hold NaN, and P = 0 times NaN is NaN).
__device__ __forceinline__ void zero_tile_tail(unsigned char* tile, int valid, int tid) {
  constexpr int kChunks = kColBlocks * (kColBlock * 2 / 16);  // 16-byte chunks of a key row
  for (int i = valid * kChunks + tid; i < kTile * kChunks; i += kThreads) {
    const int key = i / kChunks, chunk = i % kChunks;
    *reinterpret_cast<U32x4*>(tile + sw128_offset(key, chunk, kTile)) = U32x4{0, 0, 0, 0};
  }
}

// Keys `valid`.. of 128-byte column blocks kFirst..kLast-1 of a landed tile (bf16, or the
// QGMMA schedule's raw e4m3) -> zeros, by the 128 threads of one warpgroup (the seesaws:
// each zeroes the V blocks it reads itself).
template <int kFirst, int kLast>
__device__ __forceinline__ void zero_cols_tail(unsigned char* tile, int valid, int tid_wg) {
  constexpr int kChunks = (kLast - kFirst) * (kColBlock * 2 / 16);
  for (int i = valid * kChunks + tid_wg; i < kTile * kChunks; i += 128) {
    const int key = i / kChunks, chunk = kFirst * (kColBlock * 2 / 16) + i % kChunks;
    *reinterpret_cast<U32x4*>(tile + sw128_offset(key, chunk, kTile)) = U32x4{0, 0, 0, 0};
  }
}

// The CTA's Q rows and fp8 tiles -> bf16 in this backend's swizzled layout (mla/shared_tiles.cuh).
// A bf16 Q by cp.async where no tile copies of the math threads are in flight (TMA or producer
// specs; m66).
__device__ __forceinline__ void stage_q(const XqajitMlaArgs& args, unsigned char* q_smem, int b, int rb, int tid) {
  mla::stage_q<kR, kRowStride, kRows, kThreads, !kFp8Q && (kTma || kProducer)>(
      args, q_smem, b, rb, tid, [](int r, int c) { return sw128_offset(r, c, kR); });
}
// QGMMA: the CTA's kR rows of the fp8 Q as they are, [5 column blocks][row][128 B] with
// the 128-byte swizzle; the last block's second half (dims 576..639) and padding rows zeros.
__device__ __forceinline__ void stage_q8(const XqajitMlaArgs& args, unsigned char* q_smem, int b, int rb, int tid) {
  constexpr int kChunks = kQ8Blocks * 8;  // 16-byte chunks of a staged row (36 from memory)
  for (int i = tid; i < kR * kChunks; i += kThreads) {
    const int r = i / kChunks, chunk = i % kChunks;
    const int row = rb * kRowStride + r;
    U32x4 v = {0, 0, 0, 0};
    if (mla::real_row<kR, kRowStride, kRows>(r, row) && chunk < kQk / 16)
      v = *reinterpret_cast<const U32x4*>(mla::q_row(args, b, row) + chunk * 16);
    *reinterpret_cast<U32x4*>(q_smem + sw128_offset(r, chunk, kR)) = v;
  }
}
// A split Q's pieces (stage_q_split here, stage_q_split_narrow in mla/hopper_narrow_qg.cuh).
// The larger |value| of a bf16 pair, as bits that order as the value does (|bf16| << 16).
__device__ __forceinline__ u32 bf16x2_abs_max_bits(u32 word) {
  const u32 m = word & 0x7fff7fffu;
  return max(m << 16, m & 0xffff0000u);
}
// A row's e: amax (bits as above) in [2^ea, 2^(ea+1)), e = 7 - ea brings it into [128, 256),
// clamped so that 2^e and 2^-e are normal floats; 0 for a zero row.
__device__ __forceinline__ int q_split_exponent(u32 amax_bits) {
  const int ea = (int)(amax_bits >> 23) - 127;
  return amax_bits == 0 ? 0 : min(126, max(-126, 7 - ea));
}
// A bf16 pair times `scale` -> its hi and lo e4m3 pairs (f32x2_to_e4m3x2_split).
__device__ __forceinline__ void bf16x2_to_e4m3x2_split(u32 word, float scale, u16& hi, u16& lo) {
  f32x2_to_e4m3x2_split(__uint_as_float(word << 16) * scale, __uint_as_float(word & 0xffff0000u) * scale, hi, lo);
}

// A bf16 Q for the fp8 tensor cores (kQgSplit, m39): row r times 2^e_r, e_r bringing its largest
// |q| into [128, 256), as two e4m3 planes hi + lo (f32x2_to_e4m3x2_split) in stage_q8's layout,
// plane 1 kQ8PlaneBytes after plane 0; q_inv[r] = 2^-e_r. A quad of threads a row, nine
// 16-value chunks each, all loaded at once (nothing else is live yet): the row's max (a quad
// reduction), then the chunks split.
__device__ __forceinline__ void stage_q_split(const XqajitMlaArgs& args, unsigned char* q_smem, float* q_inv, int b,
                                              int rb, int tid) {
  static_assert(kThreads == 4 * kR, "a quad of threads a row");
  constexpr int kChunks = kQk / 16;  // 16-value chunks of a row (32 bytes of bf16, 16 of each plane)
  constexpr int kMine = kChunks / 4;  // chunks j, j + 4, ... of thread j of the quad
  static_assert(kChunks % 4 == 0, "a quad's chunks");
  const int r = tid >> 2, j = tid & 3;
  const int row = rb * kRowStride + r;
  u32 w[kMine][8];
  if (mla::real_row<kR, kRowStride, kRows>(r, row)) {
    const U32x4* const src = reinterpret_cast<const U32x4*>(mla::q_row(args, b, row));
#pragma unroll
    for (int i = 0; i < kMine; ++i) {
      const U32x4 v0 = src[2 * (j + 4 * i)], v1 = src[2 * (j + 4 * i) + 1];
      w[i][0] = v0.x, w[i][1] = v0.y, w[i][2] = v0.z, w[i][3] = v0.w;
      w[i][4] = v1.x, w[i][5] = v1.y, w[i][6] = v1.z, w[i][7] = v1.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kMine; ++i)
#pragma unroll
      for (int k = 0; k < 8; ++k) w[i][k] = 0;
  }
  u32 amax_bits = 0;
#pragma unroll
  for (int i = 0; i < kMine; ++i)
#pragma unroll
    for (int k = 0; k < 8; ++k) amax_bits = max(amax_bits, bf16x2_abs_max_bits(w[i][k]));
  amax_bits = max(amax_bits, __shfl_xor_sync(0xffffffffu, amax_bits, 1));
  amax_bits = max(amax_bits, __shfl_xor_sync(0xffffffffu, amax_bits, 2));
  const int e = q_split_exponent(amax_bits);
  const float scale = __int_as_float((127 + e) << 23);
  if (j == 0) q_inv[r] = __int_as_float((127 - e) << 23);
#pragma unroll
  for (int i = 0; i < kMine; ++i) {
    u32 hi[4], lo[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // values 4k..4k+3: words 2k, 2k + 1
      u16 h[2], l[2];
#pragma unroll
      for (int x = 0; x < 2; ++x) bf16x2_to_e4m3x2_split(w[i][2 * k + x], scale, h[x], l[x]);
      hi[k] = h[0] | ((u32)h[1] << 16), lo[k] = l[0] | ((u32)l[1] << 16);
    }
    const u32 off = sw128_offset(r, j + 4 * i, kR);
    *reinterpret_cast<U32x4*>(q_smem + off) = U32x4{hi[0], hi[1], hi[2], hi[3]};
    *reinterpret_cast<U32x4*>(q_smem + kQ8PlaneBytes + off) = U32x4{lo[0], lo[1], lo[2], lo[3]};
  }
  // The rope block's second half: zeros in both planes (chunks 36..39).
  const u32 pad = sw128_offset(r, kChunks + j, kR);
  *reinterpret_cast<U32x4*>(q_smem + pad) = U32x4{0, 0, 0, 0};
  *reinterpret_cast<U32x4*>(q_smem + kQ8PlaneBytes + pad) = U32x4{0, 0, 0, 0};
}
__device__ __forceinline__ void convert_tile(const unsigned char* raw, unsigned char* tile16, int tid) {
  mla::convert_tile<kThreads>(raw, tile16, tid, [](int r, int c) { return sw128_offset(r, c, kTile); });
}

}  // namespace mla_hopper
}  // namespace xqajit
