#pragma once
// The ABI between the host launcher (src/decode.cpp) and the GQA decode kernel
// (gqa_decode.cu): one by-value struct, plus the launch geometry as constexpr
// functions. Both sides include THIS file, so the block size and shared-memory
// size the host asks for are, by construction, the ones the kernel was built
// for. Builtin types only: NVRTC sees no system headers.

// Runtime arguments. Strides are in elements of the tensor's own type; the last
// dimension (head_dim) of every tensor is contiguous.
struct XqajitDecodeArgs {
  const void* q;            // [B, q_len, Hq, D], input type
  void* out;                // [B, q_len, Hq, D], input type or fp8 e4m3
  const void* k_cache;      // pages of K, NHD or HND through the strides below
  const void* v_cache;      // pages of V
  const int* block_table;   // [B, max_pages_per_seq] page indices
  const int* seq_lens;      // [B] keys per request (0 = padding slot: zeros out)
  const float* sinks;       // [Hq] attention sinks (natural-log units), or null
  const unsigned* spec_mask;  // [B, q_len, mask_words] packed bits, spec-dec only
  // A non-null pointer wins over the host value next to it (graph replays can
  // then change scales without re-capturing).
  const float* q_scale_ptr;
  const float* kv_scale_ptr;
  const float* rcp_out_scale_ptr;
  float q_scale;
  float kv_scale;           // fp8 cache only; ignored for a 16-bit cache
  float rcp_out_scale;      // fp8 output only
  int window;               // sliding window in keys (SLIDING_WINDOW=1 only)
  float* partial;           // split-KV workspace (null when num_splits == 1)
  unsigned* counters;       // one self-resetting counter per (request, KV head, row block)
  long long q_stride_batch, q_stride_token, q_stride_head;
  long long o_stride_batch, o_stride_token, o_stride_head;
  long long k_stride_page, k_stride_token, k_stride_head;
  long long v_stride_page, v_stride_token, v_stride_head;
  int block_table_stride;   // elements between rows of block_table
  int max_pages_per_seq;    // seq_lens are clamped to max_pages_per_seq * page size
  int batch;
  int num_kv_heads;
  int num_splits;           // CTAs per (request, KV head, row block) along the sequence
  int split_tokens;         // keys per split, a multiple of KV_TILE_TOKENS
  int mask_words;           // ceil(q_len / 32)
  int prefetch_pages;       // pages in each cache where the plan warms L2 before
                            // griddepcontrol.wait (DecodePlan::l2_warmup), else 0
  float* lse;               // [B, q_len, Hq] natural-log log-sum-exp of each row's scaled
                            // logits (sink not included; +inf: no visible key), or null
  long long lse_stride_batch, lse_stride_token, lse_stride_head;
};

// How a spec maps onto a CTA. Rows of a CTA are (query token, head) pairs of
// one KV head, in tiles of 16 (the mma M dimension); warps split rows first,
// then the tokens of each KV tile.
struct XqajitDecodeGeometry {
  int rows;              // q_len * group: rows per KV head
  int rows_per_cta;      // warp_rows * 16
  int row_blocks;        // CTAs along the rows of one KV head
  int warp_rows;         // warps along the rows (one 16-row tile each)
  int warp_kv;           // warps along the tokens of one KV tile
  int warps;
  int threads;
  int stages;            // cp.async pipeline depth (0: does not fit)
  int stage_bytes;       // K + V of one tile, in the cache type
  int convert_bytes;     // unused (fp8 dequantises in registers): 0
  int union_bytes;       // pipeline region, reused for the warp merge at the end
  int q_bytes;
  int smem_bytes;        // dynamic shared memory the launch asks for
  int ctas_per_sm;       // CTAs per SM the pipeline is sized for (hopper: the kernel's launch bound)
};

// Per-block shared-memory opt-in limit by arch number (e.g. 90); the kernel
// sizes its pipeline to fit two CTAs per SM where it can.
constexpr int xqajit_smem_budget(int arch) {
  return (arch == 80 || arch == 87) ? 166912
         : (arch == 86 || arch == 89 || arch == 120 || arch == 121) ? 101376
                                                                      : 232448;
}

constexpr int xqajit_min_(int a, int b) { return a < b ? a : b; }
constexpr int xqajit_max_(int a, int b) { return a > b ? a : b; }

constexpr XqajitDecodeGeometry xqajit_decode_geometry(int head_dim, int group, int q_len,
                                                      int kv_tile, int cache_bytes, int arch) {
  XqajitDecodeGeometry g{};
  g.rows = q_len * group;
  const int row_tiles = (g.rows + 15) / 16;
  g.warp_rows = xqajit_min_(row_tiles, 4);
  g.rows_per_cta = g.warp_rows * 16;
  g.row_blocks = (row_tiles + g.warp_rows - 1) / g.warp_rows;
  g.warp_kv = xqajit_max_(1, xqajit_min_(4 / g.warp_rows, kv_tile / 16));
  g.warps = g.warp_rows * g.warp_kv;
  g.threads = g.warps * 32;
  g.stage_bytes = 2 * kv_tile * head_dim * cache_bytes;
  g.convert_bytes = 0;
  g.q_bytes = g.rows_per_cta * head_dim * 2;
  const int merge_bytes = g.warps * 16 * (head_dim + 2) * 4;
  const int budget = xqajit_smem_budget(arch);
  const int fixed = g.q_bytes + g.convert_bytes;
  // Aim for two CTAs per SM (half the budget), between 2 and 4 stages.
  int stages = (budget / 2 - fixed) / g.stage_bytes;
  stages = xqajit_max_(2, xqajit_min_(4, stages));
  int pipeline = stages * g.stage_bytes + g.convert_bytes;
  g.union_bytes = xqajit_max_(pipeline, merge_bytes);
  g.smem_bytes = g.union_bytes + g.q_bytes;
  g.stages = g.smem_bytes <= budget ? stages : 0;
  g.ctas_per_sm = 2;
  return g;
}

// Most splits one thread-block cluster merges (common/cluster_merge.cuh): the portable
// cluster size, and what measured faster (docs/KERNEL_NOTES.md h26, h27). The host plans
// a split cluster (DecodePlan::split_cluster) for no more.
constexpr int xqajit_max_cluster_splits = 8;

// Whether the portable kernel can merge its splits in a cluster: the CTA's merged rows
// ([row][D] and [row][max, sum] floats) fit in the pipeline region beside the warps'
// ([warp][16 rows][D + 2]) that they are merged from. The host plans a split cluster
// only where this holds (DecodePlan::split_cluster).
constexpr bool xqajit_cluster_merge_fits(XqajitDecodeGeometry g, int head_dim) {
  return (g.warps * 16 + g.rows_per_cta) * (head_dim + 2) * 4 <= g.union_bytes;
}
