#pragma once
/// GQA / MHA decode attention over a paged KV cache: the typed launcher.
///
///   DecodeParams --decode_spec()--> KernelSpec --engine--> kernel --launch on your stream
///
/// decode() validates every argument first (ArgumentError naming the field),
/// then launches with no host sync, no allocation and — once the kernel is
/// loaded — no compile, so it can be captured into a CUDA graph.

#include <cstddef>
#include <cstdint>

#include "xqajit/runtime/driver.hpp"
#include "xqajit/ops/launch_plan.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/spec/spec.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit {

/// How K/V pages are laid out when their strides are left at 0.
enum class KvLayout {
  nhd,  ///< [num_pages, page_size, num_kv_heads, head_dim]
  hnd,  ///< [num_pages, num_kv_heads, page_size, head_dim]
};

/// Everything one decode launch reads: the tensors, shapes and scales below, and the
/// launch knobs (LaunchKnobs). Pointers are device pointers (16-byte aligned); strides
/// are in elements of the tensor's own dtype and 0 means "the contiguous default"; the
/// head_dim axis is always contiguous.
struct DecodeParams : LaunchKnobs {
  // --- tensors ---
  const void* q = nullptr;       ///< [batch, q_len, num_q_heads, head_dim], `input` dtype
  void* out = nullptr;           ///< [batch, q_len, num_q_heads, head_dim], `output` dtype
  const void* k_cache = nullptr; ///< K pages, `kv` dtype (layout below)
  const void* v_cache = nullptr; ///< V pages, `kv` dtype
  const std::int32_t* block_table = nullptr;  ///< [batch, block_table_stride] page indices
  const std::int32_t* seq_lens = nullptr;     ///< [batch] keys per request; 0 gives zeros

  // --- dtypes ---
  DType input = DType::bf16;   ///< fp16 or bf16
  DType kv = DType::bf16;      ///< `input` or fp8 (e4m3)
  DType output = DType::bf16;  ///< `input`, or fp8 with an fp8 cache (scaled by rcp_out_scale)

  // --- shapes ---
  int batch = 0;
  int q_len = 1;               ///< query tokens per request; > 1 needs spec_mask
  int num_q_heads = 0;
  int num_kv_heads = 0;        ///< must divide num_q_heads
  int head_dim = 128;          ///< 64, 128, 256
  int page_size = 64;          ///< tokens per page: 16, 32, 64, 128
  int num_pages = 0;           ///< pages in each cache (stride checks; bounds the L2 warm-up of PDL launches; 0 = unknown: none)
  int max_pages_per_seq = 0;   ///< block_table columns used; seq_lens are clamped to this * page_size
  std::int64_t block_table_stride = 0;  ///< 0 = max_pages_per_seq

  // --- strides (elements; 0 = contiguous default) ---
  std::int64_t q_stride_batch = 0, q_stride_token = 0, q_stride_head = 0;
  std::int64_t out_stride_batch = 0, out_stride_token = 0, out_stride_head = 0;
  KvLayout kv_layout = KvLayout::nhd;
  std::int64_t k_stride_page = 0, k_stride_token = 0, k_stride_head = 0;
  std::int64_t v_stride_page = 0, v_stride_token = 0, v_stride_head = 0;

  // --- scales: a non-null device pointer wins over the host value ---
  float q_scale = 1.f;
  float kv_scale = 1.f;          ///< dequantisation scale of an fp8 cache (ignored for 16-bit)
  float rcp_out_scale = 1.f;     ///< reciprocal output scale, fp8 output only
  const float* q_scale_ptr = nullptr;
  const float* kv_scale_ptr = nullptr;
  const float* rcp_out_scale_ptr = nullptr;

  // --- variants ---
  int sliding_window = 0;        ///< > 0: each query sees only its last `sliding_window` keys
  const float* sinks = nullptr;  ///< [num_q_heads] fp32 attention sinks, or null
  const std::uint32_t* spec_mask = nullptr;  ///< [batch, q_len, ceil(q_len/32)] packed bits (LSB first)

