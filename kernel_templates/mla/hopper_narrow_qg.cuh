#pragma once
// Hopper MLA backend, the narrow schedule on the fp8 tensor cores (m42, m43, m45): a CTA of 16
// real rows (H=16 at q_len 1) over a plain fp8 cache. The transposed products of
// mla/hopper_narrow.cuh, as e4m3 wgmmas over the raw tiles as TMA lands them (the QGMMA map,
// mla/hopper_qgmma.cuh), so nothing of the cache is converted:
//   S^T = K Q^T     m64nNk32 SS: A = the raw tile (64 keys, K-major as it lies), B = Q's 16
//                   rows (N = 16), or a split Q's hi and lo planes as rows 0-15 and 16-31 of
//                   one plane (N = 32, the two halves of a column added, times 2^-e_r).
//   O^T += V^T P^T  m64n16k32 RS: A = V^T built in registers (load_vt, as the QGMMA seesaw),
//                   B = P^T stored as e4m3 P[query row][key] x 2^8 (a split Q's P as hi and
//                   lo, bytes 0-63 and 64-127 of a row), eight m64 blocks: all 512 dims.
// Each warpgroup runs its own tiles (m43): warpgroup w takes tiles w, w + 2, .., with its own
// online softmax over them, so the two chains of a tile (S^T, softmax, P^T, O^T) overlap each
// other instead of meeting at two CTA barriers a tile; the two partial results merge once, at
// the end (narrow_qg_rows). The m31 path this replaced (for plain fp8 here; for fp8ds by m51,
// mla/hopper_narrow_qg_ds.cuh) converted every K and V byte to fp16 on Hopper's conversion
// unit, which runs at a fraction of the ALU rate.
// Tiles: four buffers, tile t in buffer t % 4 (parity (t / 4) & 1 on its five column-block
// barriers), so warpgroup w's are buffers w and w + 2; its first thread refills the buffer of
// its previous tile with tile t + 2 as tile t starts (the warpgroup is past that tile's P^T
// barrier, so done with its K and V). Sparse fp8ds rows have no tensor map: the warpgroup's
// threads gather them into the same boxes instead (kQgGather, mla/hopper_narrow_qg_ds.cuh).

#include "common/fp8.cuh"
#include "common/memory.cuh"
#include "common/named_barrier.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_loads.cuh"
#include "mla/hopper_narrow.cuh"
#include "mla/hopper_qgmma.cuh"

