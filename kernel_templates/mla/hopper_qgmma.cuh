#pragma once
// Hopper MLA backend, a plain fp8 cache, CTAs of 32 rows or more (m35: two row blocks or more,
// the compute-bound MLA; m37: one): the seesaw of mla/hopper_seesaw.cuh on the fp8 tensor
// cores. Both products are e4m3 wgmmas, at twice the bf16 rate, and nothing of the cache is
// dequantised:
//   S = Q K^T       m64n64k32, A = Q and B = the raw tile, both K-major as they lie
//                   (the tile by TMA: five 128-byte column blocks a row, 128-byte
//                   swizzle, the last block's second half zeros).
//   O^T += V^T P^T  m64n64k32, A = V^T in registers, B = P^T in shared memory.
// 8-bit wgmmas take no transpose, so V (which the bf16 path reads MN-major as a B
// operand) becomes the A operand of the transposed product: each thread builds its
// V^T fragments from the raw rows (load_vt, m48: ldmatrix.trans over key rows and one byte
// permute a register, the keys of a k32 step in a permuted order), and P, the B operand, is
// stored K-major as P[row][key] e4m3 in that key order, scaled by 2^8 (P <= 1: the scale
// keeps values down to 2^-14 normal; the epilogue takes the 2^-8 back). Each warpgroup owns
// 256 output dims as four m64 blocks of O^T (dims x rows, 128 fp32 a thread, like O). A row
// of O^T's m64 block mb is a dim of this warpgroup: row 16 w + g + 8 h (warp w, lane / 4 = g)
// is dim 64 mb + 16 w + 2 g + h (vt_dim), so that a warp's rows of a block are one 16-byte
// chunk of a key row.
//
// A bf16 Q (kQgSplit, m39) is staged as two e4m3 planes, hi + lo, each row at its own power
// of 2 (stage_q_split), and S sums both planes' products over the same K blocks; P is split
// the same way (hi and lo halves of each P row), and O^T sums V^T times both. Twice the fp8
// steps (the bf16 rate) at ~bf16's precision, still nothing of the cache converted. Q's second
// plane leaves room for three tile buffers, not four.
//
// The step (tile t in buffer t % kQgBuffers: a = 2j, b = a + 1; with four buffers the tiles
// that refill them, a + 4 and a + 5, have a whole step more to land than with two: m35b) is the
// bf16 seesaw's, but every P reaches the products through shared memory, so warpgroup 0
// stores P_a twice: on max0 for its own product, and on max1 for warpgroup 1's. (n = kQgBuffers)
//   warpgroup 0                               warpgroup 1
//   softmax(S_a): max0, scale0 ->             (waits scale0)
//   P_a -> P_a0; O0 *= scale0                 softmax(S_b): max1, scale1 ->
//   O0 += V_a^T P_a0 (dims 0-255)             P_b ->; O1 *= scale0 scale1
//   (waits scale1) a + n -> a's blocks 0-1    (waits P_a1) O1 += V_a^T P_a1 (dims 256-511)
//   P_a scale1 -> P_a1 ->; O0 *= scale1       a + n -> a's blocks 2-4
//   (waits P_b) O0 += V_b^T P_b               O1 += V_b^T P_b; b + n -> b's blocks 2-4
//   b + n -> b's blocks 0-1; S_a+2            S_b+2
// V^T is read by ld.shared into registers, so a buffer's V blocks are free once every
// thread of the warpgroup has its fragments (a barrier), not when the product is done.
// Warpgroup 1 takes V_a before V_b (m40) so that a's buffer refills sooner.

#include "common/fp8.cuh"
#include "common/mma.cuh"
#include "common/named_barrier.cuh"
#include "common/online_softmax.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_config.cuh"
#include "mla/hopper_loads.cuh"
#include "mla/hopper_math.cuh"
#include "mla/hopper_seesaw.cuh"

