#pragma once
// Hopper MLA backend, bf16 cache: the seesaw schedule (m13). The order is the one
// FlashMLA's write-up and public dense decode publish; the code is ours.
//
// Two 64-key tiles a step: tile a = 2j in buffer 0, tile b = 2j + 1 in buffer 1.
// Warpgroup 0 computes S_a and owns output dims 0..255, warpgroup 1 computes S_b
// and owns dims 256..511. The running row max lives in shared memory; each
// warpgroup accumulates its half of O with both tiles' P, its own from registers
// and the other's from shared memory. One step:
//   warpgroup 0                               warpgroup 1
//   softmax(S_a): max0, scale0 ->             (waits scale0)
//   O0 += P_a V_a[:, :256]                    softmax(S_b) against max0: max1, scale1 ->
//   (waits scale1) refill buf0 blocks 0-3     P_b -> smem; O1 += P_b V_b[:, 256:]
//   P_a * scale1 -> smem ->                   (waits P_a) O1 += P_a V_a[:, 256:]
//   (waits P_b) O0 += P_b V_b[:, :256]        refill buf1 blocks 4-8, then buf0 blocks 4-8
//   S_a+2 blocks 0-3; refill buf1 blocks 0-3  S_b+2 blocks 4-8, then 0-3
//   S_a+2 blocks 4-8
// so one warpgroup's softmax runs under the other's wgmmas, and a buffer's column
// blocks are refilled as soon as their last reader is done: the next tile has most
// of a step to land with two buffers (m7 refilled whole halves after the step's
// last P V and lost the copy lead). Q's rope block (column block 8) stays in
// registers as the A operand of an RS wgmma; its shared memory carries P_b.
//
// Every named-barrier call below runs on every step in both warpgroups (no branch
// skips one), so the two loops stay in lockstep whatever the tile count.

#include "common/named_barrier.cuh"
#include "common/online_softmax.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_config.cuh"
#include "mla/hopper_loads.cuh"
#include "mla/hopper_math.cuh"

