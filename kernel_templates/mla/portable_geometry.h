#pragma once
// Launch geometry of the portable MLA backend (mla_decode_portable.cu), plain
// constexpr C++ so the host launcher computes exactly what the kernel assumes.
//
// A CTA of 8 warps takes R = 16, 32 or 64 rows (1, 2 or 4 row tiles of the
// mma's 16 rows) and streams KV tiles of `kv_tile` latent rows through a
// cp.async pipeline of `stages` tiles. Shared memory:
//   [stages x raw tile][bf16 tile(s), fp8 caches only][Q: R x 576 bf16]
//   [S: buffers x k-parts x R x (tile + 8) fp32]
// With 3+ stages the kernel overlaps (one barrier per tile): phase B of tile i
// and phase A of tile i+1 run back to back in every warp, so S (and the
// converted fp8 tile) are double-buffered. With 2 stages it runs the two
// phases behind two barriers (the 99 KB archs at kv_tile 32).
//
// The plan maximises the KV bytes in flight per SM (CTAs per SM x tiles being
// loaded while one is computed): the memory-bound H = 16 case needs ~100 KB in
// flight per SM to approach copy bandwidth.

#include "xqajit/mla_args.h"

constexpr int kXqajitMlaPortableThreads = 256;

struct XqajitMlaPortablePlan {
  int rows_per_cta;
  int k_parts;      // phase A splits the 576-long dot products into this many parts
  int stages;       // 0: nothing fits
  int ctas_per_sm;  // 1 or 2 (the kernel's __launch_bounds__ minimum)
  int smem_bytes;
};

// Phase A units are (row tile, 16 keys, k-part); k_parts fills the 8 warps.
constexpr int xqajit_mla_portable_k_parts(int rows_per_cta, int kv_tile) {
  const int base = (rows_per_cta / 16) * (kv_tile / 16);
  const int divisors[6] = {9, 6, 4, 3, 2, 1};  // of 36 k-steps
  for (int i = 0; i < 6; ++i)
    if (base * divisors[i] <= kXqajitMlaPortableThreads / 32) return divisors[i];
  return 1;
}

// `row_bytes`: one cached row as it lands (xqajit_mla_row_bytes); any but a bf16 row is
// converted into a bf16 tile.
constexpr int xqajit_mla_portable_smem(int rows_per_cta, int kv_tile, int row_bytes, int stages,
                                       int k_parts) {
  const int buffers = stages >= 3 ? 2 : 1;  // overlapped schedule: S and the bf16 tile double-buffered
  return stages * kv_tile * row_bytes +
         (row_bytes != XQAJIT_MLA_QK_DIM * 2 ? buffers * kv_tile * XQAJIT_MLA_QK_DIM * 2 : 0) +
         rows_per_cta * XQAJIT_MLA_QK_DIM * 2 + buffers * k_parts * rows_per_cta * (kv_tile + 8) * 4;
}

// Best (stages, k_parts) for one CTA limit; stages = 0 when nothing fits.
constexpr XqajitMlaPortablePlan xqajit_mla_portable_fit(int r, int kv_tile, int row_bytes, int limit,
                                                        int ctas) {
  XqajitMlaPortablePlan best{r, 1, 0, ctas, 0};
  int best_inflight = -1;
  for (int stages = 2; stages <= 8; ++stages) {
    int kp = xqajit_mla_portable_k_parts(r, kv_tile);
    while (kp > 1 && xqajit_mla_portable_smem(r, kv_tile, row_bytes, stages, kp) > limit)
      kp = kp == 9 ? 6 : kp == 6 ? 4 : kp == 4 ? 3 : kp == 3 ? 2 : 1;
    const int smem = xqajit_mla_portable_smem(r, kv_tile, row_bytes, stages, kp);
    if (smem > limit) continue;
    // Tiles in flight while one is computed (the overlapped schedule holds two resident).
    const int inflight = stages >= 3 ? stages - 2 : 1;
    if (inflight >= best_inflight) {  // ties: the overlapped schedule
      best_inflight = inflight;
      best = XqajitMlaPortablePlan{r, kp, stages, ctas, smem};
    }
  }
  return best;
}

constexpr XqajitMlaPortablePlan xqajit_mla_portable_plan(int heads, int q_len, int kv_tile, int row_bytes,
                                                         int arch) {
  const int rows = heads * q_len;
  const int budget = xqajit_mla_smem_budget(arch);
  const int tile_bytes = kv_tile * row_bytes;
  for (int r = rows <= 16 ? 16 : rows <= 32 ? 32 : 64; r >= 16; r /= 2) {
    // Two CTAs per SM when the host's planner counts two (budget / (smem + 1 KB) >= 2).
    const XqajitMlaPortablePlan two = xqajit_mla_portable_fit(r, kv_tile, row_bytes, budget / 2 - 1024, 2);
    const XqajitMlaPortablePlan one = xqajit_mla_portable_fit(r, kv_tile, row_bytes, budget, 1);
    const long long two_bytes = two.stages ? 2LL * (two.stages >= 3 ? two.stages - 2 : 1) * tile_bytes : 0;
    const long long one_bytes = one.stages ? 1LL * (one.stages >= 3 ? one.stages - 2 : 1) * tile_bytes : 0;
    if (two.stages && two_bytes >= one_bytes) return two;
    if (one.stages) return one;
  }
  return XqajitMlaPortablePlan{16, 1, 0, 1, xqajit_mla_portable_smem(16, kv_tile, row_bytes, 2, 1)};
}

// Sparse MLA (`sparse` = 1): every query token has its own index list, so a CTA's rows
// must share one token: the plan is made for one token's H rows (R <= H, and R divides H),
// and a request's row blocks are its q_len tokens' blocks in token order.
constexpr XqajitMlaGeometry xqajit_mla_portable_geometry(int heads, int q_len, int kv_tile, int row_bytes,
                                                         int q_bytes, int arch, int sparse = 0) {
  (void)q_bytes;  // Q is staged as bf16 whatever its dtype
  const XqajitMlaPortablePlan p =
      xqajit_mla_portable_plan(heads, sparse ? 1 : q_len, kv_tile, row_bytes, arch);
  XqajitMlaGeometry g{};
  g.rows = heads * q_len;
  g.threads = kXqajitMlaPortableThreads;
  g.rows_per_cta = p.rows_per_cta;
  g.row_stride = p.rows_per_cta;
  g.row_blocks = (g.rows + p.rows_per_cta - 1) / p.rows_per_cta;
  g.stages = p.stages;
  g.smem_bytes = p.smem_bytes;
  g.merge_bytes = p.smem_bytes;
  return g;
}