namespace xqajit {
namespace mla_hopper {

constexpr int kVtBlocks = kWgDims / 128;    // 128-byte column blocks of V one warpgroup reads (2)
constexpr int kRope8Block = kQ8Blocks - 1;  // the rope dims: 64 bytes of block 4
constexpr float kPScale = 256.f;            // P is stored as e4m3(P x 2^8)

// The QGMMA map's raw tile buffers (the seesaw's here, the narrow schedule's in
// mla/hopper_narrow_qg.cuh): buffer i and its kQ8Blocks column-block barriers.
struct QgBuffers {
  unsigned char* base;  // the 1024-aligned shared-memory base
  u32 buf0;             // the first of kQgBuffers raw tiles
  u32 bars;             // mbarriers [buffer][column block]
  __device__ u32 buf(int buffer) const { return buf0 + buffer * kK8Bytes; }
  __device__ u32 bar(int buffer) const { return bars + buffer * kQ8Blocks * 8; }
  __device__ unsigned char* ptr(u32 addr) const { return base + (addr - smem_addr(base)); }
  // Tiles 0.. into buffers 0.., one each (the issuing thread, before the split; the narrow
  // schedule's).
  __device__ __forceinline__ void issue_first(const TmaTileLoader& tma, int num_tiles) const {
    int ids[TmaTileLoader::kPagesPerTile];
    for (int t = 0; t < kQgBuffers && t < num_tiles; ++t) {
      tma.pages(t, ids);
      tma.issue_cols<0, kQ8Blocks>(ids, buf(t), bar(t));
    }
  }
};

struct QgmmaSmem : QgBuffers {
  u32 q;             // Q's planes
  u32 pa0, pa1, pb;  // P_a on max0 (warpgroup 0's), P_a on max1 (warpgroup 1's), P_b
  float* max;        // running row max (log2 units), [64]
  float* scale0;     // 2^(old max - max0), [64]
  float* scale1;     // 2^(max0 - max1), [64]
  float* q_inv;      // a split Q: 2^-e of each row's planes, [64]
};

// S += Q K^T over column block cb of the raw tile at k_addr (kSteps k32 steps; a split Q's two
// planes each) as one commit group, issued once the block's barrier flips.
template <int kSteps>
__device__ __forceinline__ void qk8_block(float (&d)[32], u32 q_addr, u32 k_addr, u32 bars, u32 parity, int cb) {
  mbarrier_wait_parity(bars + 8 * cb, parity);
  const u64 db = wgmma_desc_sw128(k_addr + cb * kTile * 128, 16, 1024);
  const u64 dq = wgmma_desc_sw128(q_addr + cb * kR * 128, 16, 1024);
  wgmma_fence();
#pragma unroll
  for (int plane = 0; plane < kQgPlanes; ++plane) {
    const u64 da = dq + plane * kQ8PlaneBytes / 16;
#pragma unroll
    for (int sub = 0; sub < kSteps; ++sub) wgmma_m64n64k32_e4m3_ss(d, da + 2 * sub, db + 2 * sub, 1);
  }
  wgmma_commit();
}

// S += Q K^T over column blocks kFirst..kLast-1 (4 k32 steps a block, 2 in the rope block).
template <int kFirst, int kLast>
__device__ __forceinline__ void qk8_blocks(float (&d)[32], u32 q_addr, u32 k_addr, u32 bars, u32 parity) {
  constexpr int kFullLast = kLast < kRope8Block ? kLast : kRope8Block;
#pragma unroll 1
  for (int cb = kFirst; cb < kFullLast; ++cb) qk8_block<4>(d, q_addr, k_addr, bars, parity, cb);
  if constexpr (kLast == kQ8Blocks) qk8_block<(kQk - kV) / 32>(d, q_addr, k_addr, bars, parity, kRope8Block);
}

// A split Q's planes hold each row times 2^e (e per row, mla/hopper_loads.cuh stage_q_split):
// S back to Q's own scale, rows r0 and r0 + 8.
__device__ __forceinline__ void unscale_q_rows(float (&s)[8][4], const QgmmaSmem& sm, int r0) {
  if constexpr (kQgSplit) {
    const float f[2] = {sm.q_inv[r0], sm.q_inv[r0 + 8]};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] *= f[e >> 1];
  }
}

// V^T's A fragments, [m64 block d][k32 step ks][register], for kBlocks blocks of 64 dims from
// dim0 (m48): block d's warp rt rows are dims dim0 + 64 d + 16 rt + 0..15, one 16-byte chunk
// of a key row. One ldmatrix.x4.trans a (d, ks) reads keys 32 ks + 0..31 (lane L gives the
// row of key 32 ks + L; matrix m = keys 8m..8m+7 sit in eight distinct swizzled chunks: no
// bank conflict) as 16-bit pairs of dims, so thread (g, q) = (lane / 4, lane % 4) holds dims
// 2g, 2g + 1 of keys 8m + 2q, 8m + 2q + 1; one PRMT a register then gives M row g (dim 2g)
// and row g + 8 (dim 2g + 1) their four keys (vt_dim). The k32 step's position 4q + 2h + e
// (+ 16 for matrices 2, 3) so holds key 8h + 2q + e: P is stored in that order (vt_key_pos).
template <int kBlocks>
__device__ __forceinline__ void load_vt(u32 (&v)[kBlocks][2][4], u32 tile, int dim0, int rt, int lane) {
  const u32 row = tile + lane * 128;
#pragma unroll
  for (int d = 0; d < kBlocks; ++d) {
    const int dim = dim0 + 64 * d, chunk = ((dim & 127) >> 4) + rt;
    const u32 at = row + (dim >> 7) * kTile * 128 + ((chunk ^ (lane & 7)) << 4);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      u32 r[4];
      ldmatrix_x4_trans(r, at + ks * 32 * 128);
      v[d][ks][0] = prmt(r[0], r[1], 0x6420u), v[d][ks][1] = prmt(r[0], r[1], 0x7531u);
      v[d][ks][2] = prmt(r[2], r[3], 0x6420u), v[d][ks][3] = prmt(r[2], r[3], 0x7531u);
    }
  }
}

