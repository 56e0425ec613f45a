#pragma once
// Hopper MLA backend, the tensor-core side (one warpgroup's view; warpgroup w
// owns keys 32w..32w+31 of S and output dims 256w..256w+255 of O):
//   S = Q K^T     36 x wgmma m64n32k16 over this warpgroup's 32 keys, A = Q and
//                 B = K tile from shared memory (both K-major, 128-byte swizzle).
//   softmax       masks, online softmax in the accumulator layout (per warp the
//                 mma.sync m16n8 layout: common/online_softmax.cuh), the row max
//                 folded with the other warpgroup's through shared memory.
//   O += P V      4 x wgmma m64n256k16, A = P from registers (bf16: this
//                 warpgroup's two k16 steps, the other's two read from shared
//                 memory, where thread t of each warpgroup holds the same rows
//                 and columns), B = the same K tile read MN-major (transpose bit).
// Why split S (m4): both warpgroups computed all 64 keys of S before, 36 m64n64
// wgmmas each; an SS wgmma costs the SM's shared-memory port (2 KB of A + N x 32 B
// of B) / 128 B a cycle (docs/KERNEL_NOTES.md, session 14 runs 4-5), so two halves
// cost 2 x 24 cycles per k16 step where two wholes cost 2 x 32.

#include "common/named_barrier.cuh"
#include "common/online_softmax.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_config.cuh"
#include "mla/shared_epilogue.cuh"
#include "mla/shared_rows.cuh"

namespace xqajit {
namespace mla_hopper {

constexpr int kAccTiles = kWgDims / 8;  // n8 column tiles of one warpgroup's O (32)
constexpr int kHalfKeys = kTile / 2;    // the keys of S one warpgroup computes (32)

// Per-thread state: rows quad_row and quad_row + 8 of this warp's 16 rows.
using RowState = mla::RowStateOf<kAccTiles>;

// A barrier of the two math warpgroups: the CTA's, or (with a producer warpgroup, which
// never waits at it) a named one.
constexpr int kMathBarrier = 1;
__device__ __forceinline__ void math_sync() {
  if constexpr (kProducer) named_barrier_sync(kMathBarrier, kThreads);
  else __syncthreads();
}

// The warpgroups' exchange (shared memory at kXchgOff): row maxima, then P halves as
// packed bf16 pairs, [warpgroup][thread of the warpgroup][8].
struct Exchange {
  float* max;  // [2][kR]
  u32* p;      // [2][128][8]
  __device__ explicit Exchange(unsigned char* smem)
      : max(reinterpret_cast<float*>(smem + kXchgOff)),
        p(reinterpret_cast<u32*>(smem + kXchgOff + 2 * kR * 4)) {}
};

// online_softmax_tile's combine: a row's max over both warpgroups' keys (the quad's
// first thread publishes this warpgroup's, every thread reads the other's).
struct RowMaxExchange {
  static constexpr bool kActive = true;
  float* max;  // Exchange::max
  int wg, row, quad_col;
  __device__ void operator()(float (&tile_max)[2]) const {
    if (quad_col == 0) max[wg * kR + row] = tile_max[0], max[wg * kR + row + 8] = tile_max[1];
    math_sync();
    tile_max[0] = fmaxf(tile_max[0], max[(1 - wg) * kR + row]);
    tile_max[1] = fmaxf(tile_max[1], max[(1 - wg) * kR + row + 8]);
  }
};

// Scores -> log2 units; keys from `key0` (this thread's columns of the accumulator
// layout) that the row may not see -> -inf: past the split, or a draft its bits hide;
// sparse: a key whose flag in `key_ok` (the flags of the keys from key0) is 0.
template <int kN>
__device__ __forceinline__ void scale_and_mask(float (&s)[kN][4], int key0, bool need_mask, int split_end,
                                               int draft_begin, const unsigned (&bits)[2], float logit_scale_log2,
                                               int quad_col, const unsigned char* key_ok = nullptr) {
  const float kInf = __int_as_float(0x7f800000);
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[n][e] * logit_scale_log2;
      if (need_mask) {
        const int local = n * 8 + 2 * quad_col + (e & 1);
        bool visible;
        if constexpr (MLA_SPARSE) visible = key_ok[local] != 0;
        else visible = mla::key_visible(key0 + local, split_end, draft_begin, bits[e >> 1]);
        x = visible ? x : -kInf;
      }
      s[n][e] = x;
    }
  }
}

// Does a tile starting at key `tile_start` hold keys some row may not see? (Sparse: any
// list entry may be an invalid slot, so every tile is masked.)
__device__ __forceinline__ bool tile_needs_mask(int tile_start, int split_end, int draft_begin) {
  return MLA_SPARSE || tile_start + kTile > split_end || (kQLen > 1 && tile_start + kTile > draft_begin);
}

