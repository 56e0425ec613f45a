#pragma once
// Launch geometry of the portable MLA backend (mla_decode_portable.cu), plain
// constexpr C++ so the host launcher computes exactly what the kernel assumes.
//
// A CTA of 8 warps takes R = 16, 32 or 64 rows (1, 2 or 4 row tiles of the
// mma's 16 rows) and streams KV tiles of `kv_tile` latent rows through a
// cp.async pipeline. Shared memory: [stages x raw tile][bf16 tile, fp8 cache
// only][Q: R x 576 bf16][S: R x (tile + 8) fp32]. R shrinks until two stages
// fit the arch (99 KB on sm_86/89/120/121: R = 16).

#include "xqajit/mla_args.h"

constexpr int kXqajitMlaPortableThreads = 256;

constexpr int xqajit_mla_portable_smem(int rows_per_cta, int kv_tile, int cache_bytes, int stages) {
  return stages * kv_tile * XQAJIT_MLA_QK_DIM * cache_bytes +
         (cache_bytes == 1 ? kv_tile * XQAJIT_MLA_QK_DIM * 2 : 0) + rows_per_cta * XQAJIT_MLA_QK_DIM * 2 +
         rows_per_cta * (kv_tile + 8) * 4;
}

constexpr XqajitMlaGeometry xqajit_mla_portable_geometry(int heads, int q_len, int kv_tile, int cache_bytes,
                                                         int q_bytes, int arch) {
  (void)q_bytes;  // Q is staged as bf16 whatever its dtype
  XqajitMlaGeometry g{};
  g.rows = heads * q_len;
  g.threads = kXqajitMlaPortableThreads;
  const int budget = xqajit_mla_smem_budget(arch);
  int r = g.rows <= 16 ? 16 : g.rows <= 32 ? 32 : 64;
  while (r > 16 && xqajit_mla_portable_smem(r, kv_tile, cache_bytes, 2) > budget) r /= 2;
  g.rows_per_cta = r;
  g.row_blocks = (g.rows + r - 1) / r;
  // Aim for two CTAs per SM (half the budget) with 2-4 stages; else one CTA with 2.
  int stages = 4;
  while (stages > 2 && xqajit_mla_portable_smem(r, kv_tile, cache_bytes, stages) > budget / 2) --stages;
  g.stages = xqajit_mla_portable_smem(r, kv_tile, cache_bytes, stages) <= budget ? stages : 0;
  g.smem_bytes = xqajit_mla_portable_smem(r, kv_tile, cache_bytes, stages);
  g.merge_bytes = g.smem_bytes;
  return g;
}
