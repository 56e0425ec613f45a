#pragma once
// Where a CTA of either GQA backend reads its keys: the paged rows of its
// (request, KV head), the keys of its split, and the L2 warm-up of the split's
// first keys before pdl_wait() (common/l2_prefetch.cuh).

#include "common/l2_prefetch.cuh"
#include "common/paged_kv.cuh"
#include "gqa/spec_flags.cuh"
#include "xqajit/decode_args.h"

namespace xqajit {
namespace gqa_flags {

// Keys a CTA asks L2 for before pdl_wait(): 32 KB of K and V rows (one bf16 tile of
// 64 keys, one fp8 tile of 128). H200 (KERNEL_NOTES h15): 32 KB beat 64 and 128 KB
// at every small-batch shape; more is evicted before the CTA reads it.
constexpr int kPrefetchKeys = 32 * 1024 / (2 * kHeadDim * kCacheBytes);
static_assert(kPrefetchKeys > 0, "32 KB holds a K and V row at every head dim");

// Pointers and strides only (launch arguments): usable before pdl_wait().
__device__ __forceinline__ PagedKvRows gqa_kv_rows(const XqajitDecodeArgs& args, int b, int h) {
  return PagedKvRows{static_cast<const unsigned char*>(args.k_cache),
                     static_cast<const unsigned char*>(args.v_cache),
                     args.block_table + (long long)b * args.block_table_stride,
                     args.max_pages_per_seq * kPageSize,
                     args.k_stride_page, args.k_stride_token, (long long)h * args.k_stride_head,
                     args.v_stride_page, args.v_stride_token, (long long)h * args.v_stride_head};
}

// The keys [begin, end) of split `split` of a request of `seq_len` keys. With a
// window they start at the tile of the first key the earliest query (token 0) sees.
struct SplitKeys {
  int begin, end;
};
__device__ __forceinline__ SplitKeys gqa_split_keys(const XqajitDecodeArgs& args, int seq_len, int split) {
  int lo = 0;
  if constexpr (kWindow) {
    lo = seq_len - kQLen - args.window + 1;
    lo = lo < 0 ? 0 : lo / kTile * kTile;
  }
  const int begin = lo + split * args.split_tokens;
  const int end = begin + args.split_tokens;
  return SplitKeys{begin, end < seq_len ? end : seq_len};
}

// What a CTA of either backend reads once the upstream kernel is done (after
// pdl_wait()): its request's length (clamped to the table), where the drafts begin
// (the last q_len keys fall under the spec-dec mask), its split's keys and tiles, and
// the caller's scales (device pointers win: graph replays may change them; kv_scale only
// for an fp8 cache, rcp_out only for fp8 output, 1 otherwise).
struct CtaWork {
  int seq_len, draft_begin, begin, end, num_tiles;
  float q_scale, kv_scale, rcp_out;
};
__device__ __forceinline__ CtaWork gqa_cta_work(const XqajitDecodeArgs& args, const PagedKvRows& kv, int b,
                                                int split) {
  CtaWork w;
  w.seq_len = clamped_seq_len(args.seq_lens, b, kv.max_len);
  w.draft_begin = w.seq_len - kQLen;
  const SplitKeys keys = gqa_split_keys(args, w.seq_len, split);
  w.begin = keys.begin;
  w.end = keys.end;
  w.num_tiles = split_tile_count<kTile>(w.begin, w.end);
  w.q_scale = args.q_scale_ptr ? *args.q_scale_ptr : args.q_scale;
  w.kv_scale = kFp8Cache ? (args.kv_scale_ptr ? *args.kv_scale_ptr : args.kv_scale) : 1.f;
  w.rcp_out = kFp8Out ? (args.rcp_out_scale_ptr ? *args.rcp_out_scale_ptr : args.rcp_out_scale) : 1.f;
  return w;
}

// Whether a query row sees key `key` of a tile that needs the per-key test: inside
// the split, inside the row's window (from window_lo), and -- for a draft key, at
// or past draft_begin -- set in the row's draft mask. Branch-free: bitwise terms, the
// draft bit read with the shift clamped (a key past the split is invisible anyway),
// so a masked tile costs a few ALU ops per score, not a branch each (q_len 8: one of
// every 32 tiles at L=4096, KERNEL_NOTES h23).
__device__ __forceinline__ bool key_visible(int key, int split_end, int window_lo, int draft_begin, u32 draft_mask) {
  bool visible = key < split_end;
  if constexpr (kWindow) visible = visible & (key >= window_lo);
  if constexpr (kSpecDec) {
    const int rel = key - draft_begin;
    visible = visible & ((rel < 0) | (((draft_mask >> (rel & 31)) & 1u) != 0));
  }
  return visible;
}

// Tile `tile` of the split [begin, end) into the pipeline stage at k_dst (V after K's
// kTile rows), for either backend: one 16-byte cp.async a chunk (zero-filled past end),
// placed by `copy(k_dst, v_dst, tok, chunk, k_src, v_src, valid)` in the backend's layout.
template <int kThreads, typename Pages, typename Copy>
__device__ __forceinline__ void load_kv_tile(const PagedKvRows& kv, const Pages& pages, int begin, int end, int tile,
                                             u32 k_dst, Copy&& copy) {
  constexpr int kRowBytes = kHeadDim * kCacheBytes;  // local: a namespace constant would enter the PTX
  const u32 v_dst = k_dst + kTile * kRowBytes;
  for_each_tile_chunk<kPageSize, kCacheBytes, kTile, kRowBytes / 16, kThreads>(
      kv, pages, begin + tile * kTile, end,
      [&](int tok, int chunk, const unsigned char* k_src, const unsigned char* v_src, bool valid) {
        copy(k_dst, v_dst, tok, chunk, k_src, v_src, valid);
      });
}

// Before pdl_wait(): L2 hints for the first kPrefetchKeys keys of this CTA's split,
// from the length and table as they stand. args.prefetch_pages is 0 unless the
// plan warms L2 (DecodePlan::l2_warmup: PDL split launches, num_pages given).
template <int kThreads>
__device__ __forceinline__ void gqa_prefetch_split_start(const XqajitDecodeArgs& args, const PagedKvRows& kv,
                                                         int b, int split) {
  if (args.prefetch_pages <= 0) return;
  int seq_len = racy_load(args.seq_lens + b);
  seq_len = seq_len < 0 ? 0 : (seq_len > kv.max_len ? kv.max_len : seq_len);
  const SplitKeys keys = gqa_split_keys(args, seq_len, split);
  prefetch_split_start<kPageSize, kCacheBytes, kHeadDim * kCacheBytes, kThreads, kPrefetchKeys>(
      kv, keys.begin, keys.end, args.prefetch_pages);
}

}  // namespace gqa_flags
}  // namespace xqajit
