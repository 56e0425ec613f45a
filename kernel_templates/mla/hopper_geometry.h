#pragma once
// Launch geometry of the hopper MLA backend (mla_decode_hopper.cu, sm_90a
// wgmma), plain constexpr C++ so the host launcher computes exactly what the
// kernel assumes.
//
// A CTA = two warpgroups (256 threads) on one 64-row tile (the wgmma M); rows
// past q_len * H, or past a sparse CTA's one query token (row_stride, below), are zero
// padding (computed, never stored). Warpgroup w computes
// S = Q K^T for keys 32w..32w+31 of each tile (m4: until session 19 both computed
// all 64, twice the S work), the two exchange each row's max and their halves of P
// through shared memory, and each accumulates O for 256 of the 512 output dims
// (128 fp32 registers) over all 64 keys. A CTA of 16 real rows (H=16 at q_len 1, or a
// sparse token's 16 heads) computes the transposed products on the same map instead
// (mla/hopper_narrow.cuh), its P^T in Q's zero padding rows.
// KV tiles of 64 keys (four k16 steps of P V); 2 stages (1 for fp8ds rows).
// Shared memory (1024-aligned base, +1024 slack for the alignment):
//   [Q: 64 x 576 bf16][stages x raw tile][bf16 tile, fp8 caches only][exchange or seesaw state]
// or, warp-specialized (a producer warpgroup, below):
//   [Q: 64 x 576 bf16][2 x bf16 tile][exchange]
// every bf16 block stored as 128-byte-swizzled [9 column blocks][rows][128 B]; the
// exchange holds each warpgroup's row maxima (2 x 64 floats) and P halves (2 x 64 x 32 bf16).

#include "xqajit/mla_args.h"

constexpr int kXqajitMlaHopperThreads = 256;
constexpr int kXqajitMlaHopperRows = 64;
// A bf16 cache paged by a block table sends its tiles by TMA (one thread issues
// 64-column boxes of whole pages, src/ops/mla_decode.cpp encodes the map); gathered
// rows (sparse: a slot per key) and fp8 rows arrive by cp.async, and an fp8 raw tile
// is converted to bf16 in shared memory.
constexpr int kXqajitMlaHopperBoxCols = 64;  // one 128-byte swizzle row of bf16
constexpr int kXqajitMlaHopperBoxBytes = 128;
constexpr bool xqajit_mla_hopper_tma(int cache_bytes, int sparse) { return cache_bytes == 2 && !sparse; }

// Sparse lists are a query token's, so a CTA's rows must be one token's heads: whole 64-head
// blocks (H >= 64), or below 64 heads one token's heads padded into the 64-row tile -- all of
// a request's rows at q_len 1, a CTA per token beyond (DeepSeek-V3.2's MTP at 8-way tensor
// parallelism: H=16, q_len 2). `row_stride`: rows from one row block's first to the next's.
constexpr int xqajit_mla_hopper_row_stride(int heads, int q_len, int sparse) {
  return sparse && heads < kXqajitMlaHopperRows && q_len > 1 ? heads : kXqajitMlaHopperRows;
}
// The real rows of a CTA (of the first row block): what picks its schedule.
constexpr int xqajit_mla_hopper_cta_rows(int heads, int q_len, int sparse) {
  return heads * q_len < xqajit_mla_hopper_row_stride(heads, q_len, sparse)
             ? heads * q_len
             : xqajit_mla_hopper_row_stride(heads, q_len, sparse);
}

