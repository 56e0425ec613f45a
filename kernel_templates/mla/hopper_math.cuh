#pragma once
// Hopper MLA backend, the tensor-core side (one warpgroup's view; both
// warpgroups of the CTA run it on the same 64 rows):
//   S = Q K^T     36 x wgmma m64n64k16, A = Q and B = K tile from shared memory
//                 (both K-major, 128-byte swizzle), one commit group.
//   softmax       masks, online softmax in the accumulator layout (per warp the
//                 mma.sync m16n8 layout: common/online_softmax.cuh as is).
//   O += P V      4 x wgmma m64n256k16, A = P from registers (bf16), B = the
//                 same K tile read MN-major (transpose bit): this warpgroup's
//                 256 of the 512 output dims.

#include "common/online_softmax.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_config.cuh"
#include "mla/shared_epilogue.cuh"
#include "mla/shared_rows.cuh"

namespace xqajit {
namespace mla_hopper {

constexpr int kAccTiles = kWgDims / 8;  // n8 column tiles of one warpgroup's O (32)

// Per-thread state: rows quad_row and quad_row + 8 of this warp's 16 rows.
using RowState = mla::RowStateOf<kAccTiles>;

// S(64 x 64 keys) = Q K^T over the 576 dims.
__device__ __forceinline__ void qk_wgmma(float (&s)[kTile / 8][4], u32 q_addr, u32 k_addr) {
  float(&d)[kTile / 2] = reinterpret_cast<float(&)[kTile / 2]>(s);
#pragma unroll
  for (int i = 0; i < kTile / 2; ++i) d[i] = 0.f;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kQk / 16; ++kk) {
    const int blk = kk >> 2, sub = kk & 3;  // 64-element column block, k16 step inside its 128-byte rows
    const u64 da = wgmma_desc_sw128(q_addr + blk * kR * 128 + sub * 32, 16, 1024);
    const u64 db = wgmma_desc_sw128(k_addr + blk * kTile * 128 + sub * 32, 16, 1024);
    wgmma_m64n64k16_ss(d, da, db, 1);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_pin(d);
}

// Softmax of one tile and O += P V over this warpgroup's 256 dims.
__device__ __forceinline__ void pv_wgmma(RowState& st, float (&s)[kTile / 8][4], u32 v_addr, int wg,
                                         int tile_start, int split_end, int draft_begin, float logit_scale_log2,
                                         int lane) {
  const float kInf = __int_as_float(0x7f800000);
  const int quad_col = lane & 3;
  const bool need_mask = tile_start + kTile > split_end || (kQLen > 1 && tile_start + kTile > draft_begin);
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[n][e] * logit_scale_log2;
      if (need_mask) {
        const int key = tile_start + n * 8 + 2 * quad_col + (e & 1);
        x = mla::key_visible(key, split_end, draft_begin, st.bits[e >> 1]) ? x : -kInf;
      }
      s[n][e] = x;
    }
  }
  float corr[2];
  online_softmax_tile(s, st.row_max, st.row_sum, corr);
  rescale_rows(st.acc, corr);
  u32 pa[kTile / 16][4];
#pragma unroll
  for (int kb = 0; kb < kTile / 16; ++kb) {
    pa[kb][0] = pack_f32x2<false>(s[2 * kb][0], s[2 * kb][1]);
    pa[kb][1] = pack_f32x2<false>(s[2 * kb][2], s[2 * kb][3]);
    pa[kb][2] = pack_f32x2<false>(s[2 * kb + 1][0], s[2 * kb + 1][1]);
    pa[kb][3] = pack_f32x2<false>(s[2 * kb + 1][2], s[2 * kb + 1][3]);
  }
  float(&d)[kWgDims / 2] = reinterpret_cast<float(&)[kWgDims / 2]>(st.acc);
  wgmma_pin(d);
  wgmma_fence();
#pragma unroll
  for (int kb = 0; kb < kTile / 16; ++kb) {
    // Keys 16kb..16kb+15 (two 8-key swizzle atoms, 2048 bytes), dims 256wg.. (4 column blocks, LBO apart).
    const u64 db = wgmma_desc_sw128(v_addr + wg * (kWgDims / kColBlock) * kTile * 128 + kb * 2048, kTile * 128, 1024);
    wgmma_m64n256k16_rs<1>(d, pa[kb], db);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_pin(d);
}

}  // namespace mla_hopper
}  // namespace xqajit
