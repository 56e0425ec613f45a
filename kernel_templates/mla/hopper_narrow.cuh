#pragma once
// Hopper MLA backend, the narrow schedule (m26): a CTA whose real rows are 16 --
// H=16 at q_len 1, DeepSeek with its heads sharded over 8 GPUs -- computes the
// transposed products, as the hopper GQA kernel does, so that the tensor cores do
// the 16 rows' work instead of a padded 64-row tile's (a quarter of it; the padded
// per-tile math, ~2.6 us a tile, was the bound of these memory-bound shapes):
//   S^T = K Q^T     wgmma m64n16k16, A = the K tile (64 keys, K-major), B = Q's 16
//                   rows; warpgroup w takes k16 steps 18w..18w+17 of the 36 and the
//                   two partial sums cross through shared memory, so both hold S^T.
//   softmax         per query row, a column of S^T: the max over the 64 keys is the
//                   8 key rows of a warp (shuffles) then its 4 warps (shared memory).
//                   Both warpgroups compute the same max, P and sums.
//   O^T += V^T P^T  wgmma m64n16k16, A = the tile read MN-major (dims x keys), B = P^T
//                   (warpgroup 0 stores it by stmatrix.trans straight from the S^T
//                   accumulator, K-major); warpgroup w owns output dims 256w..256w+255.
// After the split, narrow_rows hands the rows to the per-tile schedule's RowState
// layout through shared memory, and its epilogue (finish_rows: splits, lse, sinks)
// runs unchanged. Loads, buffers and the shared-memory map are the per-tile
// schedule's; P^T lives in Q's zero padding rows 16..31 of its first column block.
// Where the A operands come from is the `Operands` policy: NarrowBf16Operands reads
// the bf16 tile by descriptors (m31's fp8ds operands built in registers were the other,
// until m51 moved 16-row fp8ds onto the fp8 tensor cores, mla/hopper_narrow_qg_ds.cuh).
//
// Accumulator map of an m64n16 tile, its query rows as columns and a thread's 4
// "slots": common/transposed_rows.cuh (GQA's, shared).

#include "common/named_barrier.cuh"
#include "common/transposed_rows.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_config.cuh"
#include "mla/hopper_math.cuh"