// Where key t of a tile sits in P's k order (load_vt's): bits (h, q, e) -> (q, h, e).
__device__ __forceinline__ int vt_key_pos(int t) {
  return (t & ~15) | (((t >> 1) & 3) << 2) | (((t >> 3) & 1) << 1) | (t & 1);
}

// The dim (after dim0) of O^T block d's accumulator register i (load_vt's rows).
__device__ __forceinline__ int vt_dim(int d, int i, int rt, int lane) {
  return 64 * d + 16 * rt + 2 * (lane >> 2) + ((i >> 1) & 1);
}

// P (the accumulator layout of S: rows r0, r0 + 8, keys 8n + 2 (lane & 3) + {0, 1}) times
// f[h] -> e4m3 at P[row][key] (128-byte rows, 128-byte swizzle: K-major for the B operand).
// A split Q's P is split too: hi in bytes 0-63 of the row, lo in bytes 64-127 (two more k32
// steps of the same V^T fragments).
__device__ __forceinline__ void store_p8(unsigned char* p, const float (&s)[8][4], const float (&f)[2], int rt,
                                         int lane) {
  const int r0 = rt * 16 + (lane >> 2), c0 = 2 * (lane & 3);
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + 8 * h, key = vt_key_pos(8 * n + c0);  // keys 8n + c0, + 1 stay adjacent
      const int at = row * 128 + ((((key >> 4) ^ (row & 7)) << 4) | (key & 15));
      if constexpr (kQgSplit) {
        u16 hi, lo;
        f32x2_to_e4m3x2_split(s[n][2 * h] * f[h], s[n][2 * h + 1] * f[h], hi, lo);
        *reinterpret_cast<u16*>(p + at) = hi;
        *reinterpret_cast<u16*>(p + (at ^ 64)) = lo;  // chunk 4 + key / 16, swizzled: chunk ^ 4
      } else {
        *reinterpret_cast<u16*>(p + at) = f32x2_to_e4m3x2(s[n][2 * h] * f[h], s[n][2 * h + 1] * f[h]);
      }
    }
}

// O^T += V^T P^T over the tile's 64 keys (two k32 steps, of P's hi and lo where P is split;
// the four blocks interleaved, so no accumulator waits on the one issued just before it).
__device__ __forceinline__ void pv8(float (&ot)[4][32], const u32 (&v)[4][2][4], u32 p) {
#pragma unroll
  for (int plane = 0; plane < kQgPlanes; ++plane)
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int mb = 0; mb < 4; ++mb)
        wgmma_m64n64k32_e4m3_rs(ot[mb], v[mb][ks], wgmma_desc_sw128(p + plane * 64 + ks * 32, 16, 1024));
}

// O^T as it lies in RowState::acc (the same 128 registers as O), and flat for wgmma_pin.
__device__ __forceinline__ float (&ot_of(RowState& st))[4][32] { return reinterpret_cast<float(&)[4][32]>(st.acc); }
__device__ __forceinline__ float (&flat_of(RowState& st))[128] { return reinterpret_cast<float(&)[128]>(st.acc); }

