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

// P_b of every request into `prefix` (shared memory, B + 1 ints), by the kThreads threads:
// each sums a run of requests' tiles, a scan over the block places the runs; and the longest
// request's tiles. Ends with a barrier.
__device__ __forceinline__ mla::BalancedPlan balanced_plan(const XqajitMlaArgs& args, int* prefix, int* warp_sums,
                                                      int tid) {
  const int batch = args.batch, max_len = args.max_pages_per_seq * kPageSize;
  const int per = (batch + kThreads - 1) / kThreads;
  const int b0 = tid * per < batch ? tid * per : batch, b1 = b0 + per < batch ? b0 + per : batch;
  int sum = 0, longest = 0;
  for (int b = b0; b < b1; ++b) {
    const int tiles = split_tile_count<kTile>(0, clamped_seq_len(args.seq_lens, b, max_len));
    sum += tiles;
    longest = tiles > longest ? tiles : longest;
  }
  const int lane = tid & 31, warp = tid >> 5;
  int incl = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
    const int m = __shfl_xor_sync(0xffffffffu, longest, o);
    longest = m > longest ? m : longest;
  }
  if (lane == 31) warp_sums[warp] = incl;
  if (lane == 0) warp_sums[kThreads / 32 + warp] = longest;
  __syncthreads();
  int run = incl - sum;
  for (int w = 0; w < warp; ++w) run += warp_sums[w];
  for (int w = 0; w < kThreads / 32; ++w)
    longest = warp_sums[kThreads / 32 + w] > longest ? warp_sums[kThreads / 32 + w] : longest;
  for (int b = b0; b < b1; ++b) {
    prefix[b] = run;
    run += split_tile_count<kTile>(0, clamped_seq_len(args.seq_lens, b, max_len));
  }
  if (tid == kThreads - 1) prefix[batch] = run;  // the last thread's run ends at T
  __syncthreads();
  return mla::BalancedPlan{prefix, batch, args.balanced_parts, longest};
}

static_assert(kSeesaw == xqajit_mla_hopper_balanced(kHeads, kQLen, kCacheBytes, MLA_SPARSE),
              "the host plans the balanced grid for exactly the seesaw specs");
static_assert((kXqajitMlaBalancedMaxBatch + 1) * 4 <= 2 * kStageBytes, "the plan's prefix sums fit the tile buffers");

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
  __shared__ int s_warp_sums[2 * (kThreads / 32)];  // each warp's tiles, then its longest request
  // The pieces wait in shared memory: the second one's fields, kept in registers, spilled
  // across the first one's seesaw.
  __shared__ mla::BalancedPiece s_pieces[2];
  const int lane = tid & 31, warp = tid >> 5;
  const int wg = warp_uniform(warp >> 2), rt = warp_uniform(warp & 3);
  {
    // The plan's prefix sums borrow the tile buffers, free until the first piece's copies.
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
    const int max_len = args.max_pages_per_seq * kPageSize;
    const u32 raw_addr = smem_addr(smem + kRawOff);
    const u64 policy = l2_evict_first_policy();
    const int seq_len = clamped_seq_len(args.seq_lens, pc.b, max_len);
    const int begin = pc.first_tile * kTile;
    const int end = begin + pc.num_tiles * kTile < seq_len ? begin + pc.num_tiles * kTile : seq_len;
    const TmaTileLoader tma{kv_map, args.block_table + (long long)pc.b * args.block_table_stride, begin, end, policy};
    if (tid == 0 && pc.num_tiles > 0) seesaw_first_tiles(tma, raw_addr, full_addr);
    stage_q(args, smem + kQOff, pc.b, rb, tid);
    fence_proxy_async();  // Q's copies (generic proxy) -> visible to wgmma
    __syncthreads();
    RowState st;
    mla::init_rows<kRowStride>(st, args, pc.b, rb, rt, lane >> 2);
    if (pc.num_tiles > 0) {
      const SeesawSmem sm = seesaw_smem(smem, full_addr, tid);
      __syncthreads();
      seesaw_split(st, sm, tma, SeesawSplit{pc.num_tiles, begin, end, seq_len - kQLen, scales.logit_scale_log2}, wg,
                   rt, lane);
      __syncthreads();  // every wgmma and copy is done: the buffers are free
      seesaw_rows(st, sm, wg, rt, lane);
    }
    // Re-read after the seesaw rather than kept live across it (255 registers there).
    const volatile mla::BalancedPiece& done = s_pieces[i];
    const mla::BalancedPiece fin{done.b, done.first_tile, done.num_tiles, done.splits, done.index, done.first_slot};
    const int t2 = threadIdx.x;
    finish_piece(args, st, smem, s_is_last, fin, blockIdx.x, warp_uniform((t2 >> 5) & 3), warp_uniform(t2 >> 7),
                 mla::scales(args).kv, t2 & 31);
  }
}

}  // namespace mla_hopper
}  // namespace xqajit