namespace xqajit {
namespace mla_hopper {

// 16 real rows a CTA (H=16 at q_len 1, or sparse: a CTA a query token): the wgmma N of both products.
constexpr bool kNarrow = kCtaRows == 16;
constexpr int kN = 16;
constexpr int kNRegs = kN / 2;           // registers of an m64n16 accumulator
constexpr int kNSlots = kN / 4;          // query rows a thread holds
constexpr int kNBlocks = kWgDims / 64;   // O^T blocks of 64 dims a warpgroup owns
constexpr int kQkSteps = kQk / 16;       // k16 steps of S^T, half a warpgroup
constexpr int kNarrowPOff = kQOff + kN * 128;  // P^T: Q's rows kN..2kN-1 of column block 0
constexpr int kNarrowBarrier = 7;        // + warpgroup: a warpgroup's 4 warps (the seesaw's ids end at 6)
static_assert(2 * kN <= kR && kNarrowPOff % 1024 == 0, "P^T fits Q's padding rows, on a swizzle atom");
static_assert(2 * 4 * kN <= 2 * kR, "the row maxima of both warpgroups' warps fit Exchange::max");
static_assert(2 * 128 * kNRegs * 4 <= kR * kTile * 2, "both warpgroups' partial S^T fit Exchange::p");

struct NarrowState {
  float row_max[kNSlots], row_sum[kNSlots];  // per slot; row_sum over this thread's key rows
  float o[kNBlocks][kNRegs];                 // O^T, dims Operands::out_dim
};

// Rows that have seen no key: max -inf, sums and O^T zero (NarrowState's, NarrowQgState's).
template <int kBlocks>
__device__ __forceinline__ void narrow_rows_init(float (&row_max)[kNSlots], float (&row_sum)[kNSlots],
                                                 float (&o)[kBlocks][kNRegs]) {
#pragma unroll
  for (int c = 0; c < kNSlots; ++c) row_max[c] = -__int_as_float(0x7f800000), row_sum[c] = 0.f;
#pragma unroll
  for (int d = 0; d < kBlocks; ++d)
#pragma unroll
    for (int i = 0; i < kNRegs; ++i) o[d][i] = 0.f;
}

__device__ __forceinline__ void narrow_init(NarrowState& ns) {
  narrow_rows_init(ns.row_max, ns.row_sum, ns.o);
}

// The tile's max of each of the thread's query rows (tmax, its key rows') over the warpgroup's
// 64 keys -- the 8 key rows of a warp by shuffles, its 4 warps through `wmax` ([warp][query
// row]) and a 128-thread barrier -- against the running row_max: `base` to subtract (never
// -inf) and `corr`, the factor of what was summed so far; row_max takes the new max.
__device__ __forceinline__ void narrow_row_max(float (&tmax)[kNSlots], float (&row_max)[kNSlots], float* wmax,
                                               float (&base)[kNSlots], float (&corr)[kNSlots], int wg, int rt,
                                               int lane) {
  const float kInf = __int_as_float(0x7f800000);
  reduce_over_key_rows(tmax, [](float a, float b) { return fmaxf(a, b); });
  if (lane < 4) {
#pragma unroll
    for (int c = 0; c < kNSlots; ++c) wmax[rt * kN + slot_col(c, lane)] = tmax[c];
  }
  named_barrier_sync(kNarrowBarrier + wg, 128);
#pragma unroll
  for (int c = 0; c < kNSlots; ++c) {
    float m = row_max[c];
#pragma unroll
    for (int w = 0; w < 4; ++w) m = fmaxf(m, wmax[w * kN + slot_col(c, lane)]);
    base[c] = m == -kInf ? 0.f : m;  // never -inf - -inf
    corr[c] = fast_exp2(row_max[c] - base[c]);
    row_max[c] = m;
  }
}

// The sums and O^T (kBlocks m64n16 blocks) onto the new max: times corr, plus this tile's sums.
template <int kBlocks>
__device__ __forceinline__ void narrow_rescale(float (&row_sum)[kNSlots], float (&o)[kBlocks][kNRegs],
                                               const float (&corr)[kNSlots], const float (&tsum)[kNSlots]) {
#pragma unroll
  for (int c = 0; c < kNSlots; ++c) row_sum[c] = row_sum[c] * corr[c] + tsum[c];
  if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f || corr[2] != 1.f || corr[3] != 1.f)) {
#pragma unroll
    for (int d = 0; d < kBlocks; ++d)
#pragma unroll
      for (int i = 0; i < kNRegs; ++i) o[d][i] *= corr[acc_slot(i)];
  }
}

// A bf16 tile's operands: both products' A from shared memory by descriptor.
struct NarrowBf16Operands {
  static constexpr bool kF16 = false;         // P^T's type: the tile's
  static constexpr bool kPrescaledQ = false;  // S^T is in raw units: the softmax scales it
  struct VFrags {};                           // V^T is read by descriptor
  u32 k_addr;                                 // the bf16 tile (K, and V as its first 512 dims)