// O^T += V^T P^T of one tile, this warpgroup's dims: the fragments loaded, the products issued
// and committed (the caller waits).
__device__ __forceinline__ void pv8_tile(RowState& st, u32 tile, u32 p, int wg, int rt, int lane) {
  u32 v[4][2][4];
  load_vt(v, tile, wg * kWgDims, rt, lane);
  wgmma_pin(flat_of(st));
  wgmma_fence();
  pv8(ot_of(st), v, p);
  wgmma_commit();
}

// O^T's columns are query rows: this thread holds rows 8n + 2 (lane & 3) + {0, 1} of each
// block. Each times f0[row] (times f1[row] where given).
__device__ __forceinline__ void rescale_ot(float (&ot)[4][32], const float* f0, const float* f1, int lane) {
  const int c0 = 2 * (lane & 3);
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    float2 f = *reinterpret_cast<const float2*>(f0 + 8 * n + c0);
    if (f1 != nullptr) {
      const float2 g = *reinterpret_cast<const float2*>(f1 + 8 * n + c0);
      f.x *= g.x, f.y *= g.y;
    }
#pragma unroll
    for (int mb = 0; mb < 4; ++mb) {
      ot[mb][4 * n] *= f.x, ot[mb][4 * n + 2] *= f.x;
      ot[mb][4 * n + 1] *= f.y, ot[mb][4 * n + 3] *= f.y;
    }
  }
}

// What a step knows of its tiles (tile t lies in buffer t % kQgBuffers: a = 2j in ba, b = a + 1
// in bb), of the next two (S in buffers na, nb, each with its barriers' parity: the buffer's
// use count) and of the two it refills a's and b's buffers with, a + kQgBuffers and the next
// (the issuing thread reads their page ids at the step's start). kSteady: a, b and the next two
// exist and need no mask.
template <bool kSteady>
struct QgStep {
  bool has_b, has_a2, has_b2, has_refill_a, has_refill_b;
  int ba, bb, na, nb;
  u32 parity_a2, parity_b2;
  int ids_refill_a[TmaTileLoader::kPagesPerTile], ids_refill_b[TmaTileLoader::kPagesPerTile];
  __device__ QgStep(const TmaTileLoader& tma, const SeesawSplit& sp, int a, bool issuer)
      : has_b(kSteady || a + 1 < sp.num_tiles),
        has_a2(kSteady || a + 2 < sp.num_tiles),
        has_b2(kSteady || a + 3 < sp.num_tiles),
        has_refill_a(a + kQgBuffers < sp.num_tiles),
        has_refill_b(a + 1 + kQgBuffers < sp.num_tiles),
        ba(a % kQgBuffers),
        bb((a + 1) % kQgBuffers),
        na((a + 2) % kQgBuffers),
        nb((a + 3) % kQgBuffers),
        parity_a2(((a + 2) / kQgBuffers) & 1),
        parity_b2(((a + 3) / kQgBuffers) & 1) {
    if (issuer) tma.pages(a + kQgBuffers, ids_refill_a), tma.pages(a + 1 + kQgBuffers, ids_refill_b);
  }
};