  // --- optional output ---
  /// [batch, q_len, num_q_heads] float32: ln of the sum of exp(scaled logits) over each
  /// row's visible keys (the sink not included), +inf for a row with none -- what an
  /// engine needs to merge this attention with another piece's (prefix/suffix, sparse/dense).
  float* lse = nullptr;
  std::int64_t lse_stride_batch = 0, lse_stride_token = 0, lse_stride_head = 0;  ///< 0 = contiguous

  // --- split-KV (backend, kv_tile, num_splits, workspace, PDL: LaunchKnobs) ---
  /// Query rows per CTA of the hopper kernel (8, 16, 32, 64; KernelSpec::cta_rows); 0 =
  /// the plan's choice (planned_cta_rows). Non-zero needs backend hopper or auto on sm_90a.
  int cta_rows = 0;
};

/// Throws ArgumentError naming the first invalid field. Needs no GPU.
void validate(const DecodeParams& params);

/// The kernel spec a decode with these params runs on `arch`.
KernelSpec decode_spec(const DecodeParams& params, const Arch& arch);

/// How a launch splits the sequence (the same plan decode() will use): LaunchPlan's
/// fields, and the launch options only decode has.
struct DecodePlan : LaunchPlan {
  /// Whether the launch asks for programmatic dependent launch: the params' flag, on
  /// sm_90+, where it measured no slower -- split launches and 16-bit caches; one-split
  /// grids of an fp8 cache launch plainly (H200: 1-3.5 % faster so, docs/KERNEL_NOTES.md h13),
  /// and so do split clusters that put about one CTA on every SM with a second slot free
  /// (bf16 B=2 L=4096: 15.0 us with PDL vs 11.8 without, same graph pair, h31).
  bool programmatic_dependent_launch = false;
  /// Whether the kernel warms L2 with its split's first keys before griddepcontrol.wait
  /// (needs num_pages): PDL split launches too big for the next grid to fit beside them,
  /// whose CTAs then arrive as this one's leave, during its merge tail (docs/KERNEL_NOTES.md
  /// h15), and hopper launches whose kernel lets the next grid start only near its end
  /// (one query token, tiles of at most two pages: xqajit_gqa_hopper_late_trigger, h35).
  bool l2_warmup = false;
  /// CTAs of adjacent KV heads launched as one thread-block cluster (grid.y): 2, or 1 for
  /// none. Where two heads' 128-byte rows sit side by side (an fp8 cache at head_dim 128,
  /// NHD pages), two CTAs started together read each 256-byte pair close together in time,
  /// which the memory system serves faster (hopper backend, 128-key tiles; measured in
  /// docs/KERNEL_NOTES.md h21).
  int kv_head_cluster = 1;
  /// The splits of one merge group launched as one thread-block cluster (grid.x): the
  /// split count, or 1 for none. They merge from each other's shared memory
  /// (kernel_templates/common/cluster_merge.cuh) instead of through the workspace, whose
  /// fence, counter and reload cost 1.7-2.7 us at small batch (hopper backend, 2..8 splits;
  /// docs/KERNEL_NOTES.md h26). It wins over kv_head_cluster; decode() launches without it
  /// (with kv_head_cluster) where the device cannot hold every cluster at once, and the
  /// workspace is required either way.
  int split_cluster = 1;
};
DecodePlan decode_plan(const DecodeParams& params, const DeviceInfo& device);

/// Workspace bytes decode() needs on `device` for these shapes (0 when one
/// split suffices). Allocate once, zero once, reuse for every launch and replay.
std::size_t decode_workspace_size(const DecodeParams& params, const DeviceInfo& device);

/// Bytes of k_cache and of v_cache that the launch can read: from the pointer to the end
/// of the last row of page num_pages - 1, by the resolved strides. Both 0 when num_pages
/// is 0 (unknown). The tuner copies this much to time launches over cold caches.
struct DecodeCacheBytes {
  std::size_t k = 0, v = 0;
};
DecodeCacheBytes decode_cache_bytes(const DecodeParams& params);

/// Launches decode attention on `stream` (the device is the stream's).
void decode(Engine& engine, const DecodeParams& params, Stream stream);

}  // namespace xqajit
