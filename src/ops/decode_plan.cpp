// The launch plan of decode (include/xqajit/ops/decode.hpp): backend, rows per CTA,
// tile, split count and launch options per call, from the tuning table or the measured
// rules; and the workspace that plan needs. src/ops/decode.cpp checks and launches.

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gqa/hopper_geometry.h"
#include "ops/arg_checks.hpp"
#include "ops/decode_strides.hpp"
#include "ops/paged_op.hpp"
#include "xqajit/decode_args.h"
#include "xqajit/error.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/ops/split_plan.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit {
namespace {

constexpr const char* kOp = "decode";
using Strides = ops::DecodeStrides;
using ops::resolved_strides;

// The plan of one backend (p.backend is hopper or portable): geometry, split, launch options.
DecodePlan plan_backend(const DecodeParams& p, const Arch& arch, const DeviceInfo& device) {
  DecodePlan plan;
  // Rows per CTA: the caller's (one that is the kernel's own N names no variant), else the
  // measured small-batch rule (hopper, q_len > 1); chosen before the spec is normalized,
  // because the default tile follows them.
  KernelSpec spec = decode_spec(p, arch);
  if (p.cta_rows == 0)
    spec.cta_rows = planned_cta_rows(spec, static_cast<long long>(p.batch) * p.num_kv_heads, device.sm_count,
                                     static_cast<long long>(p.max_pages_per_seq) * p.page_size);
  plan.spec = normalized(spec);
  const int tile = plan.spec.kv_tile;
  const bool hopper = plan.spec.backend == Backend::hopper;
  const XqajitDecodeGeometry geo =
      hopper ? xqajit_gqa_hopper_geometry(p.head_dim, plan.spec.group, p.q_len, tile, dtype_bytes(p.kv),
                                          plan.spec.arch.number(), plan.spec.cta_rows)
             : xqajit_decode_geometry(p.head_dim, plan.spec.group, p.q_len, tile, dtype_bytes(p.kv),
                                      plan.spec.arch.number());
  if (geo.stages == 0)
    throw SpecError("kv_tile", std::to_string(tile),
                    fmt::format("a smaller tile: head_dim {} x {} keys does not fit the shared memory "
                                "of {} (backend {})", p.head_dim, tile, plan.spec.arch.str(),
                                to_string(plan.spec.backend)));
  plan.threads = static_cast<unsigned>(geo.threads);
  plan.smem_bytes = static_cast<unsigned>(geo.smem_bytes);

  // Keys a request can need: all of them, or the window plus the drafts (+ tile rounding).
  const std::int64_t max_len = static_cast<std::int64_t>(p.max_pages_per_seq) * p.page_size;
  std::int64_t covered = max_len;
  if (p.sliding_window > 0) covered = std::min<std::int64_t>(max_len, p.sliding_window + p.q_len - 1 + tile);

  SplitRequest request;
  request.covered_keys = covered;
  request.base_ctas = static_cast<std::int64_t>(p.batch) * p.num_kv_heads * geo.row_blocks;
  request.kv_tile = tile;
  request.threads = geo.threads;
  request.smem_bytes = geo.smem_bytes;
  request.merge_cap = merge_split_cap(geo.union_bytes, geo.rows_per_cta);
  request.requested = p.num_splits;
  // A CTA of 32 or more query rows (speculative decoding) merges short splits in one
  // cluster or pays for it: through the workspace, the last split's CTA reloads every
  // split's rows, and at 16 splits of <= 8 tiles that costs more than the extra splits save
  // (H100, `xqajit tune`, bf16 B=1 q_len 8, KERNEL_NOTES h41: group 8 L=4096 16 -> 8 splits
  // 42.4 -> 27.8 us on hopper, 41.2 -> 32.9 on portable; group 4 27.1 -> 20.5). Long splits
  // amortize it: at L=32768 16 splits beat 8 by 2-25 % (run 9). Rows split over CTAs
  // (cta_rows, h43) merge only their own: 8-row blocks take the slot rule (h44).
  // (A cluster merge needs sm_90+; the portable kernel needs room for its merged rows beside
  // its warps', the hopper kernel's are where its epilogue puts them.)
  const bool cluster_merge_fits = hopper || xqajit_cluster_merge_fits(geo, p.head_dim);
  const bool cluster_merge = plan.spec.arch.number() >= 90 && cluster_merge_fits;
  const int cta_rows = std::min(geo.rows, geo.rows_per_cta);
  if (cluster_merge && cta_rows >= 32) request.short_split_cap = xqajit_max_cluster_splits;
  // Short splits of a one-warpgroup fp8 CTA (hopper) fill two CTAs per SM: at one its chain
  // bounds it (split_plan.cpp). Not where one per SM still leaves more splits than a cluster
  // merges (the workspace merge either way) and splits of at most 4 tiles: there the second
  // CTA's fixed costs (prologue, first tile, warm-up, twice the partials to merge) outweigh
  // its overlap (H200, bench_decode --waves, sessions 11-13: B=1 L=8192 32 -> 16 splits
  // 10.2-10.3 -> 9.9-10.0 us, L=6144 24 -> 16 9.8 -> 9.3). Longer splits keep two (B=1
  // L=16384 at 16 splits of 8 tiles: 14.4 -> 14.6, h28), and so do split counts a cluster
  // holds (B=2 L=4096 at 8 splits: 9.9 -> 10.2).
  request.short_split_ctas_per_sm = 1;
  if (hopper && p.kv == DType::fp8) {
    const std::int64_t one_per_sm = device.sm_count / std::max<std::int64_t>(1, request.base_ctas);
    const bool fewer_fatter =
        tile == 128 && one_per_sm > xqajit_max_cluster_splits && covered <= 4 * tile * one_per_sm;
    request.short_split_ctas_per_sm = fewer_fatter ? 1 : 2;
  }
  const SplitPlan split = plan_splits(kOp, request, device);
  plan.num_splits = split.num_splits;
  plan.split_tokens = split.split_tokens;
  plan.grid[0] = static_cast<unsigned>(split.num_splits);
  plan.grid[1] = static_cast<unsigned>(p.num_kv_heads * geo.row_blocks);
  plan.grid[2] = static_cast<unsigned>(p.batch);
  plan.workspace_bytes = split_workspace_bytes(request.base_ctas, split.num_splits, geo.rows_per_cta, p.head_dim);
  plan.merge_groups = split.num_splits > 1 ? request.base_ctas : 0;
  // Programmatic dependent launch (the kernel's griddepcontrol exists for sm_90+ only)
  // where bench_decode measured it no slower than plain launches, same graph, same run
  // (H200, docs/KERNEL_NOTES.md h13): split launches (B=1 L=8192 13.3 vs 13.6 us) and
  // 16-bit caches (within +-0.5 %). A one-split grid of an fp8 cache ran 1-3.5 % slower
  // with it (128x8192 508 vs 504 us, Hq 64 68.9 vs 66.4): whatever the next grid's early
  // CTAs cost the running one, the launch latency they hide is worth less there.
  plan.programmatic_dependent_launch = p.programmatic_dependent_launch && plan.spec.arch.number() >= 90 &&
                                       (plan.num_splits > 1 || p.kv != DType::fp8);
  // L2 warm-up before the wait (H200, KERNEL_NOTES h15): CTAs of the next grid that fit
  // beside this one arrive at its start and their warmed lines are evicted by its
  // stream before they read them (bf16 B=1 L=8192, 128 CTAs on 264 slots: 13.3 ->
  // 14.0 us); CTAs that arrive as this grid's leave warm during its merge tail, while
  // the DRAM idles (B=1 L=65536 bf16 66.0 -> 65.3, fp8 B=1 L=8192 10.9 -> 10.4 us).
  // One-split grids have no merge tail to overlap.
  const std::int64_t ctas = static_cast<std::int64_t>(plan.grid[0]) * plan.grid[1] * plan.grid[2];
  const std::int64_t slots =
      static_cast<std::int64_t>(device.sm_count) * resident_ctas_per_sm(device, geo.smem_bytes, geo.threads);
  // The hopper kernel for one query token and tiles of at most two pages lets the next grid
  // launch only near its end (xqajit_gqa_hopper_late_trigger), so that grid's CTAs arrive
  // late even where they fit beside this one, and warming pays there too (h35: bf16 B=1
  // L=8192 12.45 -> 12.1 us, fp8 9.95 -> 9.65; warmed with the trigger at the top: +0.6 us).
  const bool next_arrives_late = hopper && xqajit_gqa_hopper_late_trigger(p.page_size, tile, p.q_len);
  plan.l2_warmup = plan.programmatic_dependent_launch && plan.num_splits > 1 && p.num_pages > 0 &&
                   (slots - ctas < ctas || next_arrives_late);
  // Adjacent KV heads as 2-CTA clusters (H200, KERNEL_NOTES h21): an fp8 head row of 128
  // bytes sits beside its neighbour's at a 1 KB token stride, and NHD fp8 read 1-2 % slower
  // than HND; CTAs of heads 2i and 2i + 1 started together read each 256-byte pair close
  // together in time and take half of that back: 64x4096 129.5 -> 128.2,
  // 128x8192 506 -> 499, B=16 37.6 -> 37.1, B=1 L=65536 38.3 -> 37.8 us. Not where the
  // halves are not adjacent (HND: +0.3-0.5 %), for splits of under 4 tiles (B=1 L=8192,
  // 2 tiles: +0.1-0.2 us), for 64-key tiles (4 CTAs per SM, page 16: +0.6 %), nor for
  // clusters of 4 or 8 heads (+16-45 %: a cluster waits for room in one GPC).
  auto head_rows_adjacent = [&] {  // head h + 1's K and V rows follow head h's (NHD)
    const Strides s = resolved_strides(p);
    return s.k_h == p.head_dim && s.v_h == p.head_dim;
  };
  plan.kv_head_cluster = hopper && p.kv == DType::fp8 && p.head_dim == 128 && tile == 128 &&
                                 geo.row_blocks == 1 && p.num_kv_heads % 2 == 0 &&
                                 plan.split_tokens >= 4 * tile && head_rows_adjacent()
                             ? 2
                             : 1;
  // The splits of a merge group as one thread-block cluster (KERNEL_NOTES h26): they merge
  // through distributed shared memory, no workspace round trip (H200, runs 2-3: B=16 fp8
  // 36.8 -> 35.8 us, bf16 65.3 -> 63.6, 8 splits at B=1 L=8192 -1 us). Up to 8 (the portable
  // size): a 16-CTA cluster lost 2.8 us at bf16 B=1 L=8192, and neither pinning one CTA per SM
  // nor the SPREAD scheduling policy made it win (h26, h27).
  if (cluster_merge && plan.num_splits > 1 && plan.num_splits <= xqajit_max_cluster_splits)
    plan.split_cluster = plan.num_splits;
  // Split clusters at about one CTA per SM with a second slot free launch plainly (H200,
  // KERNEL_NOTES h31, plain vs PDL in one graph): the next grid's early clusters cost this
  // one up to a quarter (bf16 B=2 L=4096, 128 CTAs in clusters of 8: 15.0 -> 11.8 us; B=2
  // L=2048 9.4 -> 8.1, B=4 L=2048 13.3 -> 11.9, fp8 B=2 L=2048 7.6 -> 7.2). PDL stays where
  // those clusters fill half the SMs or fewer (fp8 B=1 L=2048, 64 CTAs: 4.9 vs 5.2) and where
  // the next grid cannot fit beside this one (B >= 4 at 256 CTAs: 0.1-0.7 us faster with it).
  if (plan.split_cluster > 1 && 2 * ctas <= slots && 2 * ctas > device.sm_count)
    plan.programmatic_dependent_launch = false;
  return plan;
}

}  // namespace