namespace xqajit {
namespace mla_hopper {

enum SeesawBarrier : int {  // named barrier ids (0 is __syncthreads')
  kScale0Ready = 1,         // warpgroup 0 published max0 and scale0
  kScale1Ready = 2,         // warpgroup 1 published max1 and scale1
  kP0Ready = 3,             // P_a (rescaled) is in shared memory
  kP1Ready = 4,             // P_b is in shared memory, and warpgroup 1 issued its P_a V
  kWarpgroupLocal = 5,      // + warpgroup: zeroed keys visible to the warpgroup's own wgmma
};
constexpr int kVBlocks = kWgDims / kColBlock;  // column blocks of V one warpgroup reads (4)
constexpr int kRopeBlock = kColBlocks - 1;     // Q's column block in registers (8)

struct SeesawSmem {
  unsigned char* base;  // the 1024-aligned shared-memory base
  u32 q, p0, p1;        // Q (blocks 0-7), P_a, P_b (= Q's block 8)
  u32 buf[2];           // the two tiles
  float* max;           // running row max (log2 units), [64]
  float* scale0;        // 2^(old max - max0), [64]
  float* scale1;        // 2^(max0 - max1), [64]
  u32 bars;             // mbarriers [buffer][column block]
  __device__ u32 bar(int buffer) const { return bars + buffer * kColBlocks * 8; }
  __device__ unsigned char* buf_ptr(int buffer) const { return base + kRawOff + buffer * kStageBytes; }
};

// The seesaw's shared memory in the CTA's map (mla/hopper_config.cuh), the row max reset (a
// barrier before seesaw_split publishes it).
__device__ __forceinline__ SeesawSmem seesaw_smem(unsigned char* smem, u32 full_addr, int tid) {
  SeesawSmem sm;
  sm.base = smem;
  sm.q = smem_addr(smem + kQOff);
  sm.p0 = smem_addr(smem + kP0Off);
  sm.p1 = sm.q + kRopeBlock * kR * 128;
  sm.buf[0] = smem_addr(smem + kRawOff), sm.buf[1] = sm.buf[0] + kStageBytes;
  sm.max = reinterpret_cast<float*>(smem + kStatsOff);
  sm.scale0 = sm.max + kR;
  sm.scale1 = sm.scale0 + kR;
  sm.bars = full_addr;
  if (tid < kR) sm.max[tid] = -__int_as_float(0x7f800000);
  return sm;
}

// Thread 0, before Q is staged: the split's first two tiles, whole, into the two buffers.
__device__ __forceinline__ void seesaw_first_tiles(const TmaTileLoader& tma, u32 raw_addr, u32 full_addr) {
  int pages[TmaTileLoader::kPagesPerTile];
  for (int t = 0; t < 2; ++t) {
    tma.pages(t, pages);
    tma.issue_cols<0, kColBlocks>(pages, raw_addr + t * kStageBytes, full_addr + t * kColBlocks * 8);
  }
}

struct SeesawSplit {
  int num_tiles, split_begin, split_end, draft_begin;
  float logit_scale_log2;
};

// Q's rope block as the A fragments of its four k16 steps (the mma.sync m16n8k16 A
// layout of this warp's 16 rows): register i holds row +8 (i & 1), column +8 (i >> 1).
__device__ __forceinline__ void load_q_rope(u32 (&q8)[4][4], const unsigned char* q_smem, int rt, int lane) {
  const int r0 = rt * 16 + (lane >> 2), c0 = 2 * (lane & 3);
#pragma unroll
  for (int sub = 0; sub < 4; ++sub)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = r0 + (i & 1) * 8, col = kRopeBlock * kColBlock + sub * 16 + c0 + (i >> 1) * 8;
      q8[sub][i] = *reinterpret_cast<const u32*>(q_smem + sw128_offset(row, col / 8, kR) + (col % 8) * 2);
    }
}

// P (accumulator layout, 64 keys) times a per-row factor -> bf16 A fragments of four k16 steps.
__device__ __forceinline__ void pack_p(u32 (&pa)[4][4], const float (&s)[8][4], const float (&f)[2]) {
#pragma unroll
  for (int kb = 0; kb < 4; ++kb) {
    pa[kb][0] = pack_f32x2<false>(s[2 * kb][0] * f[0], s[2 * kb][1] * f[0]);
    pa[kb][1] = pack_f32x2<false>(s[2 * kb][2] * f[1], s[2 * kb][3] * f[1]);
    pa[kb][2] = pack_f32x2<false>(s[2 * kb + 1][0] * f[0], s[2 * kb + 1][1] * f[0]);
    pa[kb][3] = pack_f32x2<false>(s[2 * kb + 1][2] * f[1], s[2 * kb + 1][3] * f[1]);
  }
}

// This warp's A fragments of P -> a K-major 128-byte-swizzled 64 x 64 block, the A
// operand of the other warpgroup's SS wgmma (a warp's stores hit 32 distinct banks).
__device__ __forceinline__ void store_p(unsigned char* dst, const u32 (&pa)[4][4], int rt, int lane) {
  const int r0 = rt * 16 + (lane >> 2), c0 = 2 * (lane & 3);
#pragma unroll
  for (int kb = 0; kb < 4; ++kb)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = r0 + (i & 1) * 8, col = kb * 16 + c0 + (i >> 1) * 8;
      *reinterpret_cast<u32*>(dst + sw128_offset(row, col / 8, kR) + (col % 8) * 2) = pa[kb][i];
    }
}

