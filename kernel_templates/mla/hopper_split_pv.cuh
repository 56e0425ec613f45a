#pragma once
// Hopper MLA backend, the math of the warp-specialized schedule split by role (m54; FlashMLA's
// sparse decode divides its math warpgroups so, docs/MLA_HOPPER_NOTES.md "Session 34"): over
// each bf16 tile the producer warpgroup filled (mla/hopper_producer.cuh),
//   warpgroup 0   S = Q K^T over all 64 keys (36 x m64n64k16), the online softmax, P into
//                 shared memory with each row's correction, O += P V over dims 0-255 (P from
//                 registers);
//   warpgroup 1   O += P V over dims 256-511, P and the corrections from shared memory.
// No row max crosses between them (the per-tile schedule, mla/hopper_math.cuh, splits S's
// keys and exchanges maxima and P halves at two barriers a tile), and warpgroup 1's P V of a
// tile runs under warpgroup 0's S of the next. Two named barriers hand P over: kPReady
// (warpgroup 0 arrives once P and the corrections are stored, 1 waits) and kPFree (1 arrives
// once its P V is done with them, 0 waits before the next store). Warpgroup 0 holds S and P
// beside O, 1 only O: registers 208 / 160 (the producer's 136), back to kMathRegs (184) for the
// epilogue.
// Shared memory: the exchange region (1024-aligned) holds P [64 x 64 bf16, 128-byte swizzle]
// then the corrections [64 floats]; after the split, Q's region carries warpgroup 0's row
// statistics to warpgroup 1.

#include "common/named_barrier.cuh"
#include "common/online_softmax.cuh"
#include "common/registers.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_math.cuh"
#include "mla/hopper_narrow.cuh"
#include "mla/hopper_producer.cuh"
#include "mla/hopper_seesaw.cuh"