DecodePlan decode_plan(const DecodeParams& params, const DeviceInfo& device) {
  const Arch arch = device.best_arch();
  ChoiceSource source = ChoiceSource::heuristic;
  // --- tuning (#8): knobs the caller left automatic come from the tuning table ---
  DecodeParams p = params;  // a plain struct copy: no allocation
  if (p.kv_tile == 0 && p.num_splits == 0 && p.cta_rows == 0 && p.backend == Backend::automatic) {
    const TunedLookup tuned = ops::take_tuned_knobs(p, decode_spec(p, arch), device,
                                                     static_cast<std::int64_t>(p.max_pages_per_seq) * p.page_size);
    if (tuned.source != ChoiceSource::heuristic) p.cta_rows = tuned.choice.cta_rows;
    source = tuned.source;
  }
  // --- end tuning ---
  // Rows per CTA are the hopper kernel's: asking for them asks for it.
  if (p.cta_rows != 0 && p.backend == Backend::automatic) {
    const std::vector<Backend> have = backends_for(Kind::gqa, arch);
    if (std::find(have.begin(), have.end(), Backend::hopper) == have.end())
      throw SpecError("cta_rows", std::to_string(p.cta_rows),
                      fmt::format("0 on {} (rows per CTA are the hopper kernel's, sm_90a only)", arch.str()));
    p.backend = Backend::hopper;
  }
  // backend=auto: the measured rule (planned_backend, spec.cpp), unless tuned above.
  if (p.backend == Backend::automatic) {
    const KernelSpec auto_spec = decode_spec(p, arch);
    p.backend = planned_backend(auto_spec);
    const Backend if_split = planned_backend(auto_spec, /*split_launch=*/true);
    if (if_split != p.backend) {  // the rule depends on whether this backend's plan splits
      DecodePlan probe = plan_backend(p, arch, device);
      if (probe.num_splits <= 1) {
        probe.source = source;
        return probe;
      }
      p.backend = if_split;
    }
  }
  DecodePlan plan = plan_backend(p, arch, device);
  plan.source = source;
  return plan;
}

std::size_t decode_workspace_size(const DecodeParams& params, const DeviceInfo& device) {
  validate(params);
  return decode_plan(params, device).workspace_bytes;
}

}  // namespace xqajit