// Warpgroup 0's step on tile a (its S in s) and tile b (warpgroup 1's).
template <bool kSteady>
__device__ __forceinline__ void qg_wg0_step(float (&s)[8][4], RowState& st, const QgmmaSmem& sm,
                                            const TmaTileLoader& tma, const SeesawSplit& sp, int a, int rt, int lane) {
  const int tid_wg = rt * 32 + lane, r0 = rt * 16 + (lane >> 2);
  const bool issuer = tid_wg == 0;
  const QgStep<kSteady> step(tma, sp, a, issuer);
  const int ba = step.ba, bb = step.bb, na = step.na;
  float(&ot)[4][32] = ot_of(st);

  // softmax(S_a) against the running max: max0, scale0.
  const int start_a = sp.split_begin + a * kTile;
  float scale0[2];
  unscale_q_rows(s, sm, r0);
  softmax_max0<kSteady>(s, st, sm.max, sm.scale0, sp, start_a, r0, lane, scale0);

  // P_a on max0 -> P_a0; O0 onto max0; O0 += V_a^T P_a0.
  const float own[2] = {kPScale, kPScale};
  store_p8(sm.ptr(sm.pa0), s, own, rt, lane);
  const int valid_a = sp.split_end - start_a;
  if (!kSteady && valid_a < kTile) zero_cols_tail<0, kVtBlocks>(sm.ptr(sm.buf(ba)), valid_a, tid_wg);
  fence_proxy_async();
  named_barrier_sync(kWarpgroupLocal, 128);  // P_a0, every row's scale0, the zeroed keys
  rescale_ot(ot, sm.scale0, nullptr, lane);
  pv8_tile(st, sm.buf(ba), sm.pa0, 0, rt, lane);

  // Warpgroup 1's max1 -> P_a for its product; O0 onto max1. Every thread of ours has its
  // V_a (the barrier): buf0's blocks 0-1 are free.
  named_barrier_sync(kScale1Ready, kThreads);
  if (issuer && step.has_refill_a) tma.issue_cols<0, kVtBlocks>(step.ids_refill_a, sm.buf(ba), sm.bar(ba));
  const float scale1[2] = {sm.scale1[r0], sm.scale1[r0 + 8]};
  const float theirs[2] = {scale1[0] * kPScale, scale1[1] * kPScale};
  store_p8(sm.ptr(sm.pa1), s, theirs, rt, lane);
  fence_proxy_async();
  named_barrier_arrive(kP0Ready, kThreads);
#pragma unroll
  for (int h = 0; h < 2; ++h) st.row_sum[h] *= scale1[h];
  wgmma_wait<0>();
  wgmma_pin(flat_of(st));
  rescale_ot(ot, sm.scale1, nullptr, lane);

  // O0 += V_b^T P_b, under the next S.
  named_barrier_sync(kP1Ready, kThreads);
  if (step.has_b) {
    const int valid_b = valid_a - kTile;
    if (!kSteady && valid_b < kTile) {
      zero_cols_tail<0, kVtBlocks>(sm.ptr(sm.buf(bb)), valid_b, tid_wg);
      named_barrier_sync(kWarpgroupLocal, 128);
    }
    pv8_tile(st, sm.buf(bb), sm.pb, 0, rt, lane);
  }
  float(&d)[32] = reinterpret_cast<float(&)[32]>(s);
  if (step.has_a2) {
    zero_scores(s);
    qk8_blocks<0, kVtBlocks>(d, sm.q, sm.buf(na), sm.bar(na), step.parity_a2);
  }
  named_barrier_sync(kWarpgroupLocal, 128);  // every thread has its V_b: b's blocks 0-1 are free
  if (issuer && step.has_refill_b) tma.issue_cols<0, kVtBlocks>(step.ids_refill_b, sm.buf(bb), sm.bar(bb));
  if (step.has_a2) qk8_blocks<kVtBlocks, kQ8Blocks>(d, sm.q, sm.buf(na), sm.bar(na), step.parity_a2);
  wgmma_wait<0>();
  wgmma_pin(flat_of(st));
  wgmma_pin(d);
}

