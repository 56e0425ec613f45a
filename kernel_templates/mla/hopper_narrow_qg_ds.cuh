#pragma once
// Hopper MLA backend, the narrow schedule on the fp8 tensor cores over a dense fp8ds cache
// (m51: DeepSeek-V3.2's 656-byte rows, 16 rows a CTA). mla/hopper_narrow_qg.cuh's schedule
// and loop; only the tile's math differs (NarrowQgDs):
//   loads   TMA as for a plain fp8 row: the four 128-value latent groups are column blocks
//           0-3, the bf16 rope (bytes 528-655) block 4 (TmaTileLoader::box_x). The float32
//           scales (bytes 512-527) are read from global memory, a tile ahead: lane L of every
//           warp holds keys L and L + 32 of its warpgroup's next tile, page ids a tile earlier.
//   S^T     = sum_g s_g[key] (K_g Q_g^T) + K_rope Q_rope^T: an m64n32k32 e4m3 accumulator a
//           scale group (a split Q's hi and lo planes, as the plain path), the rope as four
//           m64n16k16 bf16 wgmmas (Q's rope staged as bf16, stage_q_split_narrow).
//   O^T_g  += V_g^T (P diag(s_g) / m_g)^T: P^T stored once a scale group (four planes a
//           warpgroup), each times its keys' scales over m_g, the group's running largest
//           scale (so P_g <= 1 and e4m3 x 2^8 never overflows); O^T's group blocks are moved
//           onto a new m_g with the softmax's correction, and times m_g at the end.
// Everything else (the split of Q into planes, the mask, the row max, the merge of the two
// warpgroups, the epilogue) is the plain path's.
// Sparse (m53, kQgGather): a slot per key instead of a page, so no tensor map: each warpgroup
// gathers its next tile's rows itself by cp.async into the same five boxes (swizzled by hand as
// TMA would), each thread arriving on a box's barrier once its copies of it land; a skipped
// slot (-1, out of range, past the list) is zero-filled, never read, and masked by the flags
// the scale lanes ballot.

#include "common/wgmma.cuh"
#include "mla/hopper_narrow_qg.cuh"