namespace xqajit {
namespace mla_hopper {

constexpr int kPReadyBarrier = 2, kPFreeBarrier = 3;  // the producer path's ids (1: math_sync)
constexpr int kWg0Regs = 208, kWg1Regs = 160;
constexpr int kCorrOff = kR * kTile * 2;  // the corrections, after P in the exchange region
static_assert(kSplitPv == (kProducer && !kNarrow), "the split math: the producer's specs but 16 rows");
static_assert(kDsTileUnit == 1.f || kSplitPv, "the producer's fp8ds tile units are divided out by the split math");
static_assert(!kSplitPv || kWg0Regs + kWg1Regs == 2 * kMathRegs, "the math warpgroups' registers move between them");
static_assert(!kSplitPv || (kXchgOff % 1024 == 0 && kCorrOff + kR * 4 <= xqajit_mla_hopper_exchange_bytes(kTile)),
              "P (swizzled, 1024-aligned) and the corrections fit the exchange region");

struct SplitPvTiles {
  u32 raw_addr, full_addr;  // the producer's two bf16 tile buffers, their full and empty mbarriers
  int num_tiles, split_begin, split_end, draft_begin;
  float logit_scale_log2;
  const unsigned char* key_ok;  // sparse: [tile parity][kTile] flags
};

// Warpgroup 0's split: S, softmax, P out, its half of P V.
__device__ __forceinline__ void split_pv_wg0(RowState& st, const SplitPvTiles& t, u32 q_addr, unsigned char* xsmem,
                                             int rt, int lane) {
  const int quad_row = lane >> 2, quad_col = lane & 3;
  float* const corr_smem = reinterpret_cast<float*>(xsmem + kCorrOff);
  float(&o)[kWgDims / 2] = reinterpret_cast<float(&)[kWgDims / 2]>(st.acc);
#pragma unroll 1
  for (int it = 0; it < t.num_tiles; ++it) {
    const u32 tile = t.raw_addr + (it & 1) * kBufBytes;
    mbarrier_wait_parity(t.full_addr + (it & 1) * 8, (it >> 1) & 1);
    float s[8][4];
    float(&d)[32] = reinterpret_cast<float(&)[32]>(s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kQk / 16; ++kk) {
      const int blk = kk >> 2, sub = kk & 3;
      wgmma_m64n64k16_ss(d, wgmma_desc_sw128(q_addr + blk * kR * 128 + sub * 32, 16, 1024),
                         wgmma_desc_sw128(tile + blk * kTile * 128 + sub * 32, 16, 1024), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(d);
    const int tile_start = t.split_begin + it * kTile;
    scale_and_mask(s, tile_start, tile_needs_mask(tile_start, t.split_end, t.draft_begin), t.split_end,
                   t.draft_begin, st.bits, t.logit_scale_log2, quad_col, MLA_SPARSE ? t.key_ok + (it & 1) * kTile : nullptr);
    float corr[2];
    online_softmax_tile<kLazyLog2>(s, st.row_max, st.row_sum, corr);
    rescale_rows(st.acc, corr);
    u32 pa[4][4];
    const float one[2] = {1.f, 1.f};
    pack_p(pa, s, one);
    if (it > 0) named_barrier_sync(kPFreeBarrier, kThreads);  // warpgroup 1 is done with the last P
    store_p(xsmem, pa, rt, lane);
    if (quad_col == 0) corr_smem[rt * 16 + quad_row] = corr[0], corr_smem[rt * 16 + quad_row + 8] = corr[1];
    fence_proxy_async();  // P -> visible to warpgroup 1's wgmmas
    named_barrier_arrive(kPReadyBarrier, kThreads);
    wgmma_pin(o);
    wgmma_fence();
    pv_registers(o, pa, tile, 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(o);
    release_tile_buffer(t.full_addr, it, t.num_tiles, lane);
  }
}

// Warpgroup 1's split: its half of P V from warpgroup 0's P.
__device__ __forceinline__ void split_pv_wg1(RowState& st, const SplitPvTiles& t, unsigned char* xsmem, int rt,
                                             int lane) {
  const int quad_row = lane >> 2;
  const float* const corr_smem = reinterpret_cast<const float*>(xsmem + kCorrOff);
  const u32 p_addr = smem_addr(xsmem);
  float(&o)[kWgDims / 2] = reinterpret_cast<float(&)[kWgDims / 2]>(st.acc);
#pragma unroll 1
  for (int it = 0; it < t.num_tiles; ++it) {
    const u32 tile = t.raw_addr + (it & 1) * kBufBytes;
    named_barrier_sync(kPReadyBarrier, kThreads);  // P and the corrections of tile it
    // The tile's rows: flipped already (0 waited for them); the phase cannot move on before
    // this warpgroup releases the buffer, and the wait orders the producers' writes for it.
    mbarrier_wait_parity(t.full_addr + (it & 1) * 8, (it >> 1) & 1);
    const float corr[2] = {corr_smem[rt * 16 + quad_row], corr_smem[rt * 16 + quad_row + 8]};
    rescale_rows(st.acc, corr);
    wgmma_pin(o);
    wgmma_fence();
    pv_shared(o, p_addr, tile, 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(o);
    if (it + 1 < t.num_tiles) named_barrier_arrive(kPFreeBarrier, kThreads);
    release_tile_buffer(t.full_addr, it, t.num_tiles, lane);
  }
}

// The two math warpgroups over the split, then st as finish_rows takes it: warpgroup 1's rows'
// max and sums are warpgroup 0's (it summed every key of its columns; the epilogue's quad sum
// does the rest). Called with kMathRegs registers, returns with them. Over fp8ds tiles the
// values are in units of kDsTileUnit (m100): the logits' scale and the rows divide it out.
__device__ __forceinline__ void split_pv_cta(RowState& st, SplitPvTiles t, unsigned char* smem, int wg, int rt,
                                             int lane) {
  if constexpr (kDsTileUnit != 1.f) t.logit_scale_log2 *= 1.f / kDsTileUnit;
  unsigned char* const xsmem = smem + kXchgOff;
  float* const stats = reinterpret_cast<float*>(smem + kQOff);  // [128][4]: Q is free once 0 is done
  const int tid_wg = rt * 32 + lane;
  if (wg == 0) {
    warpgroup_claim_registers<kWg0Regs>();
    split_pv_wg0(st, t, smem_addr(smem + kQOff), xsmem, rt, lane);
    stats[tid_wg * 4 + 0] = st.row_max[0], stats[tid_wg * 4 + 1] = st.row_max[1];
    stats[tid_wg * 4 + 2] = st.row_sum[0], stats[tid_wg * 4 + 3] = st.row_sum[1];
    warpgroup_release_registers<kMathRegs>();
  } else {
    warpgroup_release_registers<kWg1Regs>();
    split_pv_wg1(st, t, xsmem, rt, lane);
    warpgroup_claim_registers<kMathRegs>();
  }
  if constexpr (kDsTileUnit != 1.f)
#pragma unroll
    for (int i = 0; i < kAccTiles; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) st.acc[i][e] *= 1.f / kDsTileUnit;
  math_sync();  // warpgroup 0's statistics are stored; both are done with P and the buffers
  if (wg == 1) {
    st.row_max[0] = stats[tid_wg * 4 + 0], st.row_max[1] = stats[tid_wg * 4 + 1];
    st.row_sum[0] = stats[tid_wg * 4 + 2], st.row_sum[1] = stats[tid_wg * 4 + 3];
  }
  math_sync();  // read: the epilogue may reuse the shared memory
}

}  // namespace mla_hopper
}  // namespace xqajit
