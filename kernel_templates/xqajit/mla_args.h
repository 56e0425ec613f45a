#pragma once
// THE FULL KERNEL CONTRACT (semantics, flags, split-KV, device rules for kernel authors): docs/MLA_KERNEL_CONTRACT.md
// The ABI between the host launcher (src/ops/mla_decode.cpp) and the MLA decode
// kernels (mla_decode_portable.cu, mla_decode_hopper.cu): one by-value struct
// that both backends take (the hopper kernel takes a second parameter, the cache's
// tensor map: xqajit/tensor_map.h), plus the geometry struct each backend fills with its
// own constexpr function (mla/portable_geometry.h, mla/hopper_geometry.h). Host
// and kernel include the same files, so the block size and shared memory the
// host asks for are the ones the kernel was built for. Builtin types only.
//
// Rows: one request's (query token, head) pairs, token-major: row r is token
// r / H, head r % H (H = HEAD_GRP_SIZE), q_len * H rows in all. A CTA takes
// rows_per_cta of them (a row block) and one split of the sequence:
//   grid = (num_splits, row_blocks, batch),
// or, where the host plans it for a hopper seesaw spec (balanced_parts > 0, m77), pieces of
// the requests' tiles laid end to end (mla/balanced_plan.h):
//   grid = (row_blocks, balanced_parts + batch, 1).
//
// Split-KV workspace (the same contract as GQA, common/split_merge.cuh):
//   counters [batch * row_blocks] unsigned, padded to 256 bytes, zeroed once,
//            self-resetting;
//   acc      [batch * row_blocks][num_splits][rows_per_cta][512] float;
//   stats    [batch * row_blocks][num_splits][rows_per_cta][2] float (max in
//            log2 units, sum).
// The balanced plan's workspace: counters [batch * row_blocks] as above, then acc and stats
// over [row_blocks][2 * balanced_parts] slots (a cut request's pieces in adjacent slots),
// its partial rows bf16 as the merge launch's are.
// The merge is the last CTA's, or with merge_launch a second kernel's
// (xqajit_mla_merge, in the same module); the counters stay zero then. The hopper
// module's merge-launch partials are bf16 (m70): [..][num_splits][rows_per_cta][512]
// bf16 from acc's base, in the first half of the fp32 space (the size stays the same).

#define XQAJIT_MLA_QK_DIM 576  // 512 latent ("nope") + 64 rope
#define XQAJIT_MLA_V_DIM 512   // V is the first 512 of each cached row
// The DeepSeek-V3.2 "fp8 with scales" cache row (kv=fp8ds, FlashMLA's is_fp8_kvcache): bytes
// [0, 512) the latent as e4m3, [512, 528) four float32 scales (scale g multiplies latent values
// 128 g .. 128 g + 127), [528, 656) the 64 rope values as bf16 (unquantised). Strides of such a
// cache count bytes.
#define XQAJIT_MLA_FP8DS_ROW_BYTES 656
#define XQAJIT_MLA_FP8DS_GROUP 128
// Bytes of one cached row: `cache_bytes` per value (2 bf16, 1 fp8), or the fp8ds row.
constexpr int xqajit_mla_row_bytes(int cache_bytes, int fp8ds) {
  return fp8ds ? XQAJIT_MLA_FP8DS_ROW_BYTES : XQAJIT_MLA_QK_DIM * cache_bytes;
}

struct XqajitMlaArgs {
  const void* q;              // [B, q_len, H, 576], bf16 or fp8 e4m3
  void* out;                  // [B, q_len, H, 512], bf16
  const void* kv_cache;       // [num_pages, page_size, 576], bf16 or fp8 e4m3; or [.., 656] bytes (fp8ds)
  const int* block_table;     // [B, block_table_stride] page indices
  const int* seq_lens;        // [B] keys per request (0 = padding slot: zeros out)
  // [B, q_len, 1] packed bits (LSB first) over the last q_len keys, or null:
  // null means causal (query token t sees draft keys 0..t).
  const unsigned* spec_mask;
  // A non-null pointer wins over the host value next to it.
  const float* q_scale_ptr;
  const float* kv_scale_ptr;
  float q_scale;              // fp8 Q dequantisation (1 for bf16 Q)
  float kv_scale;             // fp8 cache dequantisation (1 for a bf16 cache)
  float sm_scale;             // softmax scale, e.g. 1/sqrt(192) for DeepSeek-V3
  // > 0: the balanced plan (hopper seesaw specs, mla/balanced_plan.h): grid
  // (row_blocks, balanced_parts + batch, 1), balanced_parts walkers over the batch's tiles laid
  // end to end; the workspace's partial slots are [row_blocks][2 * balanced_parts]. With
  // merge_launch: a small batch's shares (m84), grid (row_blocks, balanced_parts, 1), a piece
  // of a request a CTA, in the same slots.
  int balanced_parts;
  float* partial;             // split-KV workspace after the counters (null when num_splits == 1)
  unsigned* counters;         // one self-resetting counter per (request, row block)
  long long q_stride_batch, q_stride_token, q_stride_head;
  long long o_stride_batch, o_stride_token, o_stride_head;
  long long kv_stride_page, kv_stride_token;  // elements of the cache type (bytes for fp8ds)
  int block_table_stride;     // elements between rows of block_table
  int max_pages_per_seq;      // seq_lens are clamped to max_pages_per_seq * page size
  int batch;
  int num_splits;             // CTAs per (request, row block) along the sequence
  int split_tokens;           // keys per split, a multiple of KV_TILE_TOKENS
  // 1: splits store their partials and stop; a second launch (xqajit_mla_merge,
  // grid (rows_per_cta, row_blocks, batch), 512 threads) merges them, one CTA a
  // row. 0: the last CTA of each (request, row block) merges alone.
  int merge_launch;