namespace xqajit {
namespace mla_hopper {

constexpr int kDsGroups = kV / XQAJIT_MLA_FP8DS_GROUP;  // scale groups, one latent column block each
static_assert(!MLA_FP8DS || !kNarrowQg || (kQgSplit && kDsGroups == kRope8Block && kDsGroups == kPtPlanes),
              "fp8ds: a bf16 Q, a latent group a column block and a P^T plane");

// This warpgroup's tile `buf`: S^T, softmax, P^T a group, O^T (cur: its keys' scales as
// NarrowQgDs::load left them; ok: sparse, which of warp rt's keys have a row (bit key % 32);
// m: the groups' running largest scales, updated; under(): issued under the S^T products).
template <class Under>
__device__ __forceinline__ void narrow_qg_ds_tile(NarrowQgState& ns, float (&m)[kDsGroups], const float4 (&cur)[2],
                                                  unsigned ok, const NarrowQgSmem& sm, const NarrowTile& t,
                                                  int buf, u32 parity, int wg, int rt, int lane, Under&& under) {
  const float kInf = __int_as_float(0x7f800000);
  const u32 k_addr = sm.buf(buf), bars = sm.bar(buf);

  // S^T: a group's own accumulator (its scale varies by key, the accumulator's M row), the rope's.
  // Each chain's first product overwrites (scale-d 0): zeroed accumulators shared one zero
  // register with the rope's, and ptxas waited on every chain before the next (C7517).
  // A gathered tile (cp.async rows: the generic proxy) is waited whole and fenced once for
  // wgmma: a fence a box cost 3-5 % (m53e); its copies landed long before anyway.
  if constexpr (kQgGather) {
#pragma unroll
    for (int cb = 0; cb < kQ8Blocks; ++cb) mbarrier_wait_parity(bars + 8 * cb, parity);
    fence_proxy_async();
  }
  float acc[kDsGroups][kQgN / 2], rope[kNRegs];
#pragma unroll
  for (int g = 0; g < kDsGroups; ++g) {
    if constexpr (!kQgGather) mbarrier_wait_parity(bars + 8 * g, parity);
    const u64 da = wgmma_desc_sw128(k_addr + g * kTile * 128, 16, 1024);
    const u64 db = wgmma_desc_sw128(sm.q + g * kR * 128, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int sub = 0; sub < 4; ++sub) WgmmaE4m3<kQgN>::ss(acc[g], da + 2 * sub, db + 2 * sub, sub > 0);
    wgmma_commit();
  }
  if constexpr (!kQgGather) mbarrier_wait_parity(bars + 8 * kRope8Block, parity);
  {
    const u64 da = wgmma_desc_sw128(k_addr + kRope8Block * kTile * 128, 16, 1024);
    const u64 db = wgmma_desc_sw128(sm.q + kRope8Block * kR * 128, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int sub = 0; sub < 4; ++sub) WgmmaSS<kN, false, 0>::run(rope, da + 2 * sub, db + 2 * sub, sub > 0);
    wgmma_commit();
  }
  under();

  // Under the products: the tile's largest scale a group (every warp over all 64 keys), the
  // running one, and this thread's key rows' scales (key 16 rt + lane / 4 + 8 h: lane
  // key & 31 holds it, in cur[key >> 5]).
  // (|scale| as bits: a non-negative float orders as its bits, so one redux a group)
  const float lane_max[kDsGroups] = {fmaxf(fabsf(cur[0].x), fabsf(cur[1].x)), fmaxf(fabsf(cur[0].y), fabsf(cur[1].y)),
                                     fmaxf(fabsf(cur[0].z), fabsf(cur[1].z)), fmaxf(fabsf(cur[0].w), fabsf(cur[1].w))};
  float tmax[kDsGroups];
#pragma unroll
  for (int g = 0; g < kDsGroups; ++g)
    tmax[g] = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(lane_max[g])));
  float ratio[kDsGroups], unit[kDsGroups];
#pragma unroll
  for (int g = 0; g < kDsGroups; ++g) {
    const float m_new = fmaxf(m[g], tmax[g]);
    const float inv = __fdividef(1.f, m_new);
    ratio[g] = m[g] * inv;      // O^T's group blocks onto the new m_g
    unit[g] = kPScale * inv;    // P_g = P x s_g / m_g, x 2^8
    m[g] = m_new;
  }
  const float4 mine = rt >= 2 ? cur[1] : cur[0];
  float own[2][kDsGroups];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int src = (16 * (rt & 1) + (lane >> 2) + 8 * h) & 31;
    own[h][0] = __shfl_sync(0xffffffffu, mine.x, src), own[h][1] = __shfl_sync(0xffffffffu, mine.y, src);
    own[h][2] = __shfl_sync(0xffffffffu, mine.z, src), own[h][3] = __shfl_sync(0xffffffffu, mine.w, src);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int g = 0; g < kDsGroups; ++g) wgmma_pin(acc[g]);
  wgmma_pin(rope);

  // Log2 units (the latent's sum over groups back to Q's scale, plus the rope), the mask, the
  // tile's max per query row.
  const bool need_mask = tile_needs_mask(t.tile_start, t.split_end, t.draft_begin);
  float s[kNRegs], qmax[kNSlots];
#pragma unroll
  for (int c = 0; c < kNSlots; ++c) qmax[c] = -kInf;
#pragma unroll
  for (int i = 0; i < kNRegs; ++i) {
    const int h = (i >> 1) & 1;
    float latent = 0.f;
#pragma unroll
    for (int g = 0; g < kDsGroups; ++g) latent += own[h][g] * (acc[g][i] + acc[g][i + kNRegs]);
    float x = (latent * sm.q_inv[slot_col(acc_slot(i), lane)] + rope[i]) * t.logit_scale_log2;
    if (need_mask) {
      const int key = 16 * rt + (lane >> 2) + 8 * h;
      const bool visible = MLA_SPARSE ? (ok >> (key & 31)) & 1u
                                      : mla::key_visible(t.tile_start + key, t.split_end, t.draft_begin, t.bits);
      x = visible ? x : -kInf;
    }
    s[i] = x;
    qmax[acc_slot(i)] = fmaxf(qmax[acc_slot(i)], x);
  }
  u32 v[kQgOBlocks][2][4];  // after S: the group accumulators are dead by now
  load_vt(v, k_addr, 0, rt, lane);
  float base[kNSlots], corr[kNSlots];
  narrow_row_max(qmax, ns.row_max, sm.max + wg * 4 * kN, base, corr, wg, rt, lane);

  // P = exp2(S - base) -> a P^T plane a group; the sums and O^T onto the new max and scales.
  float p[kNRegs], tsum[kNSlots] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kNRegs; ++i) {
    p[i] = fast_exp2(s[i] - base[acc_slot(i)]);
    tsum[acc_slot(i)] += p[i];
  }
  const u32 pt = sm.pt0 + wg * kPtPlanes * kPtBytes;  // this warpgroup's planes (narrow_qg_cta's map)