namespace xqajit {
namespace mla_hopper {

constexpr int kQgN = kQgSplit ? 2 * kN : kN;  // S^T's N: Q's rows, or both of a split Q's planes
constexpr int kQgLoOff = kN * 128;            // a split Q's lo plane: kN rows after its hi
constexpr int kQgOBlocks = kV / 64;           // O^T's m64 blocks: all 512 dims a warpgroup
constexpr int kPtBytes = kN * 128;            // one P^T plane: 16 rows of 128 bytes
// P^T planes a warpgroup: one, or an fp8ds cache's one a scale group (mla/hopper_narrow_qg_ds.cuh).
constexpr int kPtPlanes = MLA_FP8DS ? XQAJIT_MLA_V_DIM / XQAJIT_MLA_FP8DS_GROUP : 1;

struct NarrowQgState {
  float row_max[kNSlots], row_sum[kNSlots];  // per slot; row_sum over this thread's key rows
  float o[kQgOBlocks][kNRegs];               // O^T x 2^8, dims vt_dim
};

struct NarrowQgSmem : QgBuffers {
  u32 q, pt0;          // Q, warpgroup 0's P^T (then warpgroup 1's)
  float* max;          // [warpgroup][warp][query row]: a tile's max per warp
  const float* q_inv;  // a split Q's 2^-e of each row
};

// A bf16 Q's 16 rows for the narrow schedule (kQgSplit): stage_q_split's planes (row r times
// 2^e_r, hi in rows 0-15, lo in rows 16-31 of the one plane), by 16 threads a row so that all
// 256 convert (a row's 576 values as 9 runs of 4 a thread): a short split's fixed cost.
// Over an fp8ds cache only the 512 latent values are split; the rope stays bf16 in column
// block 4 (rows 0-15), for the rope's bf16 products (mla/hopper_narrow_qg_ds.cuh).
// `first_row`: the CTA's first row of the request (a sparse token's CTA: its token's).
__device__ __forceinline__ void stage_q_split_narrow(const XqajitMlaArgs& args, unsigned char* q_smem,
                                                     float* q_inv, int b, int first_row, int tid) {
  constexpr int kSplitValues = MLA_FP8DS ? kV : kQk;
  constexpr int kLanes = kThreads / kN;            // 16 threads a row
  constexpr int kRuns = kSplitValues / 4 / kLanes;  // runs of 4 values a thread
  static_assert(kRuns * 4 * kLanes == kSplitValues, "a row in whole runs");
  const int r = tid / kLanes, j = tid % kLanes;
  const uint2* const src = reinterpret_cast<const uint2*>(mla::q_row(args, b, first_row + r));
  uint2 w[kRuns];
  u32 amax_bits = 0;
#pragma unroll
  for (int k = 0; k < kRuns; ++k) {
    w[k] = src[j + kLanes * k];
    amax_bits = max(amax_bits, max(bf16x2_abs_max_bits(w[k].x), bf16x2_abs_max_bits(w[k].y)));
  }
#pragma unroll
  for (int x = 1; x < kLanes; x <<= 1) amax_bits = max(amax_bits, __shfl_xor_sync(0xffffffffu, amax_bits, x));
  const int e = q_split_exponent(amax_bits);
  const float scale = __int_as_float((127 + e) << 23);
  if (j == 0) q_inv[r] = __int_as_float((127 - e) << 23);
#pragma unroll
  for (int k = 0; k < kRuns; ++k) {
    const int v0 = 4 * (j + kLanes * k);  // values v0..v0 + 3: bytes of chunk v0 / 16
    u16 h[2], l[2];
    bf16x2_to_e4m3x2_split(w[k].x, scale, h[0], l[0]);
    bf16x2_to_e4m3x2_split(w[k].y, scale, h[1], l[1]);
    const u32 off = sw128_offset(r, v0 >> 4, kR) + (v0 & 15);
    *reinterpret_cast<u32*>(q_smem + off) = h[0] | ((u32)h[1] << 16);
    *reinterpret_cast<u32*>(q_smem + kQgLoOff + off) = l[0] | ((u32)l[1] << 16);
  }
  if constexpr (MLA_FP8DS) {
    if (j < 8)  // the rope's 64 bf16 values as they are: chunks 32..39
      *reinterpret_cast<uint4*>(q_smem + sw128_offset(r, kV / 16 + j, kR)) =
          reinterpret_cast<const uint4*>(mla::q_row(args, b, first_row + r) + 2 * kV)[j];
  } else if (j < 4) {  // the rope block's second half (chunks 36..39): zeros in both planes
    const u32 pad = sw128_offset(r, kQk / 16 + j, kR);
    *reinterpret_cast<U32x4*>(q_smem + pad) = U32x4{0, 0, 0, 0};
    *reinterpret_cast<U32x4*>(q_smem + kQgLoOff + pad) = U32x4{0, 0, 0, 0};
  }
}

// S^T += K Q^T over column block cb of the tile at k_addr (kSteps k32 steps), one commit group.
// One accumulator: the tensor pipe chains dependent wgmmas back to back, and rotating two or
// three accumulators over the steps ran 35 % slower (m45, session 30 run 5).
template <int kSteps>
__device__ __forceinline__ void narrow_qk_block(float (&acc)[kQgN / 2], u32 q_addr, u32 k_addr, u32 bars, u32 parity,
                                                int cb) {
  mbarrier_wait_parity(bars + 8 * cb, parity);
  const u64 da = wgmma_desc_sw128(k_addr + cb * kTile * 128, 16, 1024);
  const u64 db = wgmma_desc_sw128(q_addr + cb * kR * 128, 16, 1024);
  wgmma_fence();
#pragma unroll
  for (int sub = 0; sub < kSteps; ++sub) WgmmaE4m3<kQgN>::ss(acc, da + 2 * sub, db + 2 * sub, 1);
  wgmma_commit();
}

// P x f -> e4m3 P[query row][key] at pt (store_p8's layout, 16 rows, keys in vt_key_pos's
// order; a split Q's P as hi and lo, bytes 0-63 and 64-127 of a row): f[h] is the factor of
// the thread's key row 16 rt + lane / 4 + 8 h (2^8; over fp8ds, times the key's group scale).
// By 4-byte words (m52): lanes L and L ^ 4 (key rows g and g + 1 of an even g = lane / 4, and
// g + 8, g + 9) hold the four keys of one word of P^T's rows (positions 4 (g / 2) + 0..3 of
// vt_key_pos's order). Each converts its two keys a query row, the two swap half of their
// rows' pairs, and each stores two rows' words: the even lane query rows 2 (lane & 3) + {0, 1},
// the odd lane those + 8.
__device__ __forceinline__ void narrow_store_pt(const float (&p)[kNRegs], const float (&f)[2], u32 pt, int rt,
                                                int lane) {
  constexpr int kPlanes = kQgSplit ? 2 : 1;
  const bool odd = (lane >> 2) & 1;
  const int row0 = 2 * (lane & 3) + (odd ? 8 : 0);
  const u32 in_chunk = 4 * ((lane >> 3) & 3);
  const u32 at0 = pt + row0 * 128 + (((rt ^ (row0 & 7)) << 4) | in_chunk);
  const u32 at1 = pt + (row0 + 1) * 128 + (((rt ^ ((row0 + 1) & 7)) << 4) | in_chunk);
  u32 words[kPlanes][2];  // [hi, lo][slots 0-1, slots 2-3]: (key g, key g + 8) pairs, a slot a half
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    u16 w[kPlanes][2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int i = 4 * half + s;  // registers i (key g) and i + 2 (key g + 8) of slot 2 half + s
      if constexpr (kQgSplit) f32x2_to_e4m3x2_split(p[i] * f[0], p[i + 2] * f[1], w[0][s], w[1][s]);
      else w[0][s] = f32x2_to_e4m3x2(p[i] * f[0], p[i + 2] * f[1]);
    }
#pragma unroll
    for (int plane = 0; plane < kPlanes; ++plane) words[plane][half] = w[plane][0] | ((u32)w[plane][1] << 16);
  }
#pragma unroll
  for (int plane = 0; plane < kPlanes; ++plane) {
    const u32 mine = odd ? words[plane][1] : words[plane][0];
    const u32 theirs = __shfl_xor_sync(0xffffffffu, odd ? words[plane][0] : words[plane][1], 4);
    const u32 even_keys = odd ? theirs : mine, odd_keys = odd ? mine : theirs;
    st_shared_u32(at0 ^ (64u * plane), prmt(even_keys, odd_keys, 0x5140u));  // the lo plane: chunk ^ 4
    st_shared_u32(at1 ^ (64u * plane), prmt(even_keys, odd_keys, 0x7362u));
  }
}

// One tile (in buffer `buf`, its barriers' parity `parity`) by this warpgroup alone.
__device__ __forceinline__ void narrow_qg_tile(NarrowQgState& ns, const NarrowQgSmem& sm, const NarrowTile& t,
                                               int buf, u32 parity, int wg, int rt, int lane) {
  const float kInf = __int_as_float(0x7f800000);
  const u32 k_addr = sm.buf(buf), bars = sm.bar(buf);

  // S^T over the 576 dims, V^T's fragments (all 512 dims) loaded under it.
  // (The blocks unrolled: a loop of them ran 7 % slower, m45.)
  float acc[kQgN / 2];
#pragma unroll
  for (int i = 0; i < kQgN / 2; ++i) acc[i] = 0.f;
#pragma unroll
  for (int cb = 0; cb < kRope8Block; ++cb) narrow_qk_block<4>(acc, sm.q, k_addr, bars, parity, cb);
  narrow_qk_block<(kQk - kV) / 32>(acc, sm.q, k_addr, bars, parity, kRope8Block);
  u32 v[kQgOBlocks][2][4];
  load_vt(v, k_addr, 0, rt, lane);
  wgmma_wait<0>();
  wgmma_pin(acc);

  // Log2 units, the mask (-inf by select), the tile's max per query row.
  const bool need_mask = tile_needs_mask(t.tile_start, t.split_end, t.draft_begin);
  float s[kNRegs], tmax[kNSlots];
#pragma unroll
  for (int c = 0; c < kNSlots; ++c) tmax[c] = -kInf;
#pragma unroll
  for (int i = 0; i < kNRegs; ++i) {
    float x = kQgSplit ? (acc[i] + acc[i + kNRegs]) * sm.q_inv[slot_col(acc_slot(i), lane)] : acc[i];
    x *= t.logit_scale_log2;
    if (need_mask) {
      const int key = 16 * rt + (lane >> 2) + 8 * ((i >> 1) & 1);
      x = mla::key_visible(t.tile_start + key, t.split_end, t.draft_begin, t.bits) ? x : -kInf;
    }
    s[i] = x;
    tmax[acc_slot(i)] = fmaxf(tmax[acc_slot(i)], x);
  }
  float base[kNSlots], corr[kNSlots];
  narrow_row_max(tmax, ns.row_max, sm.max + wg * 4 * kN, base, corr, wg, rt, lane);

  // P = exp2(S - base) -> P^T; the sums and O^T onto the new max.
  float p[kNRegs], tsum[kNSlots] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kNRegs; ++i) {
    p[i] = fast_exp2(s[i] - base[acc_slot(i)]);
    tsum[acc_slot(i)] += p[i];
  }
  const u32 pt = sm.pt0 + wg * kPtBytes;
  const float f[2] = {kPScale, kPScale};
  narrow_store_pt(p, f, pt, rt, lane);
  fence_proxy_async();  // P^T -> visible to this warpgroup's wgmmas
  narrow_rescale(ns.row_sum, ns.o, corr, tsum);
  named_barrier_sync(kNarrowBarrier + wg, 128);  // P^T is in shared memory; the maxima are read

