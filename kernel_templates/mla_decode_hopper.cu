// MLA decode, hopper backend (sm_90a: wgmma + TMA / cp.async). One CTA = (split
// of the sequence, 64-row block, request), two warpgroups, every operand in
// 128-byte-swizzled shared memory; the K tile IS the V tile (read MN-major for
// O = P V). Two schedules:
//
// Seesaw (bf16 cache, two row blocks or more: the compute-bound MLA, and splits
// of more than kSeesawMinTiles tiles; mla/hopper_seesaw.cuh, m13): two tiles a
// step, warpgroup 0 computes S on one and warpgroup 1 on the other, the row max
// and each one's P cross through shared memory, each accumulates its 256 output
// dims with both P, and the two buffers are refilled column block by column
// block by TMA as their readers finish.
//
// Per tile (every other spec; mla/hopper_math.cuh): both warpgroups on each
// tile, each S = Q K^T over half its keys (m64n32k16), the row max and P halves
// exchanged, each O += P V over its 256 dims (m64n256k16, P from registers);
// 2 stages, tile i+1 in flight while tile i is computed. A bf16 cache's tiles
// come by TMA (m6: thread 0 issues a page's nine boxes, an mbarrier a stage); an
// fp8 cache's by cp.async from every thread, converted to bf16 in shared memory
// and made visible to wgmma by a proxy fence + barrier.
//
// Geometry: mla/hopper_geometry.h; pieces: mla/hopper_loads.cuh (producer),
// mla/hopper_epilogue.cuh (stores, split merge); PTX: common/wgmma.cuh, common/tma.cuh.

#include "common/mma.cuh"
#include "common/paged_kv.cuh"
#include "common/pdl.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_config.cuh"
#include "mla/hopper_epilogue.cuh"
#include "mla/hopper_loads.cuh"
#include "mla/hopper_math.cuh"
#include "mla/hopper_seesaw.cuh"
#include "mla/hopper_units.cuh"
#include "mla/shared_rows.cuh"

using namespace xqajit;
using namespace xqajit::mla_hopper;

