#pragma once
// Paged KV-cache addressing shared by the kernel families: a request's key at
// position `pos` lives in page block_table[b][pos / page_size], row
// pos % page_size. Positions are clamped into the table row so a lookup can be
// issued before seq_len is known (the table load then never waits on it); the
// caller masks positions past the sequence.

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

// Byte address of row `pos` of a paged tensor (head offset already in elements).
template <int kPageSize, int kElemBytes>
__device__ __forceinline__ const unsigned char* paged_row(const unsigned char* base, const int* table_row,
                                                          int pos, int max_len, long long stride_page,
                                                          long long stride_token, long long head_off) {
  const long long page = table_row[(pos < max_len ? pos : max_len - 1) / kPageSize];
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

// Walks the 16-byte chunks of one tile of kTile keys starting at `tile_start`
// (a multiple of kTile), spread over kThreads threads, and calls
// issue(tok, chunk, k_src, v_src, valid) for each; the caller owns the
// shared-memory layout. Keys at or past `end` are invalid: their sources point
// at the cache base (a zero-fill copy reads nothing there). Page-table entries
// are read for every slot, clamped into the row, so the table loads pipeline
// instead of each copy waiting on its own (docs/KERNEL_NOTES.md v3.1: +8 % at
// large batch); when a page holds whole tiles, one lookup per tile and
// fixed-stride slots (v3.2).
template <int kPageSize, int kCacheBytes, int kTile, int kChunks, int kThreads, typename Issue>
__device__ __forceinline__ void for_each_tile_chunk(const PagedKvRows& kv, int tile_start, int end, Issue&& issue) {
  const int tid = threadIdx.x;
  const long long k_tok_bytes = kv.k_stride_token * kCacheBytes, v_tok_bytes = kv.v_stride_token * kCacheBytes;
  if constexpr (kPageSize >= kTile) {
    const unsigned char* const k_row0 = paged_row<kPageSize, kCacheBytes>(
        kv.k_base, kv.table_row, tile_start, kv.max_len, kv.k_stride_page, kv.k_stride_token, kv.k_head);
    const unsigned char* const v_row0 = paged_row<kPageSize, kCacheBytes>(
        kv.v_base, kv.table_row, tile_start, kv.max_len, kv.v_stride_page, kv.v_stride_token, kv.v_head);
#pragma unroll 4
    for (int i = tid; i < kTile * kChunks; i += kThreads) {
      const int tok = i / kChunks, chunk = i % kChunks;
      const bool valid = tile_start + tok < end;
      const unsigned char* k_src = k_row0 + tok * k_tok_bytes + chunk * 16;
      const unsigned char* v_src = v_row0 + tok * v_tok_bytes + chunk * 16;
      if (!valid) k_src = kv.k_base, v_src = kv.v_base;  // a select, not a branch (see below)
      issue(tok, chunk, k_src, v_src, valid);
    }
  } else {
#pragma unroll 4
    for (int i = tid; i < kTile * kChunks; i += kThreads) {
      const int tok = i / kChunks, chunk = i % kChunks;
      const int pos = tile_start + tok;
      const bool valid = pos < end;
      // The table loads stay unconditional (paged_row clamps pos into the row) and
      // the fallback is a select: written as `valid ? paged_row(..) : base` the
      // compiler made the loads a branch on seq_len, serialising them behind it
      // (H200: fp8 t128 64x4096 145 -> 163 us, bf16 B=1 L=8192 14.7 -> 15.9 us).
      const unsigned char* k_src = paged_row<kPageSize, kCacheBytes>(
          kv.k_base, kv.table_row, pos, kv.max_len, kv.k_stride_page, kv.k_stride_token, kv.k_head) + chunk * 16;
      const unsigned char* v_src = paged_row<kPageSize, kCacheBytes>(
          kv.v_base, kv.table_row, pos, kv.max_len, kv.v_stride_page, kv.v_stride_token, kv.v_head) + chunk * 16;
      if (!valid) k_src = kv.k_base, v_src = kv.v_base;
      issue(tok, chunk, k_src, v_src, valid);
    }
  }
}

}  // namespace xqajit