  // O^T += V^T P^T over all 512 dims (P's hi and lo where split).
#pragma unroll
  for (int d = 0; d < kQgOBlocks; ++d) wgmma_pin(ns.o[d]);
  wgmma_fence();
#pragma unroll
  for (int plane = 0; plane < (kQgSplit ? 2 : 1); ++plane)
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int d = 0; d < kQgOBlocks; ++d)
        WgmmaE4m3<kN>::rs(ns.o[d], v[d][ks], wgmma_desc_sw128(pt + plane * 64 + ks * 32, 16, 1024));
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int d = 0; d < kQgOBlocks; ++d) wgmma_pin(ns.o[d]);
}

// A plain fp8 cache's tile math in narrow_qg_cta's loop (mla/hopper_narrow_qg_ds.cuh: fp8ds's).
struct NarrowQgPlain {
  __device__ __forceinline__ void begin(const QgBuffers&, int, int, int) {}
  __device__ __forceinline__ void tile(NarrowQgState& ns, const NarrowQgSmem& sm, const NarrowTile& t, int, int buf,
                                       u32 parity, int wg, int rt, int lane) {
    narrow_qg_tile(ns, sm, t, buf, parity, wg, rt, lane);
  }
  __device__ __forceinline__ void end(NarrowQgState&) const {}
};

