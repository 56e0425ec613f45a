#pragma once
// Hopper MLA backend: a CTA of the balanced plan (m77; the plan: mla/balanced_plan.h)
// runs its pieces one after the other, each as the seesaw runs a one-split CTA.

#include "common/paged_kv.cuh"
#include "common/tma.cuh"
#include "mla/balanced_plan.h"
#include "mla/hopper_config.cuh"
#include "mla/hopper_epilogue.cuh"
#include "mla/hopper_loads.cuh"
#include "mla/hopper_math.cuh"
#include "mla/hopper_seesaw.cuh"
#include "mla/shared_split.cuh"

namespace xqajit {
namespace mla_hopper {

// The sum of `v` over lanes 0..lane of the warp.
__device__ __forceinline__ int warp_inclusive_scan(int v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// An exclusive scan of one int a thread over the block (kThreads threads), and the total;
// `warp_sums` holds kThreads / 32 ints. Ends with the barrier that frees `warp_sums`.
__device__ __forceinline__ int block_exclusive_scan(int v, int* warp_sums, int tid, int& total) {
  const int lane = tid & 31, warp = tid >> 5;
  const int incl = warp_inclusive_scan(v, lane);
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int run = incl - v;
  total = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    run += w < warp ? warp_sums[w] : 0;
    total += warp_sums[w];
  }
  __syncthreads();
  return run;
}

// The largest of one int a thread over the block, as block_exclusive_scan shares its scratch.
__device__ __forceinline__ int block_max(int v, int* warp_sums, int tid) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  if ((tid & 31) == 0) warp_sums[tid >> 5] = v;
  __syncthreads();
  for (int w = 0; w < kThreads / 32; ++w) v = warp_sums[w] > v ? warp_sums[w] : v;
  __syncthreads();
  return v;
}

// The plan (mla/balanced_plan.h) in `plan_smem` (4 B + 1 ints: each request's tiles, then
// c(r) in their place; the layout; P_r; the positions run whole), by the kThreads threads,
// each taking a run of requests and then the same run of positions. Equal lengths keep the
// requests' order (no ranks to count: the uniform batches' cost stays one pass). Ends with a
// barrier.
__device__ __forceinline__ mla::BalancedPlan balanced_plan(const XqajitMlaArgs& args, int* plan_smem, int* warp_sums,
                                                           int tid) {
  const int batch = args.batch, max_len = args.max_pages_per_seq * kPageSize;
  int* const tiles = plan_smem;
  int* const order = tiles + batch;
  int* const prefix = order + batch;
  int* const wholes = prefix + batch + 1;
  const int per = (batch + kThreads - 1) / kThreads;
  const int b0 = tid * per < batch ? tid * per : batch, b1 = b0 + per < batch ? b0 + per : batch;
  int longest = 0, shortest = 0x7fffffff;
  for (int b = b0; b < b1; ++b) {
    const int t = split_tile_count<kTile>(0, clamped_seq_len(args.seq_lens, b, max_len));
    tiles[b] = t;
    longest = t > longest ? t : longest;
    shortest = t < shortest ? t : shortest;
  }
  longest = block_max(longest, warp_sums, tid);  // its barriers publish `tiles` too
  const bool even = -block_max(-shortest, warp_sums, tid) == longest;
  for (int b = b0; b < b1; ++b) order[even ? b : mla::balanced_position(tiles, batch, b)] = b;
  __syncthreads();
  int sum = 0;
  for (int r = b0; r < b1; ++r) sum += tiles[order[r]];
  int total;
  int run = block_exclusive_scan(sum, warp_sums, tid, total);
  for (int r = b0; r < b1; ++r) {
    prefix[r] = run;
    run += tiles[order[r]];
  }
  if (tid == 0) prefix[batch] = total;
  __syncthreads();
  mla::BalancedPlan plan{prefix, order, tiles, wholes, 0, batch, args.balanced_parts, longest};
  if (plan.walks()) {
    plan.choose_walkers();  // every thread alike: a binary search over P_r
    // One scan counts both: the cut requests (low 16 bits) and those run whole (high; B < 2^15).
    const auto counts = [&](int r) { return (plan.cut(r) ? 1 : 0) + (plan.runs_whole(r) ? 1 << 16 : 0); };
    int mine = 0;
    for (int r = b0; r < b1; ++r) mine += counts(r);
    int both;
    run = block_exclusive_scan(mine, warp_sums, tid, both);  // every read of `tiles` is done
    for (int r = b0; r < b1; ++r) {
      tiles[r] = run & 0xffff;
      if (plan.runs_whole(r)) wholes[run >> 16] = r;
      run += counts(r);
    }
    plan.num_wholes = both >> 16;
    __syncthreads();
  }
  return plan;
}

// The shares of a small batch (m84, mla/balanced_plan.h) by one warp, a lane a request
// (B <= kXqajitMlaSharesMaxBatch): the lane's request's tiles, its first CTA x_b and its pieces
// k_b (0 past the batch).
struct ShareLane {
  int tiles, first, pieces;
};
__device__ __forceinline__ ShareLane share_lane(const XqajitMlaArgs& args, int lane) {
  const bool mine = lane < args.batch;
  const int t = mine ? split_tile_count<kTile>(0, clamped_seq_len(args.seq_lens, lane, args.max_pages_per_seq * kPageSize))
                     : 0;
  const int share =
      mla::least_share(__reduce_add_sync(~0u, t), __reduce_max_sync(~0u, t), args.batch, args.balanced_parts,
                       [&](int s) { return __reduce_add_sync(~0u, mine ? mla::share_pieces(t, s) : 0); });
  const int k = mine ? mla::share_pieces(t, share) : 0;
  return ShareLane{t, warp_inclusive_scan(k, lane) - k, k};
}

// The piece of CTA x (b = -1: none; the grid has Z CTAs a row block, the pieces may be fewer).
__device__ __forceinline__ mla::BalancedPiece share_piece(const XqajitMlaArgs& args, int x, int lane) {
  const ShareLane l = share_lane(args, lane);
  const unsigned owner = __ballot_sync(~0u, l.first <= x && x < l.first + l.pieces);
  if (owner == 0) return mla::BalancedPiece{-1, 0, 0, 0, 0, 0};
  const int b = __ffs(owner) - 1;
  const int t = __shfl_sync(~0u, l.tiles, b), first = __shfl_sync(~0u, l.first, b);
  const int k = __shfl_sync(~0u, l.pieces, b), i = x - first;
  const int t0 = mla::share_first_tile(t, k, i);
  return mla::BalancedPiece{b, t0, mla::share_first_tile(t, k, i + 1) - t0, k, i, first};
}

// Row block rb's (x_b, k_b) a request, for the merge launch, which would otherwise plan again in
// each of its CTAs (~2.5k CTAs of 4 warps at B=20: the plans' instructions cost ~5 us, run 1):
// each request's first piece writes its pair into the stats of slot Z of the row block's 2 Z
// slots, which the shares leave unused.
__device__ __forceinline__ int* share_table(const XqajitMlaArgs& args, int rb, int row_blocks) {
  return reinterpret_cast<int*>(balanced_group(args, rb, row_blocks, args.balanced_parts, 1).stats);
}
static_assert(kXqajitMlaSharesMaxBatch <= kR, "the table of (x_b, k_b) fits a slot's stats (2 kR floats)");

// A piece's keys, as split_keys gives a split's.
__device__ __forceinline__ mla::SplitKeys piece_keys(const XqajitMlaArgs& args,
                                                     const mla::BalancedPiece& pc) {
  mla::SplitKeys k;
  k.list = mla::SparseList{};
  k.max_len = args.max_pages_per_seq * kPageSize;
  const int seq_len = clamped_seq_len(args.seq_lens, pc.b, k.max_len);
  k.draft_begin = seq_len - kQLen;
  k.begin = pc.first_tile * kTile;
  k.end = k.begin + pc.num_tiles * kTile < seq_len ? k.begin + pc.num_tiles * kTile : seq_len;
  k.num_tiles = pc.num_tiles;
  return k;
}

// This CTA's piece of a small batch's shares (grid (row blocks, Z); b = -1: none), by warp 0,
// whose lane 0 also writes the request's table entry where this is its first piece; every thread
// gets the piece through `s_piece` (ends with a barrier).
__device__ __forceinline__ mla::BalancedPiece share_cta_piece(const XqajitMlaArgs& args,
                                                              mla::BalancedPiece* s_piece, int tid) {
  if (tid < 32) {
    const mla::BalancedPiece pc = share_piece(args, blockIdx.y, tid);
    if (tid == 0) {
      *s_piece = pc;
      if (pc.b >= 0 && pc.index == 0) {
        int* const entry = share_table(args, blockIdx.x, gridDim.x) + 2 * pc.b;
        entry[0] = pc.first_slot;
        entry[1] = pc.splits;
      }
    }
  }
  __syncthreads();
  return *s_piece;
}

// A share's piece again after its tiles, from shared memory rather than kept live across them
// (255 registers there: ptxas spilled the request and row block inside the seesaw's loops).
__device__ __forceinline__ mla::BalancedPiece reread_piece(const mla::BalancedPiece* s_piece) {
  const volatile mla::BalancedPiece& p = *s_piece;
  return mla::BalancedPiece{p.b, p.first_tile, p.num_tiles, p.splits, p.index, p.first_slot};
}

// Request b's pieces in row block rb's slots, for the merge launch (grid (rows, row blocks,
// batch)); fewer than two: the piece stored the final rows.
__device__ __forceinline__ SplitPartials<kR, kV> share_group(const XqajitMlaArgs& args, int rb, int b) {
  const int* const entry = share_table(args, rb, gridDim.y) + 2 * b;
  return balanced_group(args, rb, gridDim.y, __ldcg(entry), __ldcg(entry + 1));
}

static_assert(kSeesaw == xqajit_mla_hopper_balanced(kHeads, kQLen, kCacheBytes, MLA_SPARSE),
              "the host plans the balanced grid for exactly the seesaw specs");
static_assert((4 * kXqajitMlaBalancedMaxBatch + 1) * 4 <= 2 * kStageBytes, "the plan fits the tile buffers");
static_assert(kXqajitMlaBalancedMaxBatch < (1 << 15), "the plan's scan packs two counts of positions");

// The mbarriers of the two tile buffers, fresh for the next piece: the last one's copies
// have all landed and been waited for (a barrier before this), so their phases can restart.
__device__ __forceinline__ void rearm_tile_barriers(u32 full_addr) {
#pragma unroll 1
  for (int i = 0; i < 2 * kColBlocks; ++i) {
    mbarrier_inval(full_addr + 8 * i);
    mbarrier_init(full_addr + 8 * i, 1);
  }
  fence_mbarrier_init();
}

// A CTA of the balanced plan: its pieces, each as a one-split CTA of the seesaw runs its split
// (mla_decode_hopper.cu), the tile barriers re-armed between them. The grid is (row blocks,
// Z + B): a walker's row blocks are launched side by side, so they read each tile together (the
// second from L2, as a request's row blocks do in the split grid); with the row blocks last, a
// whole wave of one row block's walkers ran before the other's, which read every tile from HBM
// again (m77, run 1: B=64 L=8192 320 us against 236).
__device__ __forceinline__ void balanced_cta(const XqajitMlaArgs& args, const XqajitTensorMap* kv_map,
                                             unsigned char* smem, u32 full_addr, int* s_is_last, int tid) {
  const int rb = blockIdx.x;
  __shared__ int s_warp_sums[kThreads / 32];  // the plan's block scans
  // The pieces wait in shared memory: the second one's fields, kept in registers, spilled
  // across the first one's seesaw.
  __shared__ mla::BalancedPiece s_pieces[2];
  const int lane = tid & 31, warp = tid >> 5;
  const int wg = warp_uniform(warp >> 2), rt = warp_uniform(warp & 3);
  {
    // The plan borrows the tile buffers, free until the first piece's copies.
    const mla::BalancedPlan plan = balanced_plan(args, reinterpret_cast<int*>(smem + kRawOff), s_warp_sums, tid);
    if (tid == 0) mla::balanced_pieces(plan, blockIdx.y, s_pieces);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // straight-line: a loop around the seesaw spills (m77 probes)
    const mla::BalancedPiece pc = s_pieces[i];
    if (pc.b < 0) return;
    if (i == 1) {
      __syncthreads();  // the first piece's epilogue has read its staged rows
      if (tid == 0) rearm_tile_barriers(full_addr);
    }
    const mla::Scales scales = mla::scales(args);
    const u32 raw_addr = smem_addr(smem + kRawOff);
    const u64 policy = l2_evict_first_policy();
    const mla::SplitKeys keys = piece_keys(args, pc);
    const TmaTileLoader tma{kv_map, args.block_table + (long long)pc.b * args.block_table_stride, keys.begin,
                            keys.end, policy};
    if (tid == 0 && pc.num_tiles > 0) seesaw_first_tiles(tma, raw_addr, full_addr);
    stage_q(args, smem + kQOff, pc.b, rb, tid);
    fence_proxy_async();  // Q's copies (generic proxy) -> visible to wgmma
    __syncthreads();
    RowState st;
    mla::init_rows<kRowStride>(st, args, pc.b, rb, rt, lane >> 2);
    if (pc.num_tiles > 0) {
      const SeesawSmem sm = seesaw_smem(smem, full_addr, tid);
      __syncthreads();
      seesaw_split(st, sm, tma,
                   SeesawSplit{pc.num_tiles, keys.begin, keys.end, keys.draft_begin, scales.logit_scale_log2},
                   wg, rt, lane);
      __syncthreads();  // every wgmma and copy is done: the buffers are free
      seesaw_rows(st, sm, wg, rt, lane);
    }
    const int t2 = threadIdx.x;
    finish_piece(args, st, smem, s_is_last, reread_piece(&s_pieces[i]), blockIdx.x,
                 warp_uniform((t2 >> 5) & 3), warp_uniform(t2 >> 7), mla::scales(args).kv, t2 & 31);
  }
}

}  // namespace mla_hopper
}  // namespace xqajit
