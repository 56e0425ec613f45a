#include "xqajit/ops/decode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "ops/arg_checks.hpp"
#include "gqa/hopper_geometry.h"
#include "xqajit/decode_args.h"
#include "xqajit/error.hpp"
#include "xqajit/ops/split_plan.hpp"
#include "xqajit/tuning.hpp"

namespace xqajit {
namespace {

// Every struct member is 8 or 4 bytes; pin the layout the kernel sees.
static_assert(sizeof(XqajitDecodeArgs) == 248, "XqajitDecodeArgs changed: update the kernel too");

constexpr const char* kOp = "decode";

[[noreturn]] void fail(const char* field, const std::string& why) { ops::fail(kOp, field, why); }
void require_ptr(const void* p, const char* field, bool aligned16 = true) {
  ops::require_ptr(kOp, p, field, aligned16);
}
using ops::Dim;
using ops::one_of;
void check_strides(const char* tensor, std::array<Dim, 3> dims, int head_dim, int elem_bytes) {
  ops::check_strides(kOp, tensor, dims, head_dim, elem_bytes);
}

struct Strides {
  std::int64_t q_b, q_t, q_h, o_b, o_t, o_h, k_p, k_t, k_h, v_p, v_t, v_h;
};

Strides resolved_strides(const DecodeParams& p) {
  auto pick = [](std::int64_t v, std::int64_t dflt) { return v != 0 ? v : dflt; };
  const std::int64_t D = p.head_dim, Hq = p.num_q_heads, Hk = p.num_kv_heads, P = p.page_size;
  const bool nhd = p.kv_layout == KvLayout::nhd;
  const std::int64_t kv_t = nhd ? Hk * D : D, kv_h = nhd ? D : P * D;
  Strides s{};
  s.q_h = pick(p.q_stride_head, D);
  s.q_t = pick(p.q_stride_token, Hq * D);
  s.q_b = pick(p.q_stride_batch, p.q_len * Hq * D);
  s.o_h = pick(p.out_stride_head, D);
  s.o_t = pick(p.out_stride_token, Hq * D);
  s.o_b = pick(p.out_stride_batch, p.q_len * Hq * D);
  s.k_p = pick(p.k_stride_page, P * Hk * D);
  s.k_t = pick(p.k_stride_token, kv_t);
  s.k_h = pick(p.k_stride_head, kv_h);
  s.v_p = pick(p.v_stride_page, P * Hk * D);
  s.v_t = pick(p.v_stride_token, kv_t);
  s.v_h = pick(p.v_stride_head, kv_h);
  return s;
}

}  // namespace

void validate(const DecodeParams& p) {
  require_ptr(p.q, "q");
  require_ptr(p.out, "out");
  require_ptr(p.k_cache, "k_cache");
  require_ptr(p.v_cache, "v_cache");
  require_ptr(p.block_table, "block_table", false);
  require_ptr(p.seq_lens, "seq_lens", false);
  if (p.input != DType::fp16 && p.input != DType::bf16)
    fail("input", fmt::format("= {}: allowed fp16, bf16", to_string(p.input)));
  if (p.kv != p.input && p.kv != DType::fp8)
    fail("kv", fmt::format("= {} does not match input {}: allowed {} or fp8", to_string(p.kv),
                           to_string(p.input), to_string(p.input)));
  if (p.output != p.input && p.output != DType::fp8)
    fail("output", fmt::format("= {}: allowed {} (the input type) or fp8", to_string(p.output),
                               to_string(p.input)));
  if (p.output == DType::fp8 && p.kv != DType::fp8)
    fail("output", "= fp8 needs an fp8 KV cache (kv = fp8)");
  if (p.batch < 1 || p.batch > 65535) fail("batch", fmt::format("= {}: allowed 1 to 65535", p.batch));
  if (p.q_len < 1 || p.q_len > 32) fail("q_len", fmt::format("= {}: allowed 1 to 32", p.q_len));
  if (p.num_kv_heads < 1) fail("num_kv_heads", fmt::format("= {} must be >= 1", p.num_kv_heads));
  if (p.num_q_heads < 1) fail("num_q_heads", fmt::format("= {} must be >= 1", p.num_q_heads));
  if (p.num_q_heads % p.num_kv_heads != 0)
    fail("num_q_heads", fmt::format("= {} is not a multiple of num_kv_heads = {}", p.num_q_heads,
                                    p.num_kv_heads));
  if (p.num_q_heads / p.num_kv_heads > 64)
    fail("num_q_heads", fmt::format("/ num_kv_heads = {}: group sizes up to 64 are supported",
                                    p.num_q_heads / p.num_kv_heads));
  if (!one_of(p.head_dim, {64, 128, 256})) fail("head_dim", fmt::format("= {}: allowed 64, 128, 256", p.head_dim));
  if (!one_of(p.page_size, {16, 32, 64, 128}))
    fail("page_size", fmt::format("= {}: allowed 16, 32, 64, 128", p.page_size));
  if (p.max_pages_per_seq < 1) fail("max_pages_per_seq", fmt::format("= {} must be >= 1", p.max_pages_per_seq));
  if (p.block_table_stride != 0 && p.block_table_stride < p.max_pages_per_seq)
    fail("block_table_stride", fmt::format("= {} is smaller than max_pages_per_seq = {}",
                                           p.block_table_stride, p.max_pages_per_seq));
  if (static_cast<std::int64_t>(p.max_pages_per_seq) * p.page_size > (1 << 30))
    fail("max_pages_per_seq", "* page_size exceeds 2^30 keys");
  if (p.num_pages < 0) fail("num_pages", "must be >= 0");
  if (p.q_len > 1 && p.spec_mask == nullptr)
    fail("spec_mask", fmt::format("is null but q_len = {}: speculative decoding needs a mask "
                                  "[batch, q_len, ceil(q_len/32)] (a causal mask: row i = bits 0..i)",
                                  p.q_len));
  if (p.sliding_window < 0) fail("sliding_window", fmt::format("= {} must be >= 0", p.sliding_window));
  if (p.num_splits < 0 || p.num_splits > kMaxSplits)
    fail("num_splits", fmt::format("= {}: allowed 0 (automatic) to {}", p.num_splits, kMaxSplits));
  if (p.kv_tile != 0 && !one_of(p.kv_tile, {16, 32, 64, 128}))
    fail("kv_tile", fmt::format("= {}: allowed 0 (default), 16, 32, 64, 128", p.kv_tile));
  if (p.cta_rows != 0 && !one_of(p.cta_rows, {8, 16, 32, 64}))
    fail("cta_rows", fmt::format("= {}: allowed 0 (the plan's choice), 8, 16, 32, 64", p.cta_rows));
  if (p.cta_rows != 0 && p.backend == Backend::portable)
    fail("cta_rows", fmt::format("= {} with backend portable: rows per CTA are the hopper kernel's "
                                 "(backend hopper or auto on sm_90a), or 0", p.cta_rows));
  const Strides s = resolved_strides(p);
  const std::int64_t pages = std::max(p.num_pages, 2);
  check_strides("q", {Dim{p.batch, s.q_b, "q_stride_batch"}, Dim{p.q_len, s.q_t, "q_stride_token"},
                      Dim{p.num_q_heads, s.q_h, "q_stride_head"}},
                p.head_dim, dtype_bytes(p.input));
  check_strides("out", {Dim{p.batch, s.o_b, "out_stride_batch"}, Dim{p.q_len, s.o_t, "out_stride_token"},
                        Dim{p.num_q_heads, s.o_h, "out_stride_head"}},
                p.head_dim, dtype_bytes(p.output));
  check_strides("k_cache", {Dim{pages, s.k_p, "k_stride_page"}, Dim{p.page_size, s.k_t, "k_stride_token"},
                            Dim{p.num_kv_heads, s.k_h, "k_stride_head"}},
                p.head_dim, dtype_bytes(p.kv));
  check_strides("v_cache", {Dim{pages, s.v_p, "v_stride_page"}, Dim{p.page_size, s.v_t, "v_stride_token"},
                            Dim{p.num_kv_heads, s.v_h, "v_stride_head"}},
                p.head_dim, dtype_bytes(p.kv));
}

KernelSpec decode_spec(const DecodeParams& p, const Arch& arch) {
  KernelSpec s;
  s.kind = Kind::gqa;
  s.input = p.input;
  s.kv = p.kv;
  s.output = p.output;
  s.head_dim = p.head_dim;
  s.page_size = p.page_size;
  s.group = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 0;
  s.q_len = p.q_len;
  s.sliding_window = p.sliding_window > 0;
  s.arch = arch;
  s.kv_tile = p.kv_tile;  // 0: the spec's default (default_kv_tile in spec.cpp)
  s.cta_rows = p.cta_rows;  // 0: the plan's choice (planned_cta_rows in spec.cpp)
  // Rows per CTA are the hopper kernel's: asking for them with backend auto asks for it.
  s.backend = p.cta_rows != 0 && p.backend == Backend::automatic ? Backend::hopper : p.backend;
  return s;
}

namespace {

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
    const TunedLookup tuned = tuned_choice(device, decode_spec(p, arch), p.batch,
                                           static_cast<std::int64_t>(p.max_pages_per_seq) * p.page_size);
    if (tuned.source != ChoiceSource::heuristic) {
      p.kv_tile = tuned.choice.kv_tile;
      p.num_splits = tuned.choice.num_splits;
      p.backend = tuned.choice.backend;
      p.cta_rows = tuned.choice.cta_rows;
      source = tuned.source;
    }
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

DecodeCacheBytes decode_cache_bytes(const DecodeParams& p) {
  validate(p);
  if (p.num_pages == 0) return {};
  const Strides s = resolved_strides(p);
  // The farthest element is the last head's last token of the last page, plus its row.
  auto span = [&](std::int64_t page, std::int64_t token, std::int64_t head) {
    const std::int64_t last = (p.num_pages - 1) * page + (p.page_size - 1) * token + (p.num_kv_heads - 1) * head;
    return static_cast<std::size_t>(last + p.head_dim) * dtype_bytes(p.kv);
  };
  return {span(s.k_p, s.k_t, s.k_h), span(s.v_p, s.v_t, s.v_h)};
}

void decode(Engine& engine, const DecodeParams& p, Stream stream) {
  validate(p);
  Driver& driver = Driver::instance();
  const int device = driver.stream_device(stream);
  const DecodePlan plan = decode_plan(p, driver.device(device));
  check_workspace(kOp, p.workspace, p.workspace_bytes, plan.workspace_bytes, plan.num_splits,
                  "decode_workspace_size");
  const LoadedKernel& kernel = engine.kernel(plan.spec, device, stream);

  const Strides s = resolved_strides(p);
  XqajitDecodeArgs args{};
  args.q = p.q;
  args.out = p.out;
  args.k_cache = p.k_cache;
  args.v_cache = p.v_cache;
  args.block_table = p.block_table;
  args.seq_lens = p.seq_lens;
  args.sinks = p.sinks;
  args.spec_mask = p.spec_mask;
  args.q_scale_ptr = p.q_scale_ptr;
  args.kv_scale_ptr = p.kv_scale_ptr;
  args.rcp_out_scale_ptr = p.rcp_out_scale_ptr;
  args.q_scale = p.q_scale;
  args.kv_scale = p.kv_scale;
  args.rcp_out_scale = p.rcp_out_scale;
  args.window = p.sliding_window;
  const std::int64_t num_ctas = static_cast<std::int64_t>(p.batch) * plan.grid[1];
  if (plan.num_splits > 1) {
    args.counters = static_cast<unsigned*>(p.workspace);
    args.partial = reinterpret_cast<float*>(static_cast<char*>(p.workspace) + split_counter_bytes(num_ctas));
  }
  args.q_stride_batch = s.q_b;
  args.q_stride_token = s.q_t;
  args.q_stride_head = s.q_h;
  args.o_stride_batch = s.o_b;
  args.o_stride_token = s.o_t;
  args.o_stride_head = s.o_h;
  args.k_stride_page = s.k_p;
  args.k_stride_token = s.k_t;
  args.k_stride_head = s.k_h;
  args.v_stride_page = s.v_p;
  args.v_stride_token = s.v_t;
  args.v_stride_head = s.v_h;
  args.block_table_stride = static_cast<int>(p.block_table_stride != 0 ? p.block_table_stride : p.max_pages_per_seq);
  args.max_pages_per_seq = p.max_pages_per_seq;
  args.batch = p.batch;
  args.num_kv_heads = p.num_kv_heads;
  args.num_splits = plan.num_splits;
  args.split_tokens = plan.split_tokens;
  args.mask_words = (p.q_len + 31) / 32;
  args.prefetch_pages = plan.l2_warmup ? p.num_pages : 0;  // bounds the warm-up's page indices

  LaunchConfig config;
  std::copy(plan.grid, plan.grid + 3, config.grid);
  config.block[0] = plan.threads;
  config.dynamic_smem = plan.smem_bytes;
  config.programmatic_dependent_launch = plan.programmatic_dependent_launch;
  config.cluster[1] = static_cast<unsigned>(plan.kv_head_cluster);
  if (plan.split_cluster > 1) {  // wins over the head pairs, where every cluster is resident at once
    LaunchConfig split = config;  // (else the kernel merges through the workspace)
    split.cluster[0] = static_cast<unsigned>(plan.split_cluster);
    split.cluster[1] = 1;
    if (driver.clusters_fit(kernel, split)) config = split;
  }
  void* params[] = {&args};
  driver.launch(kernel, config, stream, params);
}

}  // namespace xqajit