// What both decode entries start with: the 1024-aligned shared-memory base, the tile
// buffers' mbarriers (bf16: [buffer][column block], a phase per fill), the PDL wait, and
// the scales.
struct Prologue {
  unsigned char* smem;
  u32 bars;
  float kv_scale, logit_scale_log2;
};
__device__ __forceinline__ Prologue start_kernel(const XqajitMlaArgs& args, unsigned char* smem_raw,
                                                 unsigned long long* s_full) {
  Prologue p;
  // 128-byte swizzle atoms must sit on 1024-byte boundaries (descriptor base offset 0).
  p.smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  p.bars = smem_addr(s_full);
  if (kTma && threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 2 * kColBlocks; ++i) mbarrier_init(p.bars + 8 * i, 1);
    fence_mbarrier_init();
  }
  // Nothing above reads global memory: an upstream kernel may still be writing.
  pdl_wait();
  pdl_launch_dependents();
  const float q_scale = args.q_scale_ptr ? *args.q_scale_ptr : args.q_scale;
  p.kv_scale = args.kv_scale_ptr ? *args.kv_scale_ptr : args.kv_scale;
  p.logit_scale_log2 = args.sm_scale * q_scale * p.kv_scale * kLog2e;
  return p;
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
    xqajit_mla_decode(const XqajitMlaArgs args, const __grid_constant__ XqajitTensorMap kv_map) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ int s_is_last;
  __shared__ __align__(8) unsigned long long s_full[kTma ? 2 * kColBlocks : 1];
  const Prologue pro = start_kernel(args, smem_raw, s_full);
  unsigned char* const smem = pro.smem;
  const u32 full_addr = pro.bars;
  const float kv_scale = pro.kv_scale, logit_scale_log2 = pro.logit_scale_log2;

  const int split = blockIdx.x, rb = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, rt = warp & 3;  // warpgroup, and this warp's 16-row slice of the 64 rows
  const int quad_row = lane >> 2;
  const Unit unit = unit_at(args, b, rb, split);
  const int num_tiles = unit.num_tiles, split_begin = unit.split_begin, split_end = unit.split_end;
  const int draft_begin = unit.draft_begin;
  const u32 raw_addr = smem_addr(smem + kRawOff);
  const TmaTileLoader tma{&kv_map, unit.table_row, split_begin, split_end, kTma ? l2_evict_first_policy() : 0ull};
  const TileLoader loader{static_cast<const unsigned char*>(args.kv_cache),
                          unit.table_row,
                          args.kv_stride_page,
                          args.kv_stride_token,
                          args.max_pages_per_seq * kPageSize,
                          split_begin,
                          split_end};
  // Compute-bound bf16 specs (kSeesaw): splits of more than kSeesawMinTiles tiles run the
  // seesaw (mla/hopper_seesaw.cuh); shorter ones, and every other spec, the per-tile
  // schedule below, both warpgroups on each tile, whose chain per tile is shorter where a
  // split is all latency (m13, docs/MLA_HOPPER_NOTES.md).
  const bool seesaw = kSeesaw && num_tiles > kSeesawMinTiles;
  int next_pages[TmaTileLoader::kPagesPerTile];  // per-tile TMA, thread 0: the next tile's page ids
  const SeesawSmem sm = seesaw_smem(smem, full_addr);
  if constexpr (kTma) {
    if (tid == 0 && num_tiles > 0) {
      if (seesaw) {
        issue_first_pair(tma, sm);
      } else {
        tma.pages(0, next_pages);
        tma.issue(next_pages, raw_addr, full_addr);
        if (num_tiles > 1) tma.pages(1, next_pages);
      }
    }
  } else {
    if (num_tiles > 0) loader.issue(0, raw_addr, tid);
    cp_async_commit();
  }
  stage_q(args, smem + kQOff, b, rb, tid);
  if constexpr (kTma) {
    fence_proxy_async();  // Q's st.shared -> visible to wgmma; the barrier publishes the mbarrier init too
    __syncthreads();
  }

  RowState st;
  init_rows(st, args, unit, rt, quad_row);

  const u32 q_addr = smem_addr(smem + kQOff);
  if (seesaw) {
    if (tid < kR) sm.max[tid] = -__int_as_float(0x7f800000);
    __syncthreads();
    seesaw_split(st, sm, tma, SeesawSplit{num_tiles, split_begin, split_end, draft_begin, logit_scale_log2}, wg, rt,
                 lane);
    __syncthreads();  // every wgmma and copy is done: the buffers are free
    st.row_max[0] = sm.max[rt * 16 + quad_row];
    st.row_max[1] = sm.max[rt * 16 + quad_row + 8];
    add_other_sums(st, reinterpret_cast<float*>(smem + kRawOff), wg, tid & 127);
  } else {
    const Exchange xchg(smem);
    for (int it = 0; it < num_tiles; ++it) {
      u32 tile_addr = raw_addr + (it & 1) * kStageBytes;
      if constexpr (kTma) {
        // Stage (it + 1) & 1 was freed by the barrier that ended tile it - 1; stage s
        // completes on barrier s (the seesaw's first two, otherwise unused here).
        if (tid == 0 && it + 1 < num_tiles) {
          tma.issue(next_pages, raw_addr + ((it + 1) & 1) * kStageBytes, full_addr + ((it + 1) & 1) * 8);
          if (it + 2 < num_tiles) tma.pages(it + 2, next_pages);
        }
        __syncwarp();  // warp 0 converged again before its wgmmas (.sync.aligned)
        mbarrier_wait_parity(full_addr + (it & 1) * 8, (it >> 1) & 1);
        const int valid = split_end - (split_begin + it * kTile);
        if (valid < kTile) {  // the split's last tile, once per CTA at most
          zero_tile_tail(smem + kRawOff + (it & 1) * kStageBytes, valid, tid);
          fence_proxy_async();
          __syncthreads();
        }
      } else {
        if (it + 1 < num_tiles) loader.issue(it + 1, raw_addr + ((it + 1) & 1) * kStageBytes, tid);
        cp_async_commit();
        cp_async_wait<1>();  // tile it landed (this thread's copies)
        __syncthreads();     // every thread's copies of tile it landed
        convert_tile(smem + kRawOff + (it & 1) * kStageBytes, smem + kTile16Off, tid);
        tile_addr = smem_addr(smem + kTile16Off);
        fence_proxy_async();  // cp.async / st.shared writes -> visible to wgmma (async proxy)
        __syncthreads();
      }
      float s[kHalfKeys / 8][4];
      qk_wgmma(s, q_addr, tile_addr, wg);
      pv_wgmma(st, s, tile_addr, wg, rt, xchg, split_begin + it * kTile, split_end, draft_begin, logit_scale_log2,
               lane);
      __syncthreads();  // every warpgroup is done with this stage, the bf16 tile and the exchange
    }
    if constexpr (!kTma) cp_async_wait<0>();
    add_other_sums(st, reinterpret_cast<float*>(xchg.p), wg, tid & 127);  // the P buffer is free after the last tile
  }

  finish_rows(args, st, smem, &s_is_last, split, rb, b, rt, wg, kv_scale, lane);
}

// Persistent CTAs over the seesaw's units, where the host plans them (args.persistent_units;
// mla/hopper_units.cuh). An entry of its own: beside the grid kernel's one-shot seesaw and
// its split merges, the unit loop's seesaw spilled ~1 KB of registers.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    xqajit_mla_decode_persistent(const XqajitMlaArgs args, const __grid_constant__ XqajitTensorMap kv_map) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) unsigned long long s_full[kTma ? 2 * kColBlocks : 1];
  if constexpr (kSeesaw) {
    const Prologue pro = start_kernel(args, smem_raw, s_full);
    persistent_units(args, kv_map, pro.smem, pro.bars, pro.logit_scale_log2, pro.kv_scale);
  }
}

// The split merge as a second launch, where the host plans one (args.merge_launch;
// mla/shared_epilogue.cuh says when and why).
extern "C" __global__ void __launch_bounds__(mla::kMergeMaxThreads) xqajit_mla_merge(const XqajitMlaArgs args) {
  mla::merge_launch_row<kR, kRows>(args);
}
