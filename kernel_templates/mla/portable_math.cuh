#pragma once
// Portable MLA backend, the tensor-core side.
//   phase A  S = Q K^T: units of (row tile, 16 keys, k-part) spread over the
//            8 warps; per k-step one ldmatrix of Q feeds two mma (two
//            independent accumulator chains); each k-part's partial S goes to
//            its own plane of shared memory (phase B sums them: deterministic).
//   phase B  warp (row tile rt, slice) reads its 16 rows of S, masks, runs the
//            online softmax (identically in every warp of the row tile, so they
//            agree on max and sum) and accumulates O += P V over its slice of
//            the 512 output dims, V by ldmatrix.trans from the same tile.

#include "common/mma.cuh"
#include "common/online_softmax.cuh"
#include "mla/portable_config.cuh"
#include "mla/shared_epilogue.cuh"
#include "mla/shared_rows.cuh"
#include "mla/shared_sparse.cuh"

namespace xqajit {
namespace mla_portable {

struct alignas(8) F2 {
  float x, y;
};

__device__ __forceinline__ void qk_phase(u32 q_addr, u32 k_addr, float* s_buf, int warp, int lane) {
  const int quad_row = lane >> 2, quad_col = lane & 3;
  for (int u = warp; u < kUnits; u += kWarps) {
    const int rt = u % kRowTiles, g = (u / kRowTiles) % kKeyGroups, kp = u / (kRowTiles * kKeyGroups);
    float sa[4] = {0.f, 0.f, 0.f, 0.f}, sb[4] = {0.f, 0.f, 0.f, 0.f};
    const int q_row = rt * 16 + (lane & 15), q_hi = lane >> 4;
    const int k_row = g * 16 + (lane & 7) + ((lane >> 4) << 3), k_hi = (lane >> 3) & 1;
#pragma unroll 6
    for (int j = 0; j < kKSteps; ++j) {
      const int kk = kp * kKSteps + j;
      u32 qa[4], kb[4];
      ldmatrix_x4(qa, q_addr + swizzle(q_row, 2 * kk + q_hi, kRowBytes));
      ldmatrix_x4(kb, k_addr + swizzle(k_row, 2 * kk + k_hi, kRowBytes));
      mma_16816<false>(sa, qa, kb[0], kb[1]);  // keys g*16 + 0..7
      mma_16816<false>(sb, qa, kb[2], kb[3]);  // keys g*16 + 8..15
    }
    float* const s0 = s_buf + kp * kSPlane + (rt * 16 + quad_row) * kSStride + g * 16 + 2 * quad_col;
    *reinterpret_cast<F2*>(s0) = F2{sa[0], sa[1]};
    *reinterpret_cast<F2*>(s0 + 8 * kSStride) = F2{sa[2], sa[3]};
    *reinterpret_cast<F2*>(s0 + 8) = F2{sb[0], sb[1]};
    *reinterpret_cast<F2*>(s0 + 8 + 8 * kSStride) = F2{sb[2], sb[3]};
  }
}

// Per-thread state of phase B: rows quad_row and quad_row + 8 of row tile rt.
using RowState = mla::RowStateOf<kDimTiles>;

__device__ __forceinline__ void pv_phase(RowState& st, const float* s_buf, u32 v_addr, int rt, int dim0,
                                         int tile_start, int split_end, int draft_begin, float logit_scale_log2,
                                         int lane, const mla::SparseList& list) {
  const float kInf = __int_as_float(0x7f800000);
  const int quad_row = lane >> 2, quad_col = lane & 3;
  // Sparse: any list entry may be an invalid slot, so every tile is masked.
  const bool need_mask =
      MLA_SPARSE || tile_start + kTile > split_end || (kQLen > 1 && tile_start + kTile > draft_begin);
  float s[kTile / 8][4];
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
    const float* const s0 = s_buf + (rt * 16 + quad_row) * kSStride + n * 8 + 2 * quad_col;
    F2 lo = *reinterpret_cast<const F2*>(s0), hi = *reinterpret_cast<const F2*>(s0 + 8 * kSStride);
#pragma unroll
    for (int kp = 1; kp < kKParts; ++kp) {  // in k-part order: every warp sums identically
      const F2 l = *reinterpret_cast<const F2*>(s0 + kp * kSPlane);
      const F2 h = *reinterpret_cast<const F2*>(s0 + kp * kSPlane + 8 * kSStride);
      lo.x += l.x; lo.y += l.y; hi.x += h.x; hi.y += h.y;
    }
    const float v[4] = {lo.x, lo.y, hi.x, hi.y};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = v[e] * logit_scale_log2;
      if (need_mask) {
        const int key = tile_start + n * 8 + 2 * quad_col + (e & 1);
        bool visible;
        if constexpr (MLA_SPARSE) visible = key < split_end && list.slot_at(key) >= 0;
        else visible = mla::key_visible(key, split_end, draft_begin, st.bits[e >> 1]);
        x = visible ? x : -kInf;
      }
      s[n][e] = x;
    }
  }
  float corr[2];
  online_softmax_tile(s, st.row_max, st.row_sum, corr);
  rescale_rows(st.acc, corr);
#pragma unroll
  for (int kb = 0; kb < kTile / 16; ++kb) {
    u32 pa[4];
    pa[0] = pack_f32x2<false>(s[2 * kb][0], s[2 * kb][1]);
    pa[1] = pack_f32x2<false>(s[2 * kb][2], s[2 * kb][3]);
    pa[2] = pack_f32x2<false>(s[2 * kb + 1][0], s[2 * kb + 1][1]);
    pa[3] = pack_f32x2<false>(s[2 * kb + 1][2], s[2 * kb + 1][3]);
    const int tok = kb * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
    for (int dp = 0; dp < kDimTiles / 2; ++dp) {
      u32 vb[4];
      ldmatrix_x4_trans(vb, v_addr + swizzle(tok, dim0 / 8 + 2 * dp + (lane >> 4), kRowBytes));
      mma_16816<false>(st.acc[2 * dp], pa, vb[0], vb[1]);
      mma_16816<false>(st.acc[2 * dp + 1], pa, vb[2], vb[3]);
    }
  }
}

}  // namespace mla_portable
}  // namespace xqajit
