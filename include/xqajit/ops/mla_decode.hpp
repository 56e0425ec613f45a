#pragma once
/// MLA decode (DeepSeek-V2/V3-style multi-head latent attention) over a paged
/// latent cache: the typed launcher.
///
///   MlaDecodeParams --mla_decode_spec()--> KernelSpec --engine--> kernel --launch on your stream
///
/// Every head reads one shared latent row per token: 576 values (512 latent +
/// 64 rope) used as K, the first 512 as V. Two backends: `hopper` (sm_90a,
/// wgmma) and `portable` (mma.sync, sm_80+); backend=auto picks by the arch.
/// Like decode(), mla_decode() checks every argument first (ArgumentError
/// naming the field), then launches with no host sync, no allocation and, once
/// the kernel is loaded, no compile: the whole call can sit inside a captured
/// CUDA graph (lengths and scales are read on the device).

#include <cstddef>
#include <cstdint>

#include "xqajit/runtime/driver.hpp"
#include "xqajit/ops/launch_plan.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/spec/spec.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit {

/// Everything one MLA decode launch reads: the tensors, shapes and scales below, and the
/// launch knobs (LaunchKnobs: backend, kv_tile, num_splits, workspace, PDL).
struct MlaDecodeParams : LaunchKnobs {
  // --- tensors (device pointers, 16-byte aligned) ---
  const void* q = nullptr;         ///< [batch, q_len, num_heads, 576], `input` dtype
  void* out = nullptr;             ///< [batch, q_len, num_heads, 512], bf16
  /// [num_pages, page_size, 576] latent rows, `kv` dtype; kv=fp8ds: [num_pages, page_size, 656]
  /// bytes (DeepSeek-V3.2's rows: 512 e4m3, 4 float32 scales, 64 bf16 rope; strides in bytes)
  const void* kv_cache = nullptr;
  const std::int32_t* block_table = nullptr;  ///< [batch, block_table_stride] page indices (dense; null when sparse)
  const std::int32_t* seq_lens = nullptr;     ///< [batch] keys per request (incl. the q_len new ones); 0 gives zeros
  /// [batch, q_len] packed bits (LSB first) over the last q_len keys; null with
  /// q_len > 1 means causal (token t sees drafts 0..t).
  const std::uint32_t* spec_mask = nullptr;

  // --- sparse MLA (DSA, DeepSeek-V3.2): set `indices` and leave block_table, seq_lens and
  // spec_mask null. Each query token attends to the cache slots of its own index list.
  /// [batch, q_len, topk] slots `page * page_size + offset`; -1 (any slot outside
  /// [0, num_pages * page_size)) is skipped and never read. Needs num_pages > 0.
  const std::int32_t* indices = nullptr;
  /// [batch] or null: only the first topk_length[b] entries of request b's lists count
  /// (clamped to [0, topk]). A row with no valid entry gives zeros (lse +inf).
  const std::int32_t* topk_length = nullptr;
  int topk = 0;  ///< entries per index list (1 to 2^20; DeepSeek-V3.2: 2048)
  std::int64_t indices_stride_batch = 0, indices_stride_token = 0;  ///< 0 = contiguous

  // --- optional extra outputs (dense and sparse) ---
  /// [batch, q_len, num_heads] float32 (strides below): ln sum exp(scaled logits) over the
  /// row's visible keys, +inf for a row with none (FlashMLA's softmax_lse).
  float* lse = nullptr;
  std::int64_t lse_stride_batch = 0, lse_stride_token = 0, lse_stride_head = 0;  ///< 0 = contiguous
  /// [num_heads] float32 attention sinks: out is scaled by exp(lse) / (exp(lse) + exp(sink[h]))
  /// (-inf: no effect, +inf: zeros); the lse output does not include it.
  const float* attn_sink = nullptr;

  // --- dtypes: fp8 Q + fp8 cache, bf16 Q + bf16 cache, bf16 Q + fp8 cache, or bf16 Q + fp8ds
  // cache (the fp8-with-scales rows; the portable backend only for now) ---
  DType input = DType::bf16;
  DType kv = DType::bf16;

  // --- shapes ---
  int batch = 0;
  int q_len = 1;              ///< 1 to 4 (multi-token prediction)
  int num_heads = 0;          ///< Q heads per request: 16, 32, 64, 128
  int page_size = 64;         ///< 32 or 64
  int num_pages = 0;          ///< pages in the cache (for stride checks; 0 = unknown)
  int max_pages_per_seq = 0;  ///< block_table columns used; seq_lens are clamped to this * page_size (dense only)
  std::int64_t block_table_stride = 0;  ///< 0 = max_pages_per_seq

  // --- strides (elements; 0 = contiguous default); the last axis is contiguous ---
  std::int64_t q_stride_batch = 0, q_stride_token = 0, q_stride_head = 0;
  std::int64_t out_stride_batch = 0, out_stride_token = 0, out_stride_head = 0;
  std::int64_t kv_stride_page = 0, kv_stride_token = 0;  ///< e.g. a pool view (fp8ds: bytes, x16)

