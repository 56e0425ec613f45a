#pragma once
// Launch geometry of the hopper MLA backend (mla_decode_hopper.cu, sm_90a
// wgmma), plain constexpr C++ so the host launcher computes exactly what the
// kernel assumes.
//
// A CTA = two warpgroups (256 threads) on one 64-row tile (the wgmma M); rows
// past q_len * H are zero padding (computed, never stored). Both warpgroups
// compute S = Q K^T for all 64 rows (v1: redundant, keeps the softmax local),
// each accumulates O for 256 of the 512 output dims (128 fp32 registers).
// KV tiles of 64 keys (the n64 of S, four k16 steps of P V); 2 cp.async stages.
// Shared memory (1024-aligned base, +1024 slack for the alignment):
//   [Q: 64 x 576 bf16][stages x raw tile][bf16 tile, fp8 cache only]
// every bf16 block stored as 128-byte-swizzled [9 column blocks][rows][128 B].

#include "xqajit/mla_args.h"

constexpr int kXqajitMlaHopperThreads = 256;
constexpr int kXqajitMlaHopperRows = 64;

constexpr int xqajit_mla_hopper_smem(int kv_tile, int cache_bytes, int stages) {
  return 1024 + kXqajitMlaHopperRows * XQAJIT_MLA_QK_DIM * 2 + stages * kv_tile * XQAJIT_MLA_QK_DIM * cache_bytes +
         (cache_bytes == 1 ? kv_tile * XQAJIT_MLA_QK_DIM * 2 : 0);
}

constexpr XqajitMlaGeometry xqajit_mla_hopper_geometry(int heads, int q_len, int kv_tile, int cache_bytes,
                                                       int q_bytes, int arch) {
  (void)q_bytes;  // Q is staged as bf16 whatever its dtype
  XqajitMlaGeometry g{};
  g.rows = heads * q_len;
  g.threads = kXqajitMlaHopperThreads;
  g.rows_per_cta = kXqajitMlaHopperRows;
  g.row_blocks = (g.rows + kXqajitMlaHopperRows - 1) / kXqajitMlaHopperRows;
  const int stages = 2;
  g.smem_bytes = xqajit_mla_hopper_smem(kv_tile, cache_bytes, stages);
  // Only kv_tile 64 is built (S is m64n64); sm_90 only (wgmma).
  g.stages = (kv_tile == 64 && arch == 90 && g.smem_bytes <= xqajit_mla_smem_budget(arch)) ? stages : 0;
  g.merge_bytes = g.smem_bytes - 1024;
  return g;
}