  // --- Sparse MLA (DSA; kernels built with MLA_SPARSE=1 read these, block_table and
  // seq_lens are null then). Key k of query token t of request b is cache slot
  // s = indices[b * indices_stride_batch + t * indices_stride_token + k], k < n where
  // n = topk_length ? clamp(topk_length[b], 0, topk) : topk; the slot is row s % page size
  // of page s / page size, and one outside [0, num_slots) (-1) is skipped, never read.
  // Splits cover key positions k, as they cover sequence positions in dense MLA.
  const int* indices;
  const int* topk_length;     // [B] or null
  long long indices_stride_batch, indices_stride_token;
  int topk;
  int num_slots;              // num_pages * page size: the slots the cache holds

  // --- Optional outputs of every MLA kernel (null: none) ---
  // lse [b, t, h] = ln(sum_j exp(logit_j)) over the row's visible keys (logits scaled as
  // above), +inf for a row that saw none (FlashMLA's definition). attn_sink [h]: the output
  // row is scaled by exp(lse) / (exp(lse) + exp(attn_sink[h])) (lse itself unchanged).
  float* lse;
  const float* attn_sink;
  long long lse_stride_batch, lse_stride_token, lse_stride_head;
};

// How one backend maps a spec onto CTAs.
struct XqajitMlaGeometry {
  int rows;             // q_len * H
  int rows_per_cta;     // rows of one CTA (padding rows past `rows` are computed, never stored)
  int row_stride;       // request rows from one row block to the next: rows_per_cta, or fewer
                        // where a CTA's last rows are padding (hopper: a token's heads, sparse)
  int row_blocks;       // CTAs along the rows of one request
  int threads;
  int stages;           // KV pipeline depth (0: does not fit this arch's shared memory)
  int smem_bytes;       // dynamic shared memory the launch asks for
  int merge_bytes;      // bytes of the reusable region the split merge may use (>= 16)
};

// Splits the hopper plan launches as one thread-block cluster (MlaDecodePlan::split_cluster):
// the kernel's cluster merge reads this many peers' rows. Two: clusters of 4 and 8 over a
// full GPU wait for that many free SMs of one GPC (session 22 run 7).
constexpr int kXqajitMlaClusterSplits = 2;

// xqajit_mla_merge's block (the second launch that merges wide splits, merge_launch):
// a thread per 4 of the 512 output dims, times 1-4 split groups, one per 16 splits.
// Four groups keep four times the loads in flight (H100, session 18 run 2, 64 splits:
// portable H=128 B=1 L=8192 51.1 -> 43.7 us); at 2 splits idle groups made the merge's
// 4096 CTAs slower (H=128 B=32 L=4096 200 -> 217 us).
constexpr int kXqajitMlaMergeMaxGroups = 4;
constexpr int xqajit_mla_merge_threads(int num_splits) {
  const int groups = num_splits / 16;
  return XQAJIT_MLA_V_DIM / 4 *
         (groups < 1 ? 1 : groups < kXqajitMlaMergeMaxGroups ? groups : kXqajitMlaMergeMaxGroups);
}

// xqajit_mla_merge_rows (hopper, m92): where every row has at most kXqajitMlaMergeRowsMaxSplits
// splits, a merge CTA of 4 x 128 threads takes 16 rows, not one: at two splits a row a CTA was
// 4096 CTAs at H=128 B=32 L=4096 (~9.5 us of launch on its own, session 45 run 3).
constexpr int kXqajitMlaMergeRows = XQAJIT_MLA_V_DIM / 32;
constexpr int kXqajitMlaMergeRowsThreads = XQAJIT_MLA_V_DIM;
constexpr int kXqajitMlaMergeRowsMaxSplits = 4;

// Per-block shared-memory opt-in limit by arch number (e.g. 90).
constexpr int xqajit_mla_smem_budget(int arch) {
  return (arch == 80 || arch == 87) ? 166912
         : (arch == 86 || arch == 89 || arch == 120 || arch == 121) ? 101376
                                                                      : 232448;
}