// Both warpgroups' rows -> one, in the per-tile schedule's RowState (rows 16 rt + quad_row
// (+ 8) of warp rt, dims 256 wg + 8 i + 2 quad_col (+ 1)) for finish_rows: each warpgroup's
// O^T through its own `region` (kN x (kV + 4) floats), its maxima and sums through `stats`;
// each row then weighs the two by 2^(max_w - max). Rows past kN are padding.
__device__ __forceinline__ void narrow_qg_rows(NarrowQgState& ns, RowState& st, float* region, float* stats, int wg,
                                               int rt, int lane) {
  constexpr int kStride = kV + 4;  // a row's 16 lanes of one store phase on distinct banks
  const float kInf = __int_as_float(0x7f800000);
  reduce_over_key_rows(ns.row_sum, [](float a, float b) { return a + b; });
  math_sync();  // every wgmma of both warpgroups is done with the buffers
  float* const sums = stats;             // [warpgroup][warp][query row]
  float* const maxes = stats + 8 * kN;   // [warpgroup][query row]
  if (lane < 4) {
#pragma unroll
    for (int c = 0; c < kNSlots; ++c) {
      sums[(wg * 4 + rt) * kN + slot_col(c, lane)] = ns.row_sum[c];
      if (rt == 0) maxes[wg * kN + slot_col(c, lane)] = ns.row_max[c];
    }
  }
  float* const mine = region + wg * kN * kStride;
#pragma unroll
  for (int d = 0; d < kQgOBlocks; ++d)
#pragma unroll
    for (int i = 0; i < kNRegs; ++i)
      mine[slot_col(acc_slot(i), lane) * kStride + vt_dim(d, i, rt, lane)] = ns.o[d][i] * (1.f / kPScale);
  math_sync();
  const int quad_row = lane >> 2, quad_col = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = rt * 16 + quad_row + half * 8;
    const bool real = r < kN;
    float m = -kInf, f[2] = {0.f, 0.f}, sum = 0.f;
    if (real) {
      m = fmaxf(maxes[r], maxes[kN + r]);
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        f[w] = maxes[w * kN + r] == -kInf ? 0.f : fast_exp2(maxes[w * kN + r] - m);
        sum += f[w] * (sums[(4 * w) * kN + r] + sums[(4 * w + 1) * kN + r] + sums[(4 * w + 2) * kN + r] +
                       sums[(4 * w + 3) * kN + r]);
      }
    }
    st.row_max[half] = m;
    st.row_sum[half] = quad_col == 0 ? sum : 0.f;