// S += Q K^T over column blocks kFirst..kLast-1 of the tile at k_addr, a commit group
// per block, each issued as soon as its own barrier flips (later blocks may still be
// landing). The wait comes before the wgmma.fence: a try_wait loop between two wgmmas
// of one group is a divergent path, across which ptxas serializes the whole chain.
template <int kFirst, int kLast>
__device__ __forceinline__ void qk_blocks(float (&d)[32], u32 q_addr, const u32 (&q8)[4][4], u32 k_addr, u32 bars,
                                          u32 parity) {
  constexpr int kSmemLast = kLast < kRopeBlock ? kLast : kRopeBlock;
  // Not unrolled: unrolled, ptxas keeps the descriptors of every block live and spills (m7).
#pragma unroll 1
  for (int cb = kFirst; cb < kSmemLast; ++cb) {
    mbarrier_wait_parity(bars + 8 * cb, parity);
    const u64 da = wgmma_desc_sw128(q_addr + cb * kR * 128, 16, 1024);
    const u64 db = wgmma_desc_sw128(k_addr + cb * kTile * 128, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int sub = 0; sub < 4; ++sub) wgmma_m64n64k16_ss(d, da + 2 * sub, db + 2 * sub, 1);  // +32 bytes a k16 step
    wgmma_commit();
  }
  if constexpr (kLast == kColBlocks) {
    mbarrier_wait_parity(bars + 8 * kRopeBlock, parity);
    const u64 db = wgmma_desc_sw128(k_addr + kRopeBlock * kTile * 128, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int sub = 0; sub < 4; ++sub) wgmma_m64n64k16_rs(d, q8[sub], db + 2 * sub);
    wgmma_commit();
  }
}

__device__ __forceinline__ void zero_scores(float (&s)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
  wgmma_fence();
}

// V's column blocks of output half `half`, keys 16 kb.. (MN-major: LBO = one block).
__device__ __forceinline__ u64 v_desc(u32 tile, int half, int kb) {
  return wgmma_desc_sw128(tile + half * kVBlocks * kTile * 128 + kb * 2048, kTile * 128, 1024);
}
__device__ __forceinline__ void pv_registers(float (&o)[kWgDims / 2], const u32 (&pa)[4][4], u32 tile, int half) {
#pragma unroll
  for (int kb = 0; kb < 4; ++kb) wgmma_m64n256k16_rs<1>(o, pa[kb], v_desc(tile, half, kb));
}
__device__ __forceinline__ void pv_shared(float (&o)[kWgDims / 2], u32 p, u32 tile, int half) {
#pragma unroll
  for (int kb = 0; kb < 4; ++kb) wgmma_m64n256k16_ss<1>(o, wgmma_desc_sw128(p + kb * 32, 16, 1024), v_desc(tile, half, kb));
}

// A row's max over this thread's quad (the quad holds the tile's 64 keys).
__device__ __forceinline__ void quad_tile_max(const float (&s)[8][4], float (&m)[2]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    m[0] = fmaxf(m[0], fmaxf(s[n][0], s[n][1]));
    m[1] = fmaxf(m[1], fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 1));
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 2));
  }
}

// s -> 2^(s - base) in place; returns the rows' sums of this thread's columns.
__device__ __forceinline__ void exponentiate(float (&s)[8][4], const float (&base)[2], float (&sum)[2]) {
  sum[0] = sum[1] = 0.f;
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = fast_exp2(s[n][e] - base[e >> 1]);
      sum[e >> 1] += s[n][e];
    }
}

// A max that is still -inf (no key seen) exponentiates against 0: never -inf - -inf.
__device__ __forceinline__ float exp_base(float m) { return m == -__int_as_float(0x7f800000) ? 0.f : m; }

