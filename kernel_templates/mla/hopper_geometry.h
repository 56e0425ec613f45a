#pragma once
// Launch geometry of the hopper MLA backend (mla_decode_hopper.cu, sm_90a
// wgmma), plain constexpr C++ so the host launcher computes exactly what the
// kernel assumes.
//
// A CTA = two warpgroups (256 threads) on one 64-row tile (the wgmma M); rows
// past q_len * H are zero padding (computed, never stored). Warpgroup w computes
// S = Q K^T for keys 32w..32w+31 of each tile (m4: until session 19 both computed
// all 64, twice the S work), the two exchange each row's max and their halves of P
// through shared memory, and each accumulates O for 256 of the 512 output dims
// (128 fp32 registers) over all 64 keys.
// KV tiles of 64 keys (four k16 steps of P V); 2 cp.async stages.
// Shared memory (1024-aligned base, +1024 slack for the alignment):
//   [Q: 64 x 576 bf16][stages x raw tile][bf16 tile, fp8 cache only][exchange]
// every bf16 block stored as 128-byte-swizzled [9 column blocks][rows][128 B]; the
// exchange holds each warpgroup's row maxima (2 x 64 floats) and P halves (2 x 64 x 32 bf16).

#include "xqajit/mla_args.h"

constexpr int kXqajitMlaHopperThreads = 256;
constexpr int kXqajitMlaHopperRows = 64;
// A bf16 cache's tiles arrive by TMA (one thread issues 64-column boxes of whole
// pages, src/ops/mla_decode.cpp encodes the map), an fp8 cache's by cp.async (its
// raw tile is converted to bf16 in shared memory).
constexpr int kXqajitMlaHopperBoxCols = 64;  // one 128-byte swizzle row of bf16
constexpr bool xqajit_mla_hopper_tma(int cache_bytes) { return cache_bytes == 2; }

// Bytes the two warpgroups exchange per tile: row maxima, then P halves.
constexpr int xqajit_mla_hopper_exchange_bytes(int kv_tile) {
  return 2 * kXqajitMlaHopperRows * 4 + kXqajitMlaHopperRows * kv_tile * 2;
}

// The seesaw's shared state (bf16 cache, mla/hopper_seesaw.cuh): warpgroup 0's P
// (64 rows x kv_tile bf16; warpgroup 1's P goes where Q's rope block was), then the
// running row max and the two rescale factors, 64 floats each.
constexpr int xqajit_mla_hopper_seesaw_bytes(int kv_tile) {
  return kXqajitMlaHopperRows * kv_tile * 2 + 3 * kXqajitMlaHopperRows * 4;
}

constexpr int xqajit_mla_hopper_smem(int kv_tile, int cache_bytes, int stages) {
  return 1024 + kXqajitMlaHopperRows * XQAJIT_MLA_QK_DIM * 2 + stages * kv_tile * XQAJIT_MLA_QK_DIM * cache_bytes +
         (cache_bytes == 1 ? kv_tile * XQAJIT_MLA_QK_DIM * 2 + xqajit_mla_hopper_exchange_bytes(kv_tile)
                           : xqajit_mla_hopper_seesaw_bytes(kv_tile));
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