#pragma unroll
    for (int i = 0; i < kAccTiles; ++i) {
      float2 o = make_float2(0.f, 0.f);
      if (real) {
        const int at = r * kStride + wg * kWgDims + 8 * i + 2 * quad_col;
        const float2 a = *reinterpret_cast<const float2*>(region + at);
        const float2 b = *reinterpret_cast<const float2*>(region + kN * kStride + at);
        o = make_float2(a.x * f[0] + b.x * f[1], a.y * f[0] + b.y * f[1]);
      }
      st.acc[i][2 * half] = o.x, st.acc[i][2 * half + 1] = o.y;
    }
  }
}

// The whole CTA on the narrow QGMMA path, up to the shared epilogue: Q staged, the split's
// tiles (each by `math`: NarrowQgPlain or NarrowQgDs), then st as finish_rows takes it.
// `bars`: kQgBuffers x kQ8Blocks mbarriers, initialised.
template <class TileMath>
__device__ __forceinline__ void narrow_qg_cta(RowState& st, const XqajitMlaArgs& args,
                                              const TmaTileLoader& tma, unsigned char* smem, u32 bars,
                                              const SeesawSplit& sp, TileMath math, int b, int rb, int tid) {
  static_assert(!kNarrowQg || kQgBuffers == 4, "two tile buffers a warpgroup");
  const int lane = tid & 31, wg = warp_uniform(tid >> 7), rt = warp_uniform((tid >> 5) & 3);
  NarrowQgSmem sm;
  sm.base = smem;
  sm.q = smem_addr(smem + kQOff);
  sm.buf0 = smem_addr(smem + kQgRawOff);
  sm.pt0 = smem_addr(smem + kQgP8Off);
  sm.max = reinterpret_cast<float*>(smem + kQgP8Off + (kPtPlanes > 1 ? 2 : 1) * kP8Bytes);  // after both P^T
  static_assert(2 * kPtPlanes * kPtBytes <= 2 * kP8Bytes, "both warpgroups' P^T planes before the maxima");
  float* const q_inv = reinterpret_cast<float*>(smem + kQgStatsOff) + 3 * kR;  // QgmmaSmem::q_inv
  sm.q_inv = q_inv;
  sm.bars = bars;
  if (!kQgGather && tid == 0) sm.issue_first(tma, sp.num_tiles);
  const bool issuer = !kQgGather && (tid & 127) == 0;  // this warpgroup's refills (a gather's: math's)
  int ids[TmaTileLoader::kPagesPerTile];
  if (issuer) tma.pages(wg + kQgBuffers, ids);
  if constexpr (kQgGather) {  // the first copies under Q's staging, once the barriers' init is seen
    __syncthreads();
    math.begin(sm, wg, rt, lane);
  }
  // (row block 0 where there is one: the compiler cannot know that rb is 0 there)
  const int q_block = kGeo.row_blocks == 1 ? 0 : rb;
  if constexpr (kQgSplit)
    stage_q_split_narrow(args, smem + kQOff, q_inv, b, q_block * kRowStride, tid);
  else
    stage_q8(args, smem + kQOff, b, q_block, tid);
  fence_proxy_async();  // Q's st.shared -> visible to wgmma
  __syncthreads();

  NarrowQgState ns;
  narrow_rows_init(ns.row_max, ns.row_sum, ns.o);
  const unsigned bits = mla::draft_bits(args, b, 0, kQLen);
  if constexpr (!kQgGather) math.begin(sm, wg, rt, lane);
#pragma unroll 1
  for (int it = wg; it < sp.num_tiles; it += 2) {
    const int buf = it % kQgBuffers;
    const u32 parity = (u32)(it / kQgBuffers) & 1u;
    if (issuer && it >= 2 && it + 2 < sp.num_tiles) {  // tile it - 2's buffer takes tile it + 2
      const int prev = (it - 2) % kQgBuffers;
      tma.issue_cols<0, kQ8Blocks>(ids, sm.buf(prev), sm.bar(prev));
      tma.pages(it + 4, ids);
    }
    const NarrowTile nt{sp.split_begin + it * kTile, sp.split_end, sp.draft_begin, bits, sp.logit_scale_log2,
                        nullptr};
    const int valid = sp.split_end - nt.tile_start;
    if (!kQgGather && valid < kTile) {  // the split's last tile: the keys past it -> zeros in V (P = 0 times NaN)
#pragma unroll 1
      for (int cb = 0; cb < 2 * kVtBlocks; ++cb) mbarrier_wait_parity(sm.bar(buf) + 8 * cb, parity);
      zero_cols_tail<0, 2 * kVtBlocks>(sm.ptr(sm.buf(buf)), valid, tid & 127);
      fence_proxy_async();
      named_barrier_sync(kNarrowBarrier + wg, 128);
    }
    math.tile(ns, sm, nt, it, buf, parity, wg, rt, lane);
  }
  math.end(ns);
  float* const stats = reinterpret_cast<float*>(smem + kQgP8Off + kP8Bytes);
  narrow_qg_rows(ns, st, reinterpret_cast<float*>(smem + kQgRawOff), stats, wg, rt, lane);
  __syncthreads();  // the rows are read: the epilogue may reuse shared memory
}

}  // namespace mla_hopper
}  // namespace xqajit