// What a step knows of its tiles (a = 2j, b = a + 1) and of the next two, which it
// refills: which exist, the next tiles' barrier parity, and (the issuing thread) their
// page ids, read at the step's start so the table's latency hides under the softmax.
// kSteady: the steady step's, where all of them exist (seesaw_split).
template <bool kSteady>
struct SeesawStep {
  bool has_b, has_a2, has_b2;
  u32 next_parity;
  int ids_a2[TmaTileLoader::kPagesPerTile], ids_b2[TmaTileLoader::kPagesPerTile];
  __device__ SeesawStep(const TmaTileLoader& tma, const SeesawSplit& sp, int a, bool issuer)
      : has_b(kSteady || a + 1 < sp.num_tiles),
        has_a2(kSteady || a + 2 < sp.num_tiles),
        has_b2(kSteady || a + 3 < sp.num_tiles),
        next_parity(((a >> 1) + 1) & 1) {
    if (issuer) tma.pages(a + 2, ids_a2), tma.pages(a + 3, ids_b2);
  }
};

// Warpgroup 0's softmax of tile a (its S in s, starting at key start_a) against the running
// max: publishes max0 and scale0 = 2^(old max - max0) of rows r0, r0 + 8 and arrives on
// kScale0Ready; s -> 2^(s - max0), the rows' sums onto max0. scale0 for the caller's O.
// (The bf16 seesaw and the fp8 one, mla/hopper_qgmma.cuh, share it.)
template <bool kSteady, int kLazy = 0>
__device__ __forceinline__ void softmax_max0(float (&s)[8][4], RowState& st, float* max, float* scale0_out,
                                             const SeesawSplit& sp, int start_a, int r0, int lane,
                                             float (&scale0)[2]) {
  scale_and_mask(s, start_a, !kSteady && tile_needs_mask(start_a, sp.split_end, sp.draft_begin), sp.split_end,
                 sp.draft_begin, st.bits, sp.logit_scale_log2, lane & 3);
  float m[2] = {-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)};
  quad_tile_max(s, m);
  float base[2], sum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float old = max[r0 + 8 * h];
    m[h] = lazy_max<kLazy>(fmaxf(old, m[h]), old);
    base[h] = exp_base(m[h]);
    scale0[h] = fast_exp2(old - base[h]);
  }
  __syncwarp();  // the quad has read the old max
  if ((lane & 3) == 0)
#pragma unroll
    for (int h = 0; h < 2; ++h) max[r0 + 8 * h] = m[h], scale0_out[r0 + 8 * h] = scale0[h];
  named_barrier_arrive(kScale0Ready, kThreads);
  exponentiate(s, base, sum);
#pragma unroll
  for (int h = 0; h < 2; ++h) st.row_sum[h] = st.row_sum[h] * scale0[h] + sum[h];
}

// Warpgroup 1's softmax of tile b (its S in s, if the tile exists) against max0, once
// kScale0Ready says max0 is there: publishes max1 and scale1 = 2^(max0 - max1) and arrives on
// kScale1Ready; s -> 2^(s - max1), the rows' sums onto max1. carry = scale0 scale1 for the
// caller's O.
template <bool kSteady, int kLazy = 0>
__device__ __forceinline__ void softmax_max1(float (&s)[8][4], RowState& st, float* max, const float* scale0_in,
                                             float* scale1_out, const SeesawSplit& sp, int start_b, bool has_b,
                                             int r0, int lane, float (&carry)[2]) {
  float m[2] = {-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)};
  if (has_b) {
    scale_and_mask(s, start_b, !kSteady && tile_needs_mask(start_b, sp.split_end, sp.draft_begin), sp.split_end,
                   sp.draft_begin, st.bits, sp.logit_scale_log2, lane & 3);
    quad_tile_max(s, m);
  }
  named_barrier_sync(kScale0Ready, kThreads);
  float base[2], scale1[2], sum[2] = {0.f, 0.f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float max0 = max[r0 + 8 * h];
    m[h] = lazy_max<kLazy>(fmaxf(max0, m[h]), max0);
    base[h] = exp_base(m[h]);
    scale1[h] = fast_exp2(max0 - base[h]);
    carry[h] = scale0_in[r0 + 8 * h] * scale1[h];
  }
  __syncwarp();
  if ((lane & 3) == 0)
