#pragma once
// Hopper MLA backend, the work a CTA takes: a unit is row block rb of request b over
// one split of its keys. xqajit_mla_decode's CTAs take one unit each (the grid cell);
// where the host plans persistent CTAs (args.persistent_units: the seesaw's units
// outnumber the SMs, e.g. H=128 B=128 or MTP, which launched two waves),
// xqajit_mla_decode_persistent's CTAs each walk units blockIdx.x, + gridDim.x, ... and
// load the next unit's Q and first two tiles under the current unit's epilogue: a second
// wave cost ~22 us beyond its steps (launch, the first tiles' burst with no math under
// it, the epilogue; session 22 run 5).

#include "common/mma.cuh"
#include "common/paged_kv.cuh"
#include "common/tma.cuh"
#include "mla/hopper_config.cuh"
#include "mla/hopper_epilogue.cuh"
#include "mla/hopper_loads.cuh"
#include "mla/hopper_math.cuh"
#include "mla/hopper_seesaw.cuh"
#include "mla/shared_rows.cuh"

namespace xqajit {
namespace mla_hopper {

constexpr int kRowBlocks = (kRows + kR - 1) / kR;

struct Unit {
  int b, rb, split;
  int split_begin, split_end, num_tiles, draft_begin;
  const int* table_row;
};

__device__ __forceinline__ Unit unit_at(const XqajitMlaArgs& args, int b, int rb, int split) {
  const int max_len = args.max_pages_per_seq * kPageSize;
  const int seq_len = clamped_seq_len(args.seq_lens, b, max_len);
  Unit u;
  u.b = b, u.rb = rb, u.split = split;
  u.split_begin = split * args.split_tokens;
  u.split_end = u.split_begin + args.split_tokens < seq_len ? u.split_begin + args.split_tokens : seq_len;
  u.num_tiles = split_tile_count<kTile>(u.split_begin, u.split_end);
  u.draft_begin = seq_len - kQLen;
  u.table_row = args.block_table + (long long)b * args.block_table_stride;
  return u;
}

// A unit's fresh row state: each row's visible drafts, no key seen yet.
__device__ __forceinline__ void init_rows(RowState& st, const XqajitMlaArgs& args, const Unit& u, int rt,
                                          int quad_row) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int t = (u.rb * kR + rt * 16 + quad_row + half * 8) / kHeads;
    t = t < kQLen ? t : kQLen - 1;  // padding rows: any valid token (their output is dropped)
    st.bits[half] = mla::draft_bits(args, u.b, t, kQLen);
    st.row_max[half] = -__int_as_float(0x7f800000);
    st.row_sum[half] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < kAccTiles; ++i) st.acc[i][0] = st.acc[i][1] = st.acc[i][2] = st.acc[i][3] = 0.f;
}

// The seesaw's shared-memory map (mla/hopper_config.cuh).
__device__ __forceinline__ SeesawSmem seesaw_smem(unsigned char* smem, u32 bars) {
  SeesawSmem sm;
  sm.base = smem;
  sm.q = smem_addr(smem + kQOff);
  sm.p0 = smem_addr(smem + kP0Off);
  sm.p1 = sm.q + kRopeBlock * kR * 128;
  sm.buf[0] = smem_addr(smem + kRawOff), sm.buf[1] = sm.buf[0] + kStageBytes;
  sm.max = reinterpret_cast<float*>(smem + kStatsOff);
  sm.scale0 = sm.max + kR;
  sm.scale1 = sm.scale0 + kR;
  sm.bars = bars;
  return sm;
}

// The seesaw's first two tiles, whole, one thread.
__device__ __forceinline__ void issue_first_pair(const TmaTileLoader& tma, const SeesawSmem& sm) {
  int ids[TmaTileLoader::kPagesPerTile];
  for (int t = 0; t < 2; ++t) {
    tma.pages(t, ids);
    tma.issue_cols<0, kColBlocks>(ids, sm.buf[t], sm.bar(t));
  }
}