  // --- scales: logits = q.k * sm_scale * q_scale * kv_scale; out = softmax.V * kv_scale ---
  float sm_scale = 0.f;       ///< required (> 0): DeepSeek-V3 uses 1/sqrt(192), not 1/sqrt(576)
  float q_scale = 1.f;        ///< dequantisation of an fp8 Q
  float kv_scale = 1.f;       ///< dequantisation of an fp8 cache (fp8ds: on top of the rows' own scales)
  const float* q_scale_ptr = nullptr;   ///< device pointers win (graph replays can change them)
  const float* kv_scale_ptr = nullptr;
};

/// Throws ArgumentError naming the first invalid field. Needs no GPU.
void validate(const MlaDecodeParams& params);

/// Whether these params ask for sparse MLA (indices set).
inline bool is_sparse(const MlaDecodeParams& params) { return params.indices != nullptr; }

/// The keys a launch's splits cover, and the length its tuning entries are keyed by: a
/// sparse launch's index lists (topk; it has no block table), a dense one's table
/// (max_pages_per_seq * page_size).
inline std::int64_t mla_decode_covered_keys(const MlaDecodeParams& params) {
  return is_sparse(params) ? params.topk : static_cast<std::int64_t>(params.max_pages_per_seq) * params.page_size;
}

/// The kernel spec an MLA decode with these params runs on `arch` (backend resolved).
KernelSpec mla_decode_spec(const MlaDecodeParams& params, const Arch& arch);

/// How a launch maps onto the GPU (the same plan mla_decode() will use): LaunchPlan's
/// fields, and the merge launch only MLA has.
struct MlaDecodePlan : LaunchPlan {
  int rows_per_cta = 0;
  /// Splits merged by a second launch (xqajit_mla_merge: merge_grid x merge_threads,
  /// one CTA a row) instead of the last CTA of each (request, row block).
  bool merge_launch = false;
  unsigned merge_grid[3] = {1, 1, 1};
  unsigned merge_threads = 0;
  /// Rows a merge CTA folds: 1, or (hopper, every row of at most kXqajitMlaMergeRowsMaxSplits
  /// splits) kXqajitMlaMergeRows through xqajit_mla_merge_rows, whose fewer CTAs launch faster
  /// (m92). mla_decode() merges a row a CTA where the loaded module lacks that entry.
  int merge_rows = 1;
  /// The splits of one (request, row block) launched as one thread-block cluster
  /// (grid.x; hopper, two splits): they merge through distributed shared memory
  /// (kernel_templates/common/cluster_merge.cuh), with no merge launch and no
  /// workspace round trip. mla_decode() launches without it where the device cannot
  /// hold every cluster at once; the kernel then merges in the last CTA.
  int split_cluster = 1;
  /// Adjacent row blocks launched as one thread-block cluster (grid.y; hopper sparse
  /// H=128: the token's two 64-head CTAs share each tile's gather, m21). The kernel
  /// needs it: mla_decode() always launches so, and split_cluster is then 1.
  int row_cluster = 1;
  /// > 0: the balanced plan (hopper seesaw specs at one split a request, up to
  /// kXqajitMlaBalancedMaxBatch requests; m77-m79): grid (row blocks, balanced_parts + batch,
  /// 1). Where the lengths are uneven (the kernel decides from seq_lens) up to this many walkers
  /// share the long requests' tiles, laid end to end, equally, a request cut between walkers
  /// merging in its last piece's CTA, and the short ones run a CTA each; else CTA y runs the
  /// y-th longest request (kernel_templates/mla/balanced_plan.h). With merge_launch, a small
  /// batch's shares (m84: where the split planner cut every request into seesaw splits, up to
  /// kXqajitMlaSharesMaxBatch requests): grid (row blocks, balanced_parts, 1), request b cut
  /// into pieces of about the batch's tiles / balanced_parts, a CTA each; num_splits stays the
  /// split planner's count (the merge launch's block size).
  int balanced_parts = 0;
};
MlaDecodePlan mla_decode_plan(const MlaDecodeParams& params, const DeviceInfo& device);

/// Workspace bytes mla_decode() needs on `device` for these shapes (0 when one
/// split suffices). Allocate once, zero once, reuse for every launch and replay.
std::size_t mla_decode_workspace_size(const MlaDecodeParams& params, const DeviceInfo& device);

/// Bytes of kv_cache the launch can read: from the pointer to the end of the last row of
/// page num_pages - 1, by the resolved strides; 0 when num_pages is 0 (unknown).
std::size_t mla_decode_cache_bytes(const MlaDecodeParams& params);

/// Launches MLA decode on `stream` (the device is the stream's).
void mla_decode(Engine& engine, const MlaDecodeParams& params, Stream stream);

}  // namespace xqajit
