#pragma once
// Paged KV-cache addressing shared by the kernel families: a request's key at
// position `pos` lives in page block_table[b][pos / page_size], row
// pos % page_size. Positions are clamped into the table row so a lookup can be
// issued before seq_len is known (the table load then never waits on it); the
// caller masks positions past the sequence.

#include "common/mma.cuh"

namespace xqajit {

// Sequence length of request b clamped to [0, max_len].
__device__ __forceinline__ int clamped_seq_len(const int* seq_lens, int b, int max_len) {
  int n = seq_lens[b];
  n = n < 0 ? 0 : n;
  return n > max_len ? max_len : n;
}

// Tiles of the split [begin, end), 0 when it is empty. Branch-free in PTX on
// purpose: nothing after it -- the first tiles' page-table lookups, whose
// addresses depend on the split, not on the length -- may wait on a branch on
// seq_len (a load). ptxas had already if-converted the old `end > begin ? ...`:
// same B=1 time on the H200 (docs/KERNEL_NOTES.md h5), so this is insurance.
template <int kTile>
__device__ __forceinline__ int split_tile_count(int begin, int end) {
  const int keys = end - begin;
  return (int)((unsigned)((keys > 0 ? keys : 0) + kTile - 1) / (unsigned)kTile);
}

// The page-table entry of position `pos` of one request (clamped into its row: a
// lookup past the end reads a valid entry that nothing uses).
template <int kPageSize>
__device__ __forceinline__ int page_of(const int* table_row, int pos, int max_len) {
  return table_row[(pos < max_len ? pos : max_len - 1) / kPageSize];
}

// Byte address of row `pos` of a paged tensor (head offset already in elements).
template <int kPageSize, int kElemBytes>
__device__ __forceinline__ const unsigned char* paged_row(const unsigned char* base, const int* table_row,
                                                          int pos, int max_len, long long stride_page,
                                                          long long stride_token, long long head_off) {
  const long long page = page_of<kPageSize>(table_row, pos, max_len);
  return base + (page * stride_page + (long long)(pos % kPageSize) * stride_token + head_off) * kElemBytes;
}

// Where one (request, KV head)'s K and V rows live (strides in elements).
struct PagedKvRows {
  const unsigned char* k_base;
  const unsigned char* v_base;
  const int* table_row;
  int max_len;
  long long k_stride_page, k_stride_token, k_head;
  long long v_stride_page, v_stride_token, v_head;
};

// The page-table entries one thread's copies of one tile need when a tile spans
// several pages, looked up a tile ahead of the copies (lookup_tile_pages): each
// copy used to wait on its own lookup, an L2 round trip, in order. Slot j of a
// thread (for_each_tile_chunk) copies chunk tid + j * kThreads: token tid / kChunks
// + j * kTokStep, so a page of kPageSize tokens serves kSlotsPerPage consecutive
// slots and one entry per page is kept. H200 (docs/KERNEL_NOTES.md h7): portable fp8
// t128 with 64-token pages 157 -> 135 us at 64x4096. A page that holds whole tiles
// is looked up at issue, one entry per tile: ahead there it cost 0.4 us at B=1.
template <int kPageSize, int kTile, int kChunks, int kThreads>
struct TilePages {
  static_assert(kThreads % kChunks == 0, "a thread's slots advance by whole tokens");
  static constexpr bool kAhead = kPageSize < kTile;
  static constexpr int kSlots = (kTile * kChunks + kThreads - 1) / kThreads;
  static constexpr int kTokStep = kThreads / kChunks;
  static constexpr int kSlotsPerPage = kTokStep >= kPageSize ? 1 : kPageSize / kTokStep;
  static constexpr int kLookups = kAhead ? (kSlots + kSlotsPerPage - 1) / kSlotsPerPage : 1;
  int page[kLookups];
};

// Issues the lookups of the tile starting at `tile_start` (none where a page holds
// whole tiles); unconditional, clamped into the row (page_of).
template <int kPageSize, int kTile, int kChunks, int kThreads>
__device__ __forceinline__ TilePages<kPageSize, kTile, kChunks, kThreads> lookup_tile_pages(const PagedKvRows& kv,
                                                                                           int tile_start) {
  using Pages = TilePages<kPageSize, kTile, kChunks, kThreads>;
  Pages t{};
  if constexpr (Pages::kAhead) {
#pragma unroll
    for (int j = 0; j < Pages::kLookups; ++j) {
      const int pos = tile_start + (int)threadIdx.x / kChunks + j * Pages::kSlotsPerPage * Pages::kTokStep;
      t.page[j] = page_of<kPageSize>(kv.table_row, pos, kv.max_len);
    }
  }
  return t;
}

// Walks the 16-byte chunks of one tile of kTile keys starting at `tile_start`
// (a multiple of kTile), spread over kThreads threads, and calls
// issue(tok, chunk, k_src, v_src, valid) for each; the caller owns the
// shared-memory layout. Keys at or past `end` are invalid (zero-filled: the copy
// reads nothing). Every source stays inside the cache: a page that starts past
// `end` -- its table entry unused, possibly garbage -- is read as page 0, a
// select on the page index, not a branch (written as a branch the compiler made
// the table loads wait on seq_len: H200 fp8 t128 64x4096 145 -> 163 us).
// `pages` are the tile's lookups (lookup_tile_pages), issued a tile earlier where
// it spans pages. Addresses: one 64-bit page base per page, plus this thread's
// offset in the page (tile-invariant) and a multiple of kTokStep rows per slot.
template <int kPageSize, int kCacheBytes, int kTile, int kChunks, int kThreads, typename Issue>
__device__ __forceinline__ void for_each_tile_chunk(const PagedKvRows& kv,
                                                    const TilePages<kPageSize, kTile, kChunks, kThreads>& pages,
                                                    int tile_start, int end, Issue&& issue) {
  using Pages = TilePages<kPageSize, kTile, kChunks, kThreads>;
  const int tid = threadIdx.x;
  const long long k_tok_bytes = kv.k_stride_token * kCacheBytes, v_tok_bytes = kv.v_stride_token * kCacheBytes;
  auto page_base = [&](const unsigned char* base, long long page, long long stride_page, long long head) {
    return base + (page * stride_page + head) * kCacheBytes;
  };
  const int tok0 = tid / kChunks, chunk = tid % kChunks;  // slot j: token tok0 + j * kTokStep
  // Slots [j0, j1) of one page (`page` already in the pool; slot j0 at row `row` of it),
  // from one 64-bit base each for K and V.
  auto walk_page = [&](int page, int row, int j0, int j1) {
    const long long in_page = (long long)row;
    const unsigned char* const k_row = page_base(kv.k_base, page, kv.k_stride_page, kv.k_head) +
                                       in_page * k_tok_bytes + chunk * 16;
    const unsigned char* const v_row = page_base(kv.v_base, page, kv.v_stride_page, kv.v_head) +
                                       in_page * v_tok_bytes + chunk * 16;
#pragma unroll 4
    for (int j = j0; j < j1; ++j) {
      if (Pages::kSlots * kThreads != kTile * kChunks && tid + j * kThreads >= kTile * kChunks) break;
      const int tok = tok0 + j * Pages::kTokStep;
      issue(tok, chunk, k_row + (j - j0) * Pages::kTokStep * k_tok_bytes,
            v_row + (j - j0) * Pages::kTokStep * v_tok_bytes, tile_start + tok < end);
    }
  };
  if constexpr (!Pages::kAhead) {  // one page holds the tile: one lookup, at issue
    const int looked_up = page_of<kPageSize>(kv.table_row, tile_start, kv.max_len);  // unconditional
    walk_page(tile_start < end ? looked_up : 0, tile_start % kPageSize + tok0, 0, Pages::kSlots);
  } else {
#pragma unroll
    for (int l = 0; l < Pages::kLookups; ++l) {
      const int j0 = l * Pages::kSlotsPerPage;  // the page's first slot
      const int pos0 = tile_start + tok0 + j0 * Pages::kTokStep;
      const int j1 = j0 + Pages::kSlotsPerPage < Pages::kSlots ? j0 + Pages::kSlotsPerPage : Pages::kSlots;
      walk_page(pos0 - pos0 % kPageSize < end ? pages.page[l] : 0, pos0 % kPageSize, j0, j1);
    }
  }
}

// The start of a kernel's copy pipeline: the page lookups of its first kStages - 1
// tiles in flight together, then their copies, one commit group per stage (issued
// unconditionally: tiles past the split are zero-filled and read nothing). Returns
// the lookups of tile kStages - 1, a tile ahead of its copies. lookup(tile) returns
// the tile's TilePages; load(tile, stage, pages) issues its copies.
template <int kStages, typename Lookup, typename Load>
__device__ __forceinline__ auto start_tile_pipeline(Lookup&& lookup, Load&& load) {
  decltype(lookup(0)) first[kStages - 1];
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) first[s] = lookup(s);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    load(s, s, first[s]);
    cp_async_commit();
  }
  return lookup(kStages - 1);
}

}  // namespace xqajit
