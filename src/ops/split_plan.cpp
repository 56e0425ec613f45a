#include "xqajit/ops/split_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "xqajit/error.hpp"

namespace xqajit {
namespace {

constexpr int kMinSplitTiles = 2;    // a split shorter than this costs more to merge than it saves
constexpr int kShortSplitTiles = 8;  // below this, one CTA per SM beats filling every resident slot

}  // namespace

int resident_ctas_per_sm(const DeviceInfo& device, int smem_bytes, int threads) {
  return std::max(1, std::min(device.max_smem_per_block_optin / (smem_bytes + 1024), 2048 / std::max(1, threads)));
}

SplitPlan plan_splits(const char* op, const SplitRequest& r, const DeviceInfo& device) {
  const int tile = r.kv_tile;
  int splits = r.requested;
  if (splits > r.merge_cap)
    throw ArgumentError(fmt::format("{}: num_splits = {}: this spec merges at most {} splits", op, splits,
                                    r.merge_cap));
  if (splits == 0) {
    // Memory-bound: fill the resident CTA slots once, no more (merging is not free
    // and a partial second wave costs a whole tile of latency).
    const int per_sm = resident_ctas_per_sm(device, r.smem_bytes, r.threads);
    const std::int64_t sms = std::max(1, device.sm_count);
    const std::int64_t base = std::max<std::int64_t>(1, r.base_ctas);
    const std::int64_t max_splits =
        std::clamp<std::int64_t>(r.covered_keys / (kMinSplitTiles * tile), 1, r.merge_cap);
    std::int64_t by_slots = std::clamp<std::int64_t>(sms * per_sm / base, 1, max_splits);
    const auto tiles_per_split = [&](std::int64_t n) { return (r.covered_keys + n * tile - 1) / (n * tile); };
    // Short splits: each CTA pays fixed costs (two dependent round trips before its first
    // tile, its partial write, its share of the merge). Below kShortSplitTiles tiles those
    // outweigh a second CTA per SM, so fill the SMs once instead (run 8 sweep, H200,
    // B=1 L=8192: bf16 t64 32 -> 16 splits 15.4 -> 14.7 us, fp8 t128 14.3 -> 12.8 us;
    // long sequences keep the slot rule: B=1 L=65536 fp8 32 splits beat 47 and 64).
    // A one-warpgroup fp8 CTA (hopper) is chain-bound at one per SM: two per SM, session
    // 5 runs 1-4: fp8 B=1 L=8192 32 splits 11.8-12.1 us vs 16 splits 12.6-12.9 (bf16:
    // 14.5-15.1 vs 14.2-14.4, so 16-bit caches keep one).
    if (per_sm > 1 && tiles_per_split(by_slots) < kShortSplitTiles) {
      const std::int64_t ctas = std::clamp(r.short_split_ctas_per_sm, 1, per_sm);
      by_slots = std::clamp<std::int64_t>(sms * ctas / base, 1, max_splits);
    }
    // Short splits past short_split_cap cost more to merge than they save (decode.cpp: tall
    // row blocks merge in one cluster); long ones amortize the merge and keep the slot count.
    if (by_slots > r.short_split_cap && tiles_per_split(by_slots) <= kShortSplitTiles) by_slots = r.short_split_cap;
    // Sparse MLA at a batch of one or a few: splits of one tile beat kMinSplitTiles where the
    // launch still takes at most half of the slots (session 39 run 2, H200, top-k 2048, 16 ->
    // 32 splits: H=128 B=1 14.3 -> 13.1 us, H=64 B=1 14.6 -> 12.7, H=16 B=1 13.2 -> 12.2; top-k
    // 512 H=128 B=1 4 -> 8 splits 12.6 -> 10.8); filling every slot so lost (H=128 B=2, 64
    // clusters: 14.9 -> 15.7).
    if (r.one_tile_splits)
      by_slots = std::max(by_slots, std::clamp<std::int64_t>(std::min(r.covered_keys / tile, sms * per_sm / (2 * base)),
                                                              1, r.merge_cap));
    splits = static_cast<int>(by_slots);
  }
  std::int64_t split_tokens = (r.covered_keys + splits - 1) / splits;
  split_tokens = std::max<std::int64_t>(tile, (split_tokens + tile - 1) / tile * tile);
  SplitPlan plan;
  plan.num_splits = static_cast<int>(std::max<std::int64_t>(1, (r.covered_keys + split_tokens - 1) / split_tokens));
  plan.split_tokens = static_cast<int>(split_tokens);
  return plan;
}

int merge_split_cap(int merge_bytes, int rows_per_cta) {
  return std::clamp((merge_bytes / 4 - 2 * rows_per_cta) / (2 * rows_per_cta), 1, kMaxSplits);
}

std::size_t split_counter_bytes(std::int64_t merge_groups) {
  return (static_cast<std::size_t>(merge_groups) * sizeof(unsigned) + 255) / 256 * 256;
}

std::size_t split_workspace_bytes(std::int64_t merge_groups, int num_splits, int rows_per_cta, int dim) {
  if (num_splits <= 1) return 0;
  const std::size_t slots = static_cast<std::size_t>(merge_groups) * num_splits * rows_per_cta;
  return split_counter_bytes(merge_groups) + slots * (dim + 2) * sizeof(float);
}

void check_workspace(const char* op, const void* workspace, std::size_t workspace_bytes, std::size_t needed,
                     int num_splits, const char* size_function) {
  if (needed == 0) return;
  if (workspace == nullptr)
    throw ArgumentError(fmt::format("{}: workspace is null but this launch {} and needs {} bytes ({}); "
                                    "allocate it once, zeroed",
                                    op,
                                    num_splits > 1 ? fmt::format("splits the sequence {} ways", num_splits)
                                                   : std::string("balances the requests' tiles over the SMs"),
                                    needed, size_function));
  if (reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0)
    throw ArgumentError(fmt::format("{}: workspace is not 256-byte aligned", op));
  if (workspace_bytes < needed)
    throw ArgumentError(fmt::format("{}: workspace_bytes = {} but this launch needs {} ({})", op,
                                    workspace_bytes, needed, size_function));
}

}  // namespace xqajit