#pragma unroll
  for (int g = 0; g < kDsGroups; ++g) {
    const float f[2] = {own[0][g] * unit[g], own[1][g] * unit[g]};
    narrow_store_pt(p, f, pt + g * kPtBytes, rt, lane);
  }
  fence_proxy_async();  // P^T -> visible to this warpgroup's wgmmas
#pragma unroll
  for (int c = 0; c < kNSlots; ++c) ns.row_sum[c] = ns.row_sum[c] * corr[c] + tsum[c];
  if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f || corr[2] != 1.f || corr[3] != 1.f ||
                                 ratio[0] != 1.f || ratio[1] != 1.f || ratio[2] != 1.f || ratio[3] != 1.f)) {
#pragma unroll
    for (int d = 0; d < kQgOBlocks; ++d)
#pragma unroll
      for (int i = 0; i < kNRegs; ++i) ns.o[d][i] *= corr[acc_slot(i)] * ratio[d / 2];
  }
  named_barrier_sync(kNarrowBarrier + wg, 128);  // P^T is in shared memory; the maxima are read

  // O^T += V^T P_g^T, block d of group d / 2 (P's hi and lo).
#pragma unroll
  for (int d = 0; d < kQgOBlocks; ++d) wgmma_pin(ns.o[d]);
  wgmma_fence();
#pragma unroll
  for (int plane = 0; plane < 2; ++plane)
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int d = 0; d < kQgOBlocks; ++d)
        WgmmaE4m3<kN>::rs(ns.o[d], v[d][ks],
                          wgmma_desc_sw128(pt + (d / 2) * kPtBytes + plane * 64 + ks * 32, 16, 1024));
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int d = 0; d < kQgOBlocks; ++d) wgmma_pin(ns.o[d]);
}

// Where NarrowQgDs's rows are (its Rows): lane L of every warp looks up keys L and L + 32 of a
// tile a tile before their scales are read, which is a tile before the tile's math.
// Dense: a block table's pages, whose tiles narrow_qg_cta has TMA copy.
struct DsPagedRows {
  const unsigned char* cache;
  const int* table_row;
  long long stride_page, stride_token;  // bytes
  int split_begin, split_end;
  int id[2];  // the page of keys lane, lane + 32 of the tile looked up last (-1: none)

  __device__ __forceinline__ int token(int tile, int h, int lane) const {
    return split_begin + tile * kTile + lane + 32 * h;
  }
  __device__ __forceinline__ void lookup(int tile, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int tok = token(tile, h, lane);
      id[h] = tok < split_end ? table_row[tok / kPageSize] : -1;
    }
  }
  // The first byte of key lane + 32 h's row (tile `tile`, looked up last; id[h] >= 0).
  __device__ __forceinline__ const unsigned char* row(int tile, int h, int lane) const {
    return cache + id[h] * stride_page + (token(tile, h, lane) % kPageSize) * stride_token;
  }
  // The mask's flags of warp rt's keys: none, the split's bounds mask (mla::key_visible).
  __device__ __forceinline__ unsigned key_flags(int) const { return 0u; }
};

// Sparse (kQgGather): an index list's slots, whose rows the warpgroup gathers itself.
struct DsGatheredRows {
  const unsigned char* cache;
  mla::SparseList list;
  long long stride_page, stride_token;  // bytes
  int split_begin, split_end, num_tiles;
  int id[2];                  // the slot of keys lane, lane + 32 of the tile looked up last (-1: none)
  unsigned ok[2], next_ok[2];  // the keys with a row of the tile being computed (the next), a bit each