// Warpgroup 1's step on tile b (its S in s, if the tile exists) and tile a.
template <bool kSteady>
__device__ __forceinline__ void qg_wg1_step(float (&s)[8][4], RowState& st, const QgmmaSmem& sm,
                                            const TmaTileLoader& tma, const SeesawSplit& sp, int a, int rt, int lane) {
  const int tid_wg = rt * 32 + lane, r0 = rt * 16 + (lane >> 2);
  const bool issuer = tid_wg == 0;
  const QgStep<kSteady> step(tma, sp, a, issuer);
  const int ba = step.ba, bb = step.bb, nb = step.nb;
  float(&ot)[4][32] = ot_of(st);

  // softmax(S_b) against max0: max1, scale1 (O1 is rescaled below, from every row's factors).
  const int start_b = sp.split_begin + (a + 1) * kTile;
  float carry[2];
  unscale_q_rows(s, sm, r0);
  softmax_max1<kSteady>(s, st, sm.max, sm.scale0, sm.scale1, sp, start_b, step.has_b, r0, lane, carry);

  // P_b -> shared memory (both warpgroups' products); O1 onto max1 (it reads scale0 before
  // warpgroup 0 may pass P1Ready and overwrite it).
  const int valid_b = sp.split_end - start_b;
  if (step.has_b) {
    const float one[2] = {kPScale, kPScale};
    store_p8(sm.ptr(sm.pb), s, one, rt, lane);
    if (!kSteady && valid_b < kTile) zero_cols_tail<kVtBlocks, 2 * kVtBlocks>(sm.ptr(sm.buf(bb)), valid_b, tid_wg);
  }
  fence_proxy_async();
  named_barrier_sync(kWarpgroupLocal + 1, 128);  // P_b, every row's scale1, the zeroed keys
  rescale_ot(ot, sm.scale0, sm.scale1, lane);
  named_barrier_arrive(kP1Ready, kThreads);

  // O1 += V_a^T P_a1 first (m40): a's blocks 2-4 refill sooner, then O1 += V_b^T P_b.
  named_barrier_sync(kP0Ready, kThreads);
  const int valid_a = valid_b + kTile;
  if (!kSteady && valid_a < kTile) {
    zero_cols_tail<kVtBlocks, 2 * kVtBlocks>(sm.ptr(sm.buf(ba)), valid_a, tid_wg);
    named_barrier_sync(kWarpgroupLocal + 1, 128);
  }
  pv8_tile(st, sm.buf(ba), sm.pa1, 1, rt, lane);
  named_barrier_sync(kWarpgroupLocal + 1, 128);  // every thread has V_a: a's blocks 2-4 are free
  if (issuer && step.has_refill_a) tma.issue_cols<kVtBlocks, kQ8Blocks>(step.ids_refill_a, sm.buf(ba), sm.bar(ba));
  if (step.has_b) pv8_tile(st, sm.buf(bb), sm.pb, 1, rt, lane);
  named_barrier_sync(kWarpgroupLocal + 1, 128);  // every thread has V_b: b's blocks 2-4 are free
  if (issuer && step.has_refill_b) tma.issue_cols<kVtBlocks, kQ8Blocks>(step.ids_refill_b, sm.buf(bb), sm.bar(bb));

  // S_b+2 after the products (with them in flight and S conditional, ptxas serialized
  // every wgmma chain: C7515).
  wgmma_wait<0>();
  wgmma_pin(flat_of(st));
  float(&d)[32] = reinterpret_cast<float(&)[32]>(s);
  if (step.has_b2) {  // S_b+2: the blocks refilled first, first
    zero_scores(s);
    if constexpr (kQgBuffers == 4) {  // b + 2 came a step ago, blocks 2-4 (by us) before 0-1
      qk8_blocks<kVtBlocks, kQ8Blocks>(d, sm.q, sm.buf(nb), sm.bar(nb), step.parity_b2);
      qk8_blocks<0, kVtBlocks>(d, sm.q, sm.buf(nb), sm.bar(nb), step.parity_b2);
    } else {  // three buffers: b + 2 refilled a's buffer in this step, blocks 0-1 first
      qk8_blocks<0, kVtBlocks>(d, sm.q, sm.buf(nb), sm.bar(nb), step.parity_b2);
      qk8_blocks<kVtBlocks, kQ8Blocks>(d, sm.q, sm.buf(nb), sm.bar(nb), step.parity_b2);
    }
    wgmma_wait<0>();
    wgmma_pin(d);
  }
}

// The split's tiles (0 and 1 already issued, at least one tile), both warpgroups. Leaves
// O^T in st.acc and this warpgroup's row sums in st.row_sum; the row max in sm.max.
__device__ __forceinline__ void qgmma_split(RowState& st, const QgmmaSmem& sm, const TmaTileLoader& tma,
                                            const SeesawSplit& sp, int wg, int rt, int lane) {
  float s[8][4];
  float(&d)[32] = reinterpret_cast<float(&)[32]>(s);
  const int steady = steady_tiles(sp);
  int a = 0;
  if (wg == 0) {
    zero_scores(s);
    qk8_blocks<0, kQ8Blocks>(d, sm.q, sm.buf(0), sm.bar(0), 0);
    wgmma_wait<0>();
    wgmma_pin(d);
#pragma unroll 1
    for (; a < steady; a += 2) qg_wg0_step<true>(s, st, sm, tma, sp, a, rt, lane);
#pragma unroll 1
    for (; a < sp.num_tiles; a += 2) qg_wg0_step<false>(s, st, sm, tma, sp, a, rt, lane);
  } else {
    if (sp.num_tiles > 1) {
      zero_scores(s);
      qk8_blocks<kVtBlocks, kQ8Blocks>(d, sm.q, sm.buf(1), sm.bar(1), 0);
      qk8_blocks<0, kVtBlocks>(d, sm.q, sm.buf(1), sm.bar(1), 0);
      wgmma_wait<0>();
      wgmma_pin(d);
    }
#pragma unroll 1
    for (; a < steady; a += 2) qg_wg1_step<true>(s, st, sm, tma, sp, a, rt, lane);
#pragma unroll 1
    for (; a < sp.num_tiles; a += 2) qg_wg1_step<false>(s, st, sm, tma, sp, a, rt, lane);
  }
}