#pragma unroll
    for (int h = 0; h < 2; ++h) max[r0 + 8 * h] = m[h], scale1_out[r0 + 8 * h] = scale1[h];
  named_barrier_arrive(kScale1Ready, kThreads);
  if (has_b) exponentiate(s, base, sum);
#pragma unroll
  for (int h = 0; h < 2; ++h) st.row_sum[h] = st.row_sum[h] * carry[h] + sum[h];
}

// Warpgroup 0's step on tile a (its S in s) and tile b (warpgroup 1's). kSteady: both
// tiles are whole and need no mask, and the next two exist (seesaw_split).
template <bool kSteady>
__device__ __forceinline__ void wg0_step(float (&s)[8][4], RowState& st, const SeesawSmem& sm,
                                         const TmaTileLoader& tma, const SeesawSplit& sp, const u32 (&q8)[4][4], int a,
                                         int rt, int lane) {
  const int tid_wg = rt * 32 + lane, r0 = rt * 16 + (lane >> 2);
  const bool issuer = tid_wg == 0;
  const SeesawStep<kSteady> step(tma, sp, a, issuer);
  float(&o)[kWgDims / 2] = reinterpret_cast<float(&)[kWgDims / 2]>(st.acc);

  // softmax(S_a) against the running max: max0, scale0.
  const int start_a = sp.split_begin + a * kTile;
  float scale0[2];
  softmax_max0<kSteady, kLazyLog2>(s, st, sm.max, sm.scale0, sp, start_a, r0, lane, scale0);
  rescale_rows(st.acc, scale0);

  // O0 += P_a V_a[:, :256].
  u32 pa[4][4];
  const float one[2] = {1.f, 1.f};
  pack_p(pa, s, one);
  const int valid_a = sp.split_end - start_a;
  if (!kSteady && valid_a < kTile) {  // the split's last tile: unused page slots may hold NaN
    zero_cols_tail<0, kVBlocks>(sm.buf_ptr(0), valid_a, tid_wg);
    fence_proxy_async();
    named_barrier_sync(kWarpgroupLocal, 128);
  }
  wgmma_pin(o);
  wgmma_fence();
  pv_registers(o, pa, sm.buf[0], 0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_pin(o);

  // Warpgroup 1's max1 -> P_a for its P V, and our O onto max1.
  named_barrier_sync(kScale1Ready, kThreads);
  if (issuer && step.has_a2) tma.issue_cols<0, kVBlocks>(step.ids_a2, sm.buf[0], sm.bar(0));  // blocks 0-3 of buf0 are read
  const float scale1[2] = {sm.scale1[r0], sm.scale1[r0 + 8]};
  pack_p(pa, s, scale1);
  store_p(sm.base + kP0Off, pa, rt, lane);
  fence_proxy_async();
  named_barrier_arrive(kP0Ready, kThreads);
#pragma unroll
  for (int h = 0; h < 2; ++h) st.row_sum[h] *= scale1[h];
  rescale_rows(st.acc, scale1);

  // O0 += P_b V_b[:, :256], under the next S.
  named_barrier_sync(kP1Ready, kThreads);
  if (step.has_b) {
    const int valid_b = valid_a - kTile;
    if (!kSteady && valid_b < kTile) {
      zero_cols_tail<0, kVBlocks>(sm.buf_ptr(1), valid_b, tid_wg);
      fence_proxy_async();
      named_barrier_sync(kWarpgroupLocal, 128);
    }
    wgmma_pin(o);
    wgmma_fence();
    pv_shared(o, sm.p1, sm.buf[1], 0);
    wgmma_commit();
  }
  float(&d)[32] = reinterpret_cast<float(&)[32]>(s);
  if (step.has_a2) {
    zero_scores(s);
    qk_blocks<0, kVBlocks>(d, sm.q, q8, sm.buf[0], sm.bar(0), step.next_parity);
  }
  wgmma_wait<kVBlocks>();  // P_b V_b is done (has_b2 implies S's 4 groups after it): buf1's blocks 0-3 are free
  if (issuer && step.has_b2) tma.issue_cols<0, kVBlocks>(step.ids_b2, sm.buf[1], sm.bar(1));
  if (step.has_a2) {
    qk_blocks<kVBlocks, kColBlocks>(d, sm.q, q8, sm.buf[0], sm.bar(0), step.next_parity);
  }
  wgmma_wait<0>();
  wgmma_pin(o);
  wgmma_pin(d);
}

// Warpgroup 1's step on tile b (its S in s, if the tile exists) and tile a.
template <bool kSteady>
__device__ __forceinline__ void wg1_step(float (&s)[8][4], RowState& st, const SeesawSmem& sm,
                                         const TmaTileLoader& tma, const SeesawSplit& sp, const u32 (&q8)[4][4], int a,
                                         int rt, int lane) {
  const int tid_wg = rt * 32 + lane, r0 = rt * 16 + (lane >> 2);
  const bool issuer = tid_wg == 0;
  const SeesawStep<kSteady> step(tma, sp, a, issuer);
  float(&o)[kWgDims / 2] = reinterpret_cast<float(&)[kWgDims / 2]>(st.acc);

  // softmax(S_b) against max0: max1, scale1; O1 and the sums onto max1.
  const int start_b = sp.split_begin + (a + 1) * kTile;
  float carry[2];
  softmax_max1<kSteady, kLazyLog2>(s, st, sm.max, sm.scale0, sm.scale1, sp, start_b, step.has_b, r0, lane, carry);
  rescale_rows(st.acc, carry);

  // P_b -> shared memory for warpgroup 0; O1 += P_b V_b[:, 256:].
  if (step.has_b) {
    u32 pa[4][4];
    const float one[2] = {1.f, 1.f};
    pack_p(pa, s, one);
    store_p(sm.base + kQOff + kRopeBlock * kR * 128, pa, rt, lane);
    const int valid_b = sp.split_end - start_b;
    if (!kSteady && valid_b < kTile) zero_cols_tail<kVBlocks, 2 * kVBlocks>(sm.buf_ptr(1), valid_b, tid_wg);
    fence_proxy_async();  // P_b for warpgroup 0's wgmma, zeroed keys for ours
    if (!kSteady && valid_b < kTile) named_barrier_sync(kWarpgroupLocal + 1, 128);
    wgmma_pin(o);
    wgmma_fence();
    pv_registers(o, pa, sm.buf[1], 1);
    wgmma_commit();
  }

  // O1 += P_a V_a[:, 256:].
  named_barrier_sync(kP0Ready, kThreads);
  const int valid_a = sp.split_end - (start_b - kTile);
  if (!kSteady && valid_a < kTile) {
    zero_cols_tail<kVBlocks, 2 * kVBlocks>(sm.buf_ptr(0), valid_a, tid_wg);
    fence_proxy_async();
    named_barrier_sync(kWarpgroupLocal + 1, 128);
  }
  wgmma_pin(o);
  wgmma_fence();
  pv_shared(o, sm.p0, sm.buf[0], 1);
  wgmma_commit();
  named_barrier_arrive(kP1Ready, kThreads);

  wgmma_wait<1>();  // P_b V_b is done: buf1's blocks 4-8 are free
  if (issuer && step.has_b2) tma.issue_cols<kVBlocks, kColBlocks>(step.ids_b2, sm.buf[1], sm.bar(1));
  wgmma_wait<0>();  // P_a V_a is done: buf0's blocks 4-8 are free
  if (issuer && step.has_a2) tma.issue_cols<kVBlocks, kColBlocks>(step.ids_a2, sm.buf[0], sm.bar(0));
  wgmma_pin(o);

  float(&d)[32] = reinterpret_cast<float(&)[32]>(s);
  if (step.has_b2) {  // S_b+2: the blocks refilled first, first
    zero_scores(s);
    qk_blocks<kVBlocks, kColBlocks>(d, sm.q, q8, sm.buf[1], sm.bar(1), step.next_parity);
    qk_blocks<0, kVBlocks>(d, sm.q, q8, sm.buf[1], sm.bar(1), step.next_parity);
    wgmma_wait<0>();
    wgmma_pin(d);
  }
}

// How many leading tiles the steady step covers: it needs both of its tiles whole and
// unmasked and the next two to exist, so its loop carries no mask, no zeroed tail and
// no branch on the tile count. The loop then fits the instruction cache: with those
// inline each warpgroup's loop spanned ~25 KB of SASS and the warps stalled on
// instruction fetch in 21 % of the samples (FlashMLA's loops: ~16 KB, 3 %; m15).
__device__ __forceinline__ int steady_tiles(const SeesawSplit& sp) {
  const int visible_end = kQLen > 1 && sp.draft_begin < sp.split_end ? sp.draft_begin : sp.split_end;
  const int unmasked = visible_end > sp.split_begin ? (visible_end - sp.split_begin) / kTile : 0;
  const int by_count = (sp.num_tiles - 2) / 2, by_mask = unmasked / 2;
  const int steps = by_count < by_mask ? by_count : by_mask;
  return steps > 0 ? 2 * steps : 0;
}

// The split's tiles, both warpgroups (tiles 0 and 1 already issued into the buffers).
// Leaves in st each row's final max and this warpgroup's sums and half of O.
__device__ __forceinline__ void seesaw_split(RowState& st, const SeesawSmem& sm, const TmaTileLoader& tma,
                                             const SeesawSplit& sp, int wg, int rt, int lane) {
  u32 q8[4][4];
  load_q_rope(q8, sm.base + kQOff, rt, lane);
  float s[8][4];
  float(&d)[32] = reinterpret_cast<float(&)[32]>(s);
  const int steady = steady_tiles(sp);
  int a = 0;
  if (wg == 0) {
    zero_scores(s);
    qk_blocks<0, kColBlocks>(d, sm.q, q8, sm.buf[0], sm.bar(0), 0);
    wgmma_wait<0>();
    wgmma_pin(d);
#pragma unroll 1
    for (; a < steady; a += 2) wg0_step<true>(s, st, sm, tma, sp, q8, a, rt, lane);
#pragma unroll 1
    for (; a < sp.num_tiles; a += 2) wg0_step<false>(s, st, sm, tma, sp, q8, a, rt, lane);
  } else {
    if (sp.num_tiles > 1) {
      zero_scores(s);
      qk_blocks<kVBlocks, kColBlocks>(d, sm.q, q8, sm.buf[1], sm.bar(1), 0);
      qk_blocks<0, kVBlocks>(d, sm.q, q8, sm.buf[1], sm.bar(1), 0);
      wgmma_wait<0>();
      wgmma_pin(d);
    }
#pragma unroll 1
    for (; a < steady; a += 2) wg1_step<true>(s, st, sm, tma, sp, q8, a, rt, lane);
#pragma unroll 1
    for (; a < sp.num_tiles; a += 2) wg1_step<false>(s, st, sm, tma, sp, q8, a, rt, lane);
  }
}

// After seesaw_split and a barrier (every wgmma and copy done: the buffers are free): each
// row's final max, and both warpgroups' sums, into st.
__device__ __forceinline__ void seesaw_rows(RowState& st, const SeesawSmem& sm, int wg, int rt, int lane) {
  st.row_max[0] = sm.max[rt * 16 + (lane >> 2)];
  st.row_max[1] = sm.max[rt * 16 + (lane >> 2) + 8];
  add_other_sums(st, reinterpret_cast<float*>(sm.buf_ptr(0)), wg, rt * 32 + lane);
}

}  // namespace mla_hopper
}  // namespace xqajit
