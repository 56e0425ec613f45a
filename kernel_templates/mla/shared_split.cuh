#pragma once
// The keys one MLA CTA attends to, for both backends: its request's sequence (or, sparse, its
// query token's index list) cut to its split's range, and the scales its logits fold in.
// Nothing here waits on a branch on the length: split_tile_count is branch-free, so the
// first tiles' page lookups can be issued while seq_lens is still in flight.

#include "common/paged_kv.cuh"
#include "common/types.cuh"
#include "mla/shared_sparse.cuh"
#include "xqajit/mla_args.h"

namespace xqajit {
namespace mla {

struct SplitKeys {
  SparseList list;  // sparse: the CTA's index list (empty when dense)
  int max_len;      // keys a block-table row can name (max_pages_per_seq x page size)
  int draft_begin;  // the first of the last q_len keys, the drafts
  int begin, end;   // the split's keys [begin, end) of the sequence (sparse: list positions)
  int num_tiles;    // kTile-key tiles over [begin, end), 0 when it is empty
};

// Split `split` of request b, for a CTA whose rows are all query token `token`'s (sparse lists
// are a token's; dense, every token of a request sees the same sequence).
template <int kTile>
__device__ __forceinline__ SplitKeys split_keys(const XqajitMlaArgs& args, int b, int token, int split) {
  SplitKeys k;
  k.list = SparseList{};
  if constexpr (MLA_SPARSE) k.list = sparse_list(args, b, token);
  k.max_len = args.max_pages_per_seq * kPageSize;
  const int seq_len = MLA_SPARSE ? k.list.length : clamped_seq_len(args.seq_lens, b, k.max_len);
  k.draft_begin = seq_len - kQLen;
  k.begin = split * args.split_tokens;
  k.end = k.begin + args.split_tokens < seq_len ? k.begin + args.split_tokens : seq_len;
  k.num_tiles = split_tile_count<kTile>(k.begin, k.end);
  return k;
}

// The scales a CTA folds in: each a float, or the device value it points to (read at launch,
// so a graph replay takes a new one).
struct Scales {
  float kv;                // the cache's dequantisation scale (also the output's)
  float logit_scale_log2;  // sm_scale x q_scale x kv_scale x log2(e): a logit's factor for exp2
};

__device__ __forceinline__ Scales scales(const XqajitMlaArgs& args) {
  const float q_scale = args.q_scale_ptr ? *args.q_scale_ptr : args.q_scale;
  const float kv_scale = args.kv_scale_ptr ? *args.kv_scale_ptr : args.kv_scale;
  return Scales{kv_scale, args.sm_scale * q_scale * kv_scale * kLog2e};
}

}  // namespace mla
}  // namespace xqajit