  __device__ __forceinline__ void lookup(int tile, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) id[h] = list.slot_in_split(split_begin + tile * kTile + lane + 32 * h, split_end);
  }
  __device__ __forceinline__ const unsigned char* row(int, int h, int) const {
    return cache + mla::SparseList::row_offset(id[h], stride_page, stride_token);
  }
  __device__ __forceinline__ void flags(unsigned (&f)[2]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) f[h] = __ballot_sync(0xffffffffu, id[h] >= 0);
  }
  __device__ __forceinline__ unsigned key_flags(int rt) const { return rt >= 2 ? ok[1] : ok[0]; }  // keys 16 rt..
  // The tile looked up last -> buffer `buf`, by this warpgroup's 128 threads: thread j copies
  // chunk j % 8 of every 128-byte box of rows j / 8 + 16 i (i < 4), its slots from the lanes
  // that looked them up, into the box's 128-byte swizzle (chunk ^ row % 8, as TMA writes it),
  // then arrives on the box's barrier as its copies land. A skipped slot is zero-filled.
  __device__ __forceinline__ void gather(const QgBuffers& sm, int buf, int rt, int lane) const {
    const int r0 = 4 * rt + (lane >> 3), chunk = lane & 7;
    const u32 at = sm.buf(buf) + r0 * 128 + ((chunk ^ (r0 & 7)) << 4);  // + 16 i rows keeps r % 8
    const unsigned char* src[4];
    bool valid[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int slot = __shfl_sync(0xffffffffu, id[i >> 1], (r0 + 16 * i) & 31);
      valid[i] = slot >= 0;
      src[i] = (valid[i] ? cache + mla::SparseList::row_offset(slot, stride_page, stride_token) : cache) + 16 * chunk;
    }
#pragma unroll
    for (int cb = 0; cb < kQ8Blocks; ++cb) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        cp_async_16(at + cb * kTile * 128 + i * 16 * 128, src[i] + TmaTileLoader::box_x(cb), valid[i]);
      cp_async_mbarrier_arrive_noinc(sm.bar(buf) + 8 * cb);
    }
  }
};

// The fp8ds tile math of narrow_qg_cta's loop: the scales a tile ahead, the running group
// scales, O^T back to the cache's units at the end; sparse, the gather of each tile's rows.
template <class Rows>
struct NarrowQgDs {
  Rows rows;
  float4 cur[2], next[2];  // scales of keys lane, lane + 32: this tile's, the warpgroup's next
  float m[kDsGroups];  // the groups' running largest scales: O^T's group blocks are in units of 1 / m

  // Keys past the split (or of no tile) get zero scales: never NaN from a slot no one wrote.
  __device__ __forceinline__ void load(int tile, int lane, float4 (&sc)[2]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sc[h] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (rows.id[h] >= 0) sc[h] = __ldg(reinterpret_cast<const float4*>(rows.row(tile, h, lane) + kV));
    }
  }

  __device__ __forceinline__ void begin(const QgBuffers& sm, int wg, int rt, int lane) {
#pragma unroll
    // A floor, not 0: P's factor 2^8 / m_g stays finite while every scale seen is 0 (a tile of
    // skipped slots, or zero groups; FLT_MIN's 2^134 was inf, and 0 x inf put NaN in P^T).
    for (int g = 0; g < kDsGroups; ++g) m[g] = 0x1p-100f;
    rows.lookup(wg, lane);
    load(wg, lane, cur);
    if constexpr (kQgGather) {  // this warpgroup's first two tiles, into its two buffers
      rows.flags(rows.ok);
      if (wg < rows.num_tiles) rows.gather(sm, wg, rt, lane);
    }
    rows.lookup(wg + 2, lane);
    if constexpr (kQgGather) {
      if (wg + 2 < rows.num_tiles) rows.gather(sm, wg + 2, rt, lane);
    }
  }
  __device__ __forceinline__ void tile(NarrowQgState& ns, const NarrowQgSmem& sm, const NarrowTile& t, int it,
                                       int buf, u32 parity, int wg, int rt, int lane) {
    if constexpr (!kQgGather) {
      load(it + 2, lane, next);
      rows.lookup(it + 4, lane);
    }
    // Sparse: all under this tile's S^T (m53b, m53d), after its proxy fence: tile it + 2's
    // scales, tile it - 2's buffer (buf ^ 2) takes tile it + 2's rows, then tile it + 4's slots
    // are looked up.
    narrow_qg_ds_tile(ns, m, cur, rows.key_flags(rt), sm, t, buf, parity, wg, rt, lane, [&] {
      if constexpr (kQgGather) {
        load(it + 2, lane, next);
        rows.flags(rows.next_ok);
        if (it >= 2 && it + 2 < rows.num_tiles) rows.gather(sm, buf ^ 2, rt, lane);
        rows.lookup(it + 4, lane);
      }
    });
    cur[0] = next[0], cur[1] = next[1];
    if constexpr (kQgGather) rows.ok[0] = rows.next_ok[0], rows.ok[1] = rows.next_ok[1];
  }
  __device__ __forceinline__ void end(NarrowQgState& ns) const {
#pragma unroll
    for (int d = 0; d < kQgOBlocks; ++d)
#pragma unroll
      for (int i = 0; i < kNRegs; ++i) ns.o[d][i] *= m[d / 2];
  }
};

}  // namespace mla_hopper
}  // namespace xqajit
