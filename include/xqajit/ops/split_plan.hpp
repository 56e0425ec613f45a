#pragma once
/// Split-KV (multi-block) planning and the workspace contract, shared by every
/// decode family. Long sequences at small batch need several CTAs per
/// (request, head block): each handles a slice of the sequence and the last one
/// to finish merges (kernel_templates/common/split_merge.cuh).
///
/// Workspace: [counters: merge_groups x u32, padded to 256 B][acc: groups x
/// splits x rows x dim f32][stats: groups x splits x rows x 2 f32]. The caller
/// allocates it once, zeroed; the counters reset themselves, so launches and
/// graph replays never need a memset.

#include <cstddef>
#include <cstdint>

#include "xqajit/runtime/driver.hpp"

namespace xqajit {

/// Most splits any family merges (its merge buffer may allow fewer).
constexpr int kMaxSplits = 64;

/// What the planner needs to know about one launch (host-known maxima only, so
/// the plan is the same for every replay of a captured graph).
struct SplitRequest {
  std::int64_t covered_keys = 0;  ///< keys the longest request can need
  std::int64_t base_ctas = 0;     ///< CTAs of one split (batch x head blocks)
  int kv_tile = 64;               ///< keys per pipeline step; splits are whole tiles
  int threads = 128;              ///< per CTA
  int smem_bytes = 0;             ///< per CTA
  int merge_cap = kMaxSplits;     ///< most splits the kernel's merge can stage (merge_split_cap)
  /// Most splits the automatic choice takes where its splits would be short (at most
  /// kShortSplitTiles tiles); a request may ask for more.
  int short_split_cap = kMaxSplits;
  int requested = 0;              ///< the caller's num_splits (0 = automatic)
  /// Whether the automatic choice may cut splits of one tile where the launch then takes at
  /// most half of the resident slots (sparse MLA: split_plan.cpp says why).
  bool one_tile_splits = false;
  /// Short splits fill the SMs once with this many CTAs each (capped by what fits):
  /// 1 where a CTA streams at the SM's share of bandwidth alone, 2 where one CTA's
  /// per-tile chain is the limit and a second overlaps it (GQA hopper, fp8 cache).
  int short_split_ctas_per_sm = 1;
};

struct SplitPlan {
  int num_splits = 1;
  int split_tokens = 0;  ///< keys per split, a multiple of kv_tile
};

/// CTAs of `threads` threads and `smem_bytes` of shared memory one SM holds at once
/// (shared memory and threads only: registers are unknown before the compile).
int resident_ctas_per_sm(const DeviceInfo& device, int smem_bytes, int threads);

/// Most splits a merging CTA can stage: split_merge keeps (max, sum) of every
/// split and row, plus the row totals, in `merge_bytes` of shared memory.
int merge_split_cap(int merge_bytes, int rows_per_cta);

/// Throws ArgumentError (field num_splits, prefixed with `op`) when the caller
/// asks for more splits than the kernel can merge.
SplitPlan plan_splits(const char* op, const SplitRequest& request, const DeviceInfo& device);

/// Bytes of the counter block (padded so the partials start 256-byte aligned).
std::size_t split_counter_bytes(std::int64_t merge_groups);
/// Workspace bytes for a plan (0 when one split suffices).
std::size_t split_workspace_bytes(std::int64_t merge_groups, int num_splits, int rows_per_cta, int dim);
/// Checks the caller's workspace against what a plan needs (ArgumentError
/// naming `workspace` / `workspace_bytes`, prefixed with `op`).
void check_workspace(const char* op, const void* workspace, std::size_t workspace_bytes, std::size_t needed,
                     int num_splits, const char* size_function);

}  // namespace xqajit