// O^T (st.acc, this warpgroup's 256 dims) -> O in the accumulator layout the shared epilogue
// takes (rows 16 rt + lane / 4 (+8), dims 8 i + 2 (lane & 3) (+1)), through shared memory
// (64 x 256 floats a warpgroup at `scratch`, padded rows), times 2^-8 (P's scale).
__device__ __forceinline__ void untranspose_o(RowState& st, float* scratch, int wg, int rt, int lane) {
  constexpr int kStride = kWgDims + 4;
  float* const t = scratch + wg * kR * kStride;
  float(&ot)[4][32] = ot_of(st);
  const int g = lane >> 2, c0 = 2 * (lane & 3);
#pragma unroll
  for (int mb = 0; mb < 4; ++mb)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        t[(8 * n + c0 + (e & 1)) * kStride + vt_dim(mb, e, rt, lane)] = ot[mb][4 * n + e] * (1.f / kPScale);
  named_barrier_sync(kWarpgroupLocal + wg, 128);
#pragma unroll
  for (int i = 0; i < kAccTiles; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) st.acc[i][e] = t[(rt * 16 + g + 8 * (e >> 1)) * kStride + 8 * i + c0 + (e & 1)];
}

// The whole CTA on the QGMMA path, up to the shared epilogue: tiles 0 and 1 by TMA, Q as it
// is, the split, then st as finish_rows takes it. `bars`: 2 x kQ8Blocks mbarriers, initialised.
__device__ __forceinline__ void qgmma_cta(RowState& st, const XqajitMlaArgs& args, const TmaTileLoader& tma,
                                          unsigned char* smem, u32 bars, const SeesawSplit& sp, int b, int rb, int tid) {
  const int lane = tid & 31, wg = warp_uniform(tid >> 7), rt = warp_uniform((tid >> 5) & 3);
  QgmmaSmem sm;
  sm.base = smem;
  sm.q = smem_addr(smem + kQOff);
  sm.buf0 = smem_addr(smem + kQgRawOff);
  sm.pa0 = smem_addr(smem + kQgP8Off), sm.pa1 = sm.pa0 + kP8Bytes, sm.pb = sm.pa1 + kP8Bytes;
  sm.max = reinterpret_cast<float*>(smem + kQgStatsOff);
  sm.scale0 = sm.max + kR;
  sm.scale1 = sm.scale0 + kR;
  sm.q_inv = sm.scale1 + kR;
  sm.bars = bars;
  if (tid == 0) {  // (QgBuffers::issue_first's loop, written out: as a call it moved this spec's SASS)
    int ids[TmaTileLoader::kPagesPerTile];
    for (int t = 0; t < kQgBuffers && t < sp.num_tiles; ++t) {
      tma.pages(t, ids);
      tma.issue_cols<0, kQ8Blocks>(ids, sm.buf(t), sm.bar(t));
    }
  }
  if constexpr (kQgSplit) stage_q_split(args, smem + kQOff, sm.q_inv, b, rb, tid);
  else stage_q8(args, smem + kQOff, b, rb, tid);
  if (tid < kR) sm.max[tid] = -__int_as_float(0x7f800000);
  fence_proxy_async();  // Q's st.shared -> visible to wgmma
  __syncthreads();
  if (sp.num_tiles == 0) return;  // st as init_rows left it: an empty row
  qgmma_split(st, sm, tma, sp, wg, rt, lane);
  __syncthreads();  // every wgmma and copy is done: the buffers are free
  st.row_max[0] = sm.max[rt * 16 + (lane >> 2)];
  st.row_max[1] = sm.max[rt * 16 + (lane >> 2) + 8];
  add_other_sums(st, reinterpret_cast<float*>(smem + kQgP8Off), wg, tid & 127);
  __syncthreads();  // the sums are read: the scratch below may cover them
  untranspose_o(st, reinterpret_cast<float*>(smem + kQOff), wg, rt, lane);
  __syncthreads();  // the epilogue may reuse shared memory
}

}  // namespace mla_hopper
}  // namespace xqajit