// An fp8 Q over a plain fp8 cache (per-tensor scales) with 32 rows or more runs on the fp8
// tensor cores (m35, mla/hopper_qgmma.cuh): S = Q K^T and O^T += V^T P^T as e4m3 wgmmas, the
// raw tiles by TMA (boxes of 128 bytes), nothing converted but P. m35 took two row blocks or
// more (H=128); m37 every CTA of 32 rows or more (H=32/64, H=16 at q_len >= 2), whose per-tile
// conversion path ran ~2 x slower; m43 16 rows too (below). A bf16 Q over the same
// cache runs there too (m39): Q and P are each split into two e4m3 planes (hi + lo, ~bf16's
// precision), so both products take twice the fp8 steps, the bf16 rate, and still nothing of
// the cache is converted. Short splits (fewer than 8 tiles for an fp8 Q, 8 or fewer for a
// split one: kQgMinTiles) run the per-tile schedule with its bf16 conversion instead (m38: the
// seesaw's fixed cost a split made B=1 slower), so the CTA's shared memory holds either map.
// The QGMMA map:
//   [Q: planes x 5 x 64 x 128 B][buffers x tile: 5 x 64 x 128 B][3 x P: 64 x 128 B]
//   [row max, 2 scales (, Q's row scales)]
// (576 bytes a row in five 128-byte column blocks, the last half zeros; a P row is 64 keys,
// or P hi then P lo). An fp8 Q has one plane and four tile buffers (tiles a + 4, a + 5 in
// flight under a step's two, m35b); a split Q two planes, which leave room for three.
// 16 rows (H=16 at q_len 1) run the narrow schedule on the same map, every split (m42-m45,
// mla/hopper_narrow_qg.cuh): S^T = K Q^T with the raw tile as A, so a split Q's lo plane
// sits in rows 16-31 of the one plane, which leaves room for four tile buffers, two for
// each warpgroup's own tiles.
// A dense fp8ds cache (DeepSeek-V3.2's 656-byte rows) at 16 rows runs the same narrow schedule
// (m51, mla/hopper_narrow_qg_ds.cuh): its four 128-value latent groups land as the plain
// row's four latent boxes, its bf16 rope as the fifth (bytes 528-655), and each group's scale
// weighs that group's S^T and P^T (a bf16 Q: fp8ds takes no fp8 Q). Sparse fp8ds at 16 rows
// (H=16, DeepSeek-V3.2 sharded over 8 GPUs) runs it too, its rows gathered by cp.async into
// the same boxes (m53: no tensor map, every slot its own row).
constexpr int kXqajitMlaHopperQ8Blocks = 5;
constexpr bool xqajit_mla_hopper_qgmma(int heads, int q_len, int row_bytes, int q_bytes, int sparse) {
  if (row_bytes == XQAJIT_MLA_FP8DS_ROW_BYTES)
    return q_bytes == 2 && xqajit_mla_hopper_cta_rows(heads, q_len, sparse) == 16;
  return (q_bytes == 1 || q_bytes == 2) && row_bytes == XQAJIT_MLA_QK_DIM && !sparse && heads * q_len >= 16;
}
constexpr int xqajit_mla_hopper_qgmma_planes(int q_bytes, int rows) { return rows == 16 ? 1 : q_bytes; }
constexpr int xqajit_mla_hopper_qgmma_buffers(int q_bytes, int rows) { return rows == 16 || q_bytes == 1 ? 4 : 3; }
// Per-row floats after the P: row max, scale0, scale1, and a split Q's 2^-e.
constexpr int xqajit_mla_hopper_qgmma_row_stats(int q_bytes) { return q_bytes == 1 ? 3 : 4; }
constexpr int xqajit_mla_hopper_qgmma_smem(int kv_tile, int q_bytes, int rows) {
  return 1024 +
         kXqajitMlaHopperQ8Blocks * 128 *
             (xqajit_mla_hopper_qgmma_planes(q_bytes, rows) * kXqajitMlaHopperRows +
              xqajit_mla_hopper_qgmma_buffers(q_bytes, rows) * kv_tile) +
         3 * kXqajitMlaHopperRows * 128 + xqajit_mla_hopper_qgmma_row_stats(q_bytes) * kXqajitMlaHopperRows * 4;
}
// Whether the host encodes the cache's tensor map (boxes of 128 bytes x a page's rows; gathered
// rows take none).
constexpr bool xqajit_mla_hopper_kv_map(int heads, int q_len, int row_bytes, int q_bytes, int sparse) {
  return !sparse && (xqajit_mla_hopper_tma(row_bytes == XQAJIT_MLA_QK_DIM * 2 ? 2 : 1, sparse) ||
                     xqajit_mla_hopper_qgmma(heads, q_len, row_bytes, q_bytes, sparse));
}

// The balanced plan (m77, mla/balanced_plan.h): the seesaw specs (a bf16 cache by TMA at two
// row blocks or more, the compute-bound MLA), where one split a request would leave SMs idle or
// a ragged batch would wait for its longest request, run walkers over the batch's tiles laid
// end to end, or a CTA a request, the longest first: grid (row blocks, walkers + batch). Every
// CTA lays the batch out in its tile buffers first, ranking each request against every other
// (O(B^2 / threads) where lengths differ), so a batch of at most kXqajitMlaBalancedMaxBatch, the
// largest measured (B=256 ragged: 310-327 us against one split's 334, session 42 runs 1-2;
// past it, more CTAs an SM balance by themselves and each pays more ranks); larger ones keep the
// one-split grid.
constexpr bool xqajit_mla_hopper_balanced(int heads, int q_len, int cache_bytes, int sparse) {
  return xqajit_mla_hopper_tma(cache_bytes, sparse) && heads * q_len >= 2 * kXqajitMlaHopperRows;
}
constexpr int kXqajitMlaBalancedMaxBatch = 256;
// A split of more tiles than this runs the seesaw (bf16, two row blocks or more; mla/hopper_config.cuh).
constexpr int kXqajitMlaSeesawMinTiles = 8;
// The shares of a small batch (m84, mla/balanced_plan.h): a warp plans them, a lane a request.
constexpr int kXqajitMlaSharesMaxBatch = 32;
constexpr int kXqajitMlaSharesMaxTiles = 1 << 25;  // a request's, so that 64 x its tiles fit 32 bits