// S(64 x this warpgroup's 32 keys) = Q K^T over the 576 dims.
__device__ __forceinline__ void qk_wgmma(float (&s)[kHalfKeys / 8][4], u32 q_addr, u32 k_addr, int wg) {
  float(&d)[kHalfKeys / 2] = reinterpret_cast<float(&)[kHalfKeys / 2]>(s);
#pragma unroll
  for (int i = 0; i < kHalfKeys / 2; ++i) d[i] = 0.f;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kQk / 16; ++kk) {
    const int blk = kk >> 2, sub = kk & 3;  // 64-element column block, k16 step inside its 128-byte rows
    const u64 da = wgmma_desc_sw128(q_addr + blk * kR * 128 + sub * 32, 16, 1024);
    // Keys 32wg..: four 8-row swizzle atoms into the column block.
    const u64 db = wgmma_desc_sw128(k_addr + blk * kTile * 128 + wg * kHalfKeys * 128 + sub * 32, 16, 1024);
    WgmmaSS<kHalfKeys, false, 0>::run(d, da, db, 1);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_pin(d);
}

// Softmax of this warpgroup's half of the tile (the max shared with the other half)
// and O += P V over this warpgroup's 256 dims and all 64 keys (sparse: `key_ok`, the
// tile's 64 key flags, TileLoader::key_ok or TileProducer::key_ok).
__device__ __forceinline__ void pv_wgmma(RowState& st, float (&s)[kHalfKeys / 8][4], u32 v_addr, int wg, int rt,
                                         const Exchange& xchg, int tile_start, int split_end, int draft_begin,
                                         float logit_scale_log2, int lane, const unsigned char* key_ok = nullptr) {
  const int quad_col = lane & 3, quad_row = lane >> 2;
  const int tid_wg = rt * 32 + lane;
  scale_and_mask(s, tile_start + wg * kHalfKeys, tile_needs_mask(tile_start, split_end, draft_begin), split_end,
                 draft_begin, st.bits, logit_scale_log2, quad_col, MLA_SPARSE ? key_ok + wg * kHalfKeys : nullptr);
  float corr[2];
  online_softmax_tile<kLazyLog2>(s, st.row_max, st.row_sum, corr,
                                 RowMaxExchange{xchg.max, wg, rt * 16 + quad_row, quad_col});
  rescale_rows(st.acc, corr);
  // P as the k16 A fragments of the four key steps: this warpgroup's two, and the other's two.
  u32 mine[kHalfKeys / 16][4], theirs[kHalfKeys / 16][4];
#pragma unroll
  for (int j = 0; j < kHalfKeys / 16; ++j) {
    mine[j][0] = pack_f32x2<false>(s[2 * j][0], s[2 * j][1]);
    mine[j][1] = pack_f32x2<false>(s[2 * j][2], s[2 * j][3]);
    mine[j][2] = pack_f32x2<false>(s[2 * j + 1][0], s[2 * j + 1][1]);
    mine[j][3] = pack_f32x2<false>(s[2 * j + 1][2], s[2 * j + 1][3]);
    reinterpret_cast<uint4*>(xchg.p + (wg * 128 + tid_wg) * 8)[j] = make_uint4(mine[j][0], mine[j][1], mine[j][2], mine[j][3]);
  }
  math_sync();
#pragma unroll
  for (int j = 0; j < kHalfKeys / 16; ++j) {
    const uint4 v = reinterpret_cast<const uint4*>(xchg.p + ((1 - wg) * 128 + tid_wg) * 8)[j];
    theirs[j][0] = v.x, theirs[j][1] = v.y, theirs[j][2] = v.z, theirs[j][3] = v.w;
  }
  // Key step kb belongs to warpgroup kb / 2 (selects on the uniform wg: no indexing by it).
  u32 pa[kTile / 16][4];
#pragma unroll
  for (int kb = 0; kb < kTile / 16; ++kb)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = kb % (kHalfKeys / 16);
      pa[kb][i] = (kb / (kHalfKeys / 16) == wg) ? mine[j][i] : theirs[j][i];
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

// Each warpgroup summed its own keys of every row: add the other's (thread t of each
// holds the same rows and columns), before the epilogue's quad sum.
// `sums`: 2 x 128 x 2 floats of shared memory free for it.
__device__ __forceinline__ void add_other_sums(RowState& st, float* sums, int wg, int tid_wg) {
  sums[(wg * 128 + tid_wg) * 2] = st.row_sum[0];
  sums[(wg * 128 + tid_wg) * 2 + 1] = st.row_sum[1];
  math_sync();
  st.row_sum[0] += sums[((1 - wg) * 128 + tid_wg) * 2];
  st.row_sum[1] += sums[((1 - wg) * 128 + tid_wg) * 2 + 1];
}

}  // namespace mla_hopper
}  // namespace xqajit
