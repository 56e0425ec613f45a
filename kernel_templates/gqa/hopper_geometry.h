#pragma once
// Launch geometry of the hopper GQA backend (gqa_decode_hopper.cu, sm_90a
// wgmma), plain constexpr C++ so the host launcher computes exactly what the
// kernel assumes.
//
// The swapped product: S^T = K Q^T puts the keys on wgmma's M side (64 per
// instruction) and the CTA's query rows (q_len x group pairs of one KV head) on
// its N side, padded to 8/16/32/64, so a group of 4 costs 8 columns instead of a
// 64-row tile. One warpgroup (128 threads) per CTA; O^T = V^T P^T keeps the
// head dims on M. Rows past N go to more row blocks (grid.y); the spec's cta_rows
// can ask for a smaller N, so that a small batch's rows fill more SMs (h43).
//
// Shared memory (1024-aligned base, +1024 slack for the alignment), every
// 16-bit operand in 128-byte-swizzled atoms [64-column block][rows][128 B]:
//   [Q: N x D][P: N x kv_tile][max/sum exchange: 4 warps x N floats]
//   [stages x K+V tile: 16-bit in the wgmma layout, fp8 raw [key][D] bytes]
// The pipeline region doubles as the merge buffer at the end.

#include "xqajit/decode_args.h"

constexpr int kXqajitGqaHopperThreads = 128;

// Query rows per CTA (the wgmma N): rows padded to a power of two >= 8, at most
// 64 (32 for head_dim 256: the O^T accumulators are D/64 x N/2 registers).
constexpr int xqajit_gqa_hopper_n(int rows, int head_dim) {
  const int cap = head_dim > 128 ? 32 : 64;
  int n = 8;
  while (n < rows && n < cap) n *= 2;
  return n;
}

// `cta_rows`: the spec's N (8, 16, 32 or 64, at most the default), 0 = the default.
constexpr XqajitDecodeGeometry xqajit_gqa_hopper_geometry(int head_dim, int group, int q_len, int kv_tile,
                                                          int cache_bytes, int arch, int cta_rows) {
  XqajitDecodeGeometry g{};
  g.rows = q_len * group;
  const int n = xqajit_gqa_hopper_n(g.rows, head_dim);
  g.rows_per_cta = cta_rows > 0 && cta_rows < n ? cta_rows : n;
  g.row_blocks = (g.rows + g.rows_per_cta - 1) / g.rows_per_cta;
  g.warp_rows = 1;
  g.warp_kv = 4;
  g.warps = 4;
  g.threads = kXqajitGqaHopperThreads;
  g.stage_bytes = 2 * kv_tile * head_dim * cache_bytes;
  g.convert_bytes = 0;  // fp8 operands are built in registers from the raw tile
  // Q, P and the exchange, rounded up so the pipeline stays 1024-aligned.
  g.q_bytes = (g.rows_per_cta * head_dim * 2 + g.rows_per_cta * kv_tile * 2 + 4 * g.rows_per_cta * 4 + 1023) / 1024 * 1024;
  const int merge_bytes = g.rows_per_cta * (head_dim + 4) * 4 + g.rows_per_cta * 2 * 4;
  const int budget = xqajit_smem_budget(arch);
  const int fixed = 1024 + g.q_bytes;
  // CTAs per SM: each CTA is one warpgroup whose per-tile chain (wgmma, the column
  // max across warps, P, wgmma) is latency-bound, so more CTAs hide it; a 16-bit
  // tile carries twice the bytes per chain and wants deeper stages instead
  // (H200, same-run A/B, docs/KERNEL_NOTES.md h3: fp8 at 4 CTAs/SM x 3 stages
  // 162 -> 132 us at 64x4096; bf16 at 2 stages 239 -> 305 us). A 128-key fp8 tile
  // carries a 16-bit tile's bytes and takes its rule: 2 CTAs x 3 stages, where the
  // shared memory would give 3 x 2 (64x4096 167 -> 131 us, 128x8192 541 -> 515; h8),
  // and so does a 64-key tile at head_dim 256 (D=256 B=32 68.6 -> 66.9 us; h21).
  // 2 to 4 stages.
  const int ctas_per_sm = cache_bytes == 1 && kv_tile == 64 && head_dim <= 128 ? 4 : 2;
  int stages = (budget / ctas_per_sm - fixed) / g.stage_bytes;
  stages = xqajit_max_(2, xqajit_min_(4, stages));
  g.union_bytes = xqajit_max_(stages * g.stage_bytes, merge_bytes);
  g.smem_bytes = 1024 + g.q_bytes + g.union_bytes;
  const bool built = arch == 90 && (kv_tile == 64 || kv_tile == 128) && (head_dim == 64 || head_dim == 128 || head_dim == 256);
  g.stages = built && g.smem_bytes <= budget ? stages : 0;
  g.ctas_per_sm = ctas_per_sm;
  return g;
}

// Where the hopper kernel lets the next grid launch (griddepcontrol.launch_dependents):
// for one query token and tiles of at most two pages, once every CTA has issued its last
// tile's loads, so the next grid's CTAs arrive near this grid's end even where they fit
// beside it, and their L2 warm-up is not evicted by this grid's stream (docs/KERNEL_NOTES.md
// h35: B=1 L=8192 -0.3 us); at the top otherwise: late, 16-token pages lost 0.3-0.6 us
// (their first tile's page walk is more of the next grid's start than it can hide), and
// speculative decoding, measured only at one split, ran 0.4 % slower with the trigger in
// its loop. The host warms L2 for such grids (DecodePlan::l2_warmup).
constexpr bool xqajit_gqa_hopper_late_trigger(int page_size, int kv_tile, int q_len) {
  return q_len == 1 && kv_tile <= 2 * page_size;
}