// Sparse rows of an fp8 cache, and sparse specs whose token has two 64-head blocks (H=128),
// run warp-specialized (m20, m21: mla/hopper_producer.cuh): a third warpgroup gathers and
// converts rows into two bf16 tile buffers while the two math warpgroups compute on the other,
// split by role (m54, mla/hopper_split_pv.cuh; 16 rows: the narrow schedule). The two row
// blocks of an H=128 token are launched as one cluster (grid.y) and share the gather
// ("crossover", as FlashMLA's sparse decode does): each CTA's producer fills half of every
// tile's keys into its own buffer and copies it into the peer's (DSMEM bulk copies, m56). (Not the sparse
// specs the QGMMA map takes: their math warpgroups gather their own fp8 rows, m53.)
constexpr int kXqajitMlaHopperProducerThreads = 128;
constexpr int xqajit_mla_hopper_row_cluster(int heads, int sparse) {
  return sparse && heads >= 2 * kXqajitMlaHopperRows ? 2 : 1;
}
constexpr bool xqajit_mla_hopper_producer(int heads, int q_len, int row_bytes, int q_bytes, int sparse) {
  return sparse && !xqajit_mla_hopper_qgmma(heads, q_len, row_bytes, q_bytes, sparse) &&
         (row_bytes != XQAJIT_MLA_QK_DIM * 2 || xqajit_mla_hopper_row_cluster(heads, sparse) > 1);
}

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

// `row_bytes`: one cached row as it lands (xqajit_mla_row_bytes): 1152 (bf16), 576
// (fp8) or 656 (fp8 with scales); any but bf16 is converted into a bf16 tile on this map
// (the QGMMA map reads fp8 and fp8ds rows as they land).
constexpr int xqajit_mla_hopper_smem(int kv_tile, int row_bytes, int sparse, int stages, int producer) {
  const bool bf16_rows = row_bytes == XQAJIT_MLA_QK_DIM * 2;
  if (producer)
    return 1024 + kXqajitMlaHopperRows * XQAJIT_MLA_QK_DIM * 2 + 2 * kv_tile * XQAJIT_MLA_QK_DIM * 2 +
           xqajit_mla_hopper_exchange_bytes(kv_tile);
  return 1024 + kXqajitMlaHopperRows * XQAJIT_MLA_QK_DIM * 2 +
         stages * kv_tile * row_bytes + (bf16_rows ? 0 : kv_tile * XQAJIT_MLA_QK_DIM * 2) +
         (xqajit_mla_hopper_tma(bf16_rows ? 2 : 1, sparse) ? xqajit_mla_hopper_seesaw_bytes(kv_tile)
                                                           : xqajit_mla_hopper_exchange_bytes(kv_tile));
}

// g.stages: raw tile stages, 2 (tile i + 1 in flight under tile i), or 1 where two do not
// fit beside Q and the bf16 tile (the dense fp8ds cache's 656-byte rows: the next tile's
// copies then start once this tile is converted, still under its math); 0 where the spec
// does not fit the backend. Warp-specialized specs (g.threads 384) have two bf16 tile
// buffers, no raw stage.
constexpr XqajitMlaGeometry xqajit_mla_hopper_geometry(int heads, int q_len, int kv_tile, int row_bytes,
                                                       int q_bytes, int arch, int sparse) {
  const int producer = xqajit_mla_hopper_producer(heads, q_len, row_bytes, q_bytes, sparse) ? 1 : 0;
  XqajitMlaGeometry g{};
  g.rows = heads * q_len;
  g.threads = kXqajitMlaHopperThreads + (producer ? kXqajitMlaHopperProducerThreads : 0);
  g.rows_per_cta = kXqajitMlaHopperRows;
  g.row_stride = xqajit_mla_hopper_row_stride(heads, q_len, sparse);
  g.row_blocks = (g.rows + g.row_stride - 1) / g.row_stride;
  // Only kv_tile 64 is built (S is m64n64); sm_90 only (wgmma).
  const bool builds = kv_tile == 64 && arch == 90;
  const int budget = xqajit_mla_smem_budget(arch);
  // The producer's two buffers are bf16 tiles: the tile i + 1 in flight under tile i.
  const int stages = producer || xqajit_mla_hopper_smem(kv_tile, row_bytes, sparse, 2, 0) <= budget ? 2 : 1;
  g.smem_bytes = xqajit_mla_hopper_smem(kv_tile, row_bytes, sparse, stages, producer);
  const int cta_rows = xqajit_mla_hopper_cta_rows(heads, q_len, sparse);
  const int qgmma_smem = xqajit_mla_hopper_qgmma_smem(kv_tile, q_bytes, cta_rows);
  if (xqajit_mla_hopper_qgmma(heads, q_len, row_bytes, q_bytes, sparse) && qgmma_smem > g.smem_bytes)
    g.smem_bytes = qgmma_smem;  // either schedule's map fits
  g.stages = builds && g.smem_bytes <= budget ? stages : 0;
  g.merge_bytes = g.smem_bytes - 1024;
  return g;
}