// The unit's bf16 Q rows -> the swizzled Q block by cp.async (zeros for padding rows), so
// that a persistent CTA's next Q lands under the current unit's epilogue. (The seesaw's Q
// is bf16: it runs on a bf16 cache, and an fp8 Q needs an fp8 cache.)
__device__ __forceinline__ void issue_q(const XqajitMlaArgs& args, u32 q_addr, const Unit& u, int tid) {
  constexpr int kChunks = kQk * 2 / 16;
  const unsigned char* const q = static_cast<const unsigned char*>(args.q);
  for (int i = tid; i < kR * kChunks; i += kThreads) {
    const int r = i / kChunks, chunk = i % kChunks, row = u.rb * kR + r;
    const int t = row / kHeads, h = row % kHeads;
    const long long off =
        ((long long)u.b * args.q_stride_batch + (long long)t * args.q_stride_token + (long long)h * args.q_stride_head) *
        2;
    cp_async_16(q_addr + sw128_offset(r, chunk, kR), row < kRows ? q + off + chunk * 16 : args.q, row < kRows);
  }
}

// Persistent CTAs over the seesaw's units (xqajit_mla_decode_persistent; one split each).
// Between units the buffers' mbarriers start afresh (every phase has completed), so each
// unit's seesaw starts at parity 0. Only the unit index lives across the seesaw (its loop
// holds 255 registers): the unit is looked up again after it, and the shared-memory map
// is rebuilt each unit (hoisted out of this loop, the seesaw's operand descriptors stayed
// live around it and spilled).
__device__ __forceinline__ void persistent_units(const XqajitMlaArgs& args, const XqajitTensorMap& kv_map,
                                                 unsigned char* smem, u32 bars, float logit_scale_log2,
                                                 float kv_scale) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, rt = warp & 3, quad_row = lane >> 2;
  const auto unit = [&](int u) { return unit_at(args, u / kRowBlocks, u % kRowBlocks, 0); };
  const auto loader = [&](const Unit& w) {
    return TmaTileLoader{&kv_map, w.table_row, w.split_begin, w.split_end, l2_evict_first_policy()};
  };
  // Unit u's first two tiles and Q, into free buffers.
  const auto prefetch = [&](int u) {
    const SeesawSmem sm = seesaw_smem(smem, bars);
    const Unit w = unit(u);
    if (tid == 0 && w.num_tiles > 0) issue_first_pair(loader(w), sm);
    issue_q(args, sm.q, w, tid);
    cp_async_commit();
  };
  prefetch(blockIdx.x);
  for (int u = blockIdx.x; u < args.persistent_units; u += gridDim.x) {
    unsigned char* base = smem;
    asm volatile("" : "+l"(base));
    const SeesawSmem sm = seesaw_smem(base, bars);
    cp_async_wait<0>();
    fence_proxy_async();  // Q's cp.async writes -> visible to wgmma
    if (tid < kR) sm.max[tid] = -__int_as_float(0x7f800000);
    __syncthreads();  // (the first time, the mbarrier inits too)
    RowState st;
    {
      const Unit w = unit(u);
      init_rows(st, args, w, rt, quad_row);
      if (w.num_tiles > 0)
        seesaw_split(st, sm, loader(w),
                     SeesawSplit{w.num_tiles, w.split_begin, w.split_end, w.draft_begin, logit_scale_log2}, wg, rt,
                     lane);
    }
    __syncthreads();  // every wgmma and copy of the unit is done: Q, P and the buffers are free
    st.row_max[0] = sm.max[rt * 16 + quad_row];
    st.row_max[1] = sm.max[rt * 16 + quad_row + 8];
    if (u + gridDim.x < args.persistent_units) {
      if (tid == 0) {
        for (int i = 0; i < 2 * kColBlocks; ++i) mbarrier_inval(bars + 8 * i), mbarrier_init(bars + 8 * i, 1);
        fence_mbarrier_init();  // (the next unit's first barrier publishes it to the other threads)
      }
      prefetch(u + gridDim.x);
    }
    add_other_sums(st, reinterpret_cast<float*>(base + kP0Off), wg, tid & 127);
    const Unit w = unit(u);
    store_final_rows(args, st, w.rb, w.b, rt, wg, kv_scale, lane);
  }
}

}  // namespace mla_hopper
}  // namespace xqajit