  // This warpgroup's partial S^T: k16 steps 18 wg..18 wg + 17 of the 36.
  __device__ __forceinline__ void qk(float (&s)[kNRegs], VFrags&, u32 q_addr, int wg, int rt, int lane) const {
#pragma unroll
    for (int i = 0; i < kNRegs; ++i) s[i] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kQkSteps / 2; ++k) {
      const int kk = wg * (kQkSteps / 2) + k, blk = kk >> 2, sub = kk & 3;
      const u64 da = wgmma_desc_sw128(k_addr + blk * kTile * 128 + sub * 32, 16, 1024);
      const u64 db = wgmma_desc_sw128(q_addr + blk * kR * 128 + sub * 32, 16, 1024);
      WgmmaSS<kN, false, 0>::run(s, da, db, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(s);
  }

  // O^T += V^T P^T over this warpgroup's 4 blocks of 64 dims.
  __device__ __forceinline__ void pv(NarrowState& ns, const VFrags&, u32 p_addr, int wg, int rt, int lane) const {
#pragma unroll
    for (int d = 0; d < kNBlocks; ++d) wgmma_pin(ns.o[d]);
    wgmma_fence();
#pragma unroll
    for (int d = 0; d < kNBlocks; ++d) {
#pragma unroll
      for (int ks = 0; ks < kTile / 16; ++ks) {
        const u64 dv = wgmma_desc_sw128(k_addr + (wg * kNBlocks + d) * kTile * 128 + ks * 2048, kTile * 128, 1024);
        const u64 dp = wgmma_desc_sw128(p_addr + ks * 32, 16, 1024);
        WgmmaSS<kN, false, 1>::run(ns.o[d], dv, dp, 1);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int d = 0; d < kNBlocks; ++d) wgmma_pin(ns.o[d]);
  }

  static __device__ __forceinline__ float o_unit(const NarrowState&) { return 1.f; }
  // The output dim of O^T register i of block d: rows 16 rt + lane / 4 (+ 8) of the block.
  static __device__ __forceinline__ int out_dim(int d, int i, int wg, int rt, int lane) {
    return wg * kWgDims + 64 * d + 16 * rt + (lane >> 2) + 8 * ((i >> 1) & 1);
  }
};

// What a tile's mask needs: keys from tile_start (dense: visible below split_end, drafts
// by `bits`; sparse: the tile's key flags).
struct NarrowTile {
  int tile_start, split_end, draft_begin;
  unsigned bits;
  float logit_scale_log2;
  const unsigned char* key_ok;  // sparse: the tile's 64 flags
};

// One tile of the split, its operands from `ops`.
template <class Operands>
__device__ __forceinline__ void narrow_tile(NarrowState& ns, const Operands& ops, u32 q_addr, const Exchange& xchg,
                                            const NarrowTile& t, int wg, int rt, int lane) {
  const float kInf = __int_as_float(0x7f800000);
  const int tid_wg = rt * 32 + lane;

  // S^T over this warpgroup's half of the 576 dims; the halves cross through Exchange::p.
  float s[kNRegs];
  typename Operands::VFrags v;
  ops.qk(s, v, q_addr, wg, rt, lane);
  float4* const part = reinterpret_cast<float4*>(xchg.p);  // [warpgroup][thread][kNRegs floats]
  part[(wg * 128 + tid_wg) * 2] = make_float4(s[0], s[1], s[2], s[3]);
  part[(wg * 128 + tid_wg) * 2 + 1] = make_float4(s[4], s[5], s[6], s[7]);
  math_sync();
  {
    const float4 a = part[((1 - wg) * 128 + tid_wg) * 2], b = part[((1 - wg) * 128 + tid_wg) * 2 + 1];
    s[0] += a.x, s[1] += a.y, s[2] += a.z, s[3] += a.w, s[4] += b.x, s[5] += b.y, s[6] += b.z, s[7] += b.w;
  }

  // Log2 units, the mask (-inf by select), the tile's max per query row.
  const bool need_mask = tile_needs_mask(t.tile_start, t.split_end, t.draft_begin);
  float tmax[kNSlots];
#pragma unroll
  for (int c = 0; c < kNSlots; ++c) tmax[c] = -kInf;
#pragma unroll
  for (int i = 0; i < kNRegs; ++i) {
    float x = Operands::kPrescaledQ ? s[i] : s[i] * t.logit_scale_log2;
    if (need_mask) {
      const int key = 16 * rt + (lane >> 2) + 8 * ((i >> 1) & 1);
      bool visible;
      if constexpr (MLA_SPARSE) visible = t.key_ok[key] != 0;
      else visible = mla::key_visible(t.tile_start + key, t.split_end, t.draft_begin, t.bits);
      x = visible ? x : -kInf;
    }
    s[i] = x;
    tmax[acc_slot(i)] = fmaxf(tmax[acc_slot(i)], x);
  }
  float base[kNSlots], corr[kNSlots];
  narrow_row_max(tmax, ns.row_max, xchg.max + wg * 4 * kN, base, corr, wg, rt, lane);

  // P = exp2(S - base): warpgroup 0 stores P^T (stmatrix.trans: matrix m = 2 j + key half
  // holds registers 2m, 2m + 1; its 8 stored rows are query rows 8 j.., keys 16 rt + 8 (m & 1)..).
  float tsum[kNSlots] = {0.f, 0.f, 0.f, 0.f};
  u32 pair[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int c = acc_slot(2 * m);
    const float p0 = fast_exp2(s[2 * m] - base[c]), p1 = fast_exp2(s[2 * m + 1] - base[c + 1]);
    tsum[c] += p0;
    tsum[c + 1] += p1;
    pair[m] = pack_f32x2<Operands::kF16>(p0, p1);
  }
  if (wg == 0) {
    const int m = lane >> 3, row = lane & 7;
    const u32 p_lane = q_addr + (kNarrowPOff - kQOff) + 1024 * (m >> 1) + 128 * row +
                       ((((2 * rt + (m & 1)) ^ row)) << 4);
    stmatrix_trans<4>(p_lane, pair);
    fence_proxy_async();  // P^T -> visible to both warpgroups' wgmmas
  }
  narrow_rescale(ns.row_sum, ns.o, corr, tsum);
  math_sync();  // P^T is in shared memory

  ops.pv(ns, v, q_addr + (kNarrowPOff - kQOff), wg, rt, lane);
}

// The split's rows -> the per-tile schedule's RowState (rows 16 rt + quad_row (+ 8) of
// warp rt, dims 256 wg + 8 i + 2 quad_col (+ 1)), for finish_rows: O^T through `region`
// (kN x (kV + 4) floats of free shared memory), the maxima and the sums over the 64 key
// rows through Exchange::max. Rows past kN are padding: -inf, nothing summed.
template <class Operands>
__device__ __forceinline__ void narrow_rows(NarrowState& ns, RowState& st, float* region, const Exchange& xchg,
                                            int wg, int rt, int lane) {
  const float o_unit = Operands::o_unit(ns);
  constexpr int kStride = kV + 4;  // a row's 16 lanes of one store phase on distinct banks
  reduce_over_key_rows(ns.row_sum, [](float a, float b) { return a + b; });
  math_sync();  // every wgmma of the split is done with the buffers; xchg is free
  float* const sums = xchg.max;       // [warp][query row]
  float* const maxes = sums + 4 * kN;  // [query row]
  if (wg == 0 && lane < 4) {
#pragma unroll
    for (int c = 0; c < kNSlots; ++c) {
      sums[rt * kN + slot_col(c, lane)] = ns.row_sum[c];
      if (rt == 0) maxes[slot_col(c, lane)] = ns.row_max[c];
    }
  }
#pragma unroll
  for (int d = 0; d < kNBlocks; ++d)
#pragma unroll
    for (int i = 0; i < kNRegs; ++i) {
      region[slot_col(acc_slot(i), lane) * kStride + Operands::out_dim(d, i, wg, rt, lane)] = ns.o[d][i] * o_unit;
    }
  math_sync();
  const int quad_row = lane >> 2, quad_col = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = rt * 16 + quad_row + half * 8;
    const bool real = r < kN;
    st.row_max[half] = real ? maxes[r] : -__int_as_float(0x7f800000);
    st.row_sum[half] = real && quad_col == 0 ? sums[r] + sums[kN + r] + sums[2 * kN + r] + sums[3 * kN + r] : 0.f;
#pragma unroll
    for (int i = 0; i < kAccTiles; ++i) {
      const float2 v = real ? *reinterpret_cast<const float2*>(region + r * kStride + wg * kWgDims + 8 * i + 2 * quad_col)
                            : make_float2(0.f, 0.f);
      st.acc[i][2 * half] = v.x, st.acc[i][2 * half + 1] = v.y;
    }
  }
}

}  // namespace mla_hopper
}  // namespace xqajit
