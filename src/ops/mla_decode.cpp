#include "xqajit/ops/mla_decode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include <cuda.h>

#include "ops/arg_checks.hpp"
#include "ops/paged_op.hpp"
#include "xqajit/error.hpp"
#include "xqajit/mla_args.h"
#include "xqajit/tensor_map.h"
#include "xqajit/ops/split_plan.hpp"
#include "mla/portable_geometry.h"
#include "mla/hopper_geometry.h"

namespace xqajit {
namespace {

// Pin the layout the kernels see (every member is 8 or 4 bytes).
static_assert(sizeof(XqajitMlaArgs) == 264, "XqajitMlaArgs changed: update both MLA kernels too");
static_assert(sizeof(XqajitTensorMap) == sizeof(CUtensorMap), "xqajit/tensor_map.h must spell CUtensorMap");

constexpr const char* kOp = "mla_decode";
constexpr int kQkDim = XQAJIT_MLA_QK_DIM;
constexpr int kVDim = XQAJIT_MLA_V_DIM;
// Split rows (splits x rows of a row block) the last CTA merges alone; past this a
// second launch merges. A partial row is 2 KB, and one SM reads the L2 at ~50 GB/s
// in this merge (H100, H=128 B=1 L=8192: 64 splits x 64 rows, 8 MB: 183 us with the
// last CTA merging, 40 with the launch), where a launch of one CTA a row spreads it
// over the GPU for ~1-2 us more launch.
constexpr int kLastCtaMergeRows = 32;
constexpr int kMaxTopk = 1 << 20;

[[noreturn]] void fail(const char* field, const std::string& why) { ops::fail(kOp, field, why); }

// Elements (of dtype_bytes each) of one cached row: 576 values, or the fp8ds row's 656 bytes.
int cache_row_elems(DType kv) { return kv == DType::fp8ds ? XQAJIT_MLA_FP8DS_ROW_BYTES : kQkDim; }
const char* cache_row_name(DType kv) {
  return kv == DType::fp8ds ? "the 656 bytes of an fp8ds row" : "the 576 values of a row";
}

struct Strides : ops::RowStrides {
  std::int64_t kv_p, kv_t;
};

Strides resolved_strides(const MlaDecodeParams& p) {
  Strides s{};
  static_cast<ops::RowStrides&>(s) = ops::resolved_row_strides(p, p.num_heads, kQkDim, kVDim);
  s.kv_t = p.kv_stride_token != 0 ? p.kv_stride_token : cache_row_elems(p.kv);
  s.kv_p = p.kv_stride_page != 0 ? p.kv_stride_page : p.page_size * s.kv_t;
  return s;
}

// Bytes of one cached latent row as it lands (xqajit_mla_row_bytes): what the geometry and
// the hopper kernel's load path are chosen by.
int row_bytes_of(const KernelSpec& spec) {
  return xqajit_mla_row_bytes(dtype_bytes(spec.kv), spec.kv == DType::fp8ds ? 1 : 0);
}

XqajitMlaGeometry geometry(const KernelSpec& spec) {
  const int q_bytes = dtype_bytes(spec.input), row_bytes = row_bytes_of(spec);
  if (spec.backend == Backend::hopper) {
    return xqajit_mla_hopper_geometry(spec.group, spec.q_len, spec.kv_tile, row_bytes, q_bytes,
                                      spec.arch.number(), spec.sparse ? 1 : 0);
  }
  return xqajit_mla_portable_geometry(spec.group, spec.q_len, spec.kv_tile, row_bytes, q_bytes,
                                      spec.arch.number(), spec.sparse ? 1 : 0);
}

struct IndexStrides {
  std::int64_t b, t;
};
IndexStrides resolved_index_strides(const MlaDecodeParams& p) {
  IndexStrides s{};
  s.t = p.indices_stride_token != 0 ? p.indices_stride_token : p.topk;
  s.b = p.indices_stride_batch != 0 ? p.indices_stride_batch : p.q_len * s.t;
  return s;
}

// Sparse MLA: indices instead of a block table and lengths (issue 31).
void validate_sparse(const MlaDecodeParams& p) {
  using ops::Dim;
  if (p.block_table != nullptr) fail("block_table", "must be null with indices (sparse MLA reads no block table)");
  if (p.seq_lens != nullptr)
    fail("seq_lens", "must be null with indices (sparse MLA: topk_length limits the lists instead)");
  if (p.spec_mask != nullptr)
    fail("spec_mask", "must be null with indices (sparse MLA has no causal or draft mask: the indexer chose)");
  if (p.topk < 1 || p.topk > kMaxTopk)
    fail("topk", fmt::format("= {}: allowed 1 to {} (entries per index list)", p.topk, kMaxTopk));
  if (p.num_pages < 1)
    fail("num_pages", fmt::format("= {}: sparse MLA needs the cache's page count (indices are bounded by "
                                  "num_pages * page_size; an index past it is skipped, never read)",
                                  p.num_pages));
  if (static_cast<std::int64_t>(p.num_pages) * p.page_size > std::numeric_limits<std::int32_t>::max())
    fail("num_pages", fmt::format("= {} * page_size {} exceeds 2^31 - 1 slots", p.num_pages, p.page_size));
  const IndexStrides s = resolved_index_strides(p);
  // int32 entries read one by one: any positive stride that keeps the lists apart.
  ops::check_strides(kOp, "indices",
                     std::array<Dim, 2>{Dim{p.batch, s.b, "indices_stride_batch"},
                                        Dim{p.q_len, s.t, "indices_stride_token"}},
                     p.topk, 16, "the topk entries of a list");
}

// The hopper backend's bf16 tiles (and the QGMMA schedule's fp8 and fp8ds ones) arrive by
// TMA: boxes of 128 bytes (64 bf16 or 128 e4m3 values) x one page's rows of the cache seen
// as [pages][page_size][576] (656 bytes for fp8ds; kernel: mla/hopper_loads.cuh). Page
// ids come from the block table, so the page extent only bounds the copies: an id
// past it reads zeros.
XqajitTensorMap kv_tensor_map(const MlaDecodeParams& p, const Strides& s, Driver& driver) {
  TiledTensorMapRequest r;
  r.base = p.kv_cache;
  r.rank = 3;
  r.element_bytes = dtype_bytes(p.kv);
  r.dims[0] = static_cast<std::uint64_t>(cache_row_elems(p.kv));  // 656 bytes an fp8ds row
  r.dims[1] = static_cast<std::uint64_t>(p.page_size);
  r.dims[2] = p.num_pages > 0 ? static_cast<std::uint64_t>(p.num_pages) : std::uint64_t{1} << 31;
  r.strides_bytes[0] = static_cast<std::uint64_t>(s.kv_t) * r.element_bytes;
  r.strides_bytes[1] = static_cast<std::uint64_t>(s.kv_p) * r.element_bytes;
  r.box[0] = kXqajitMlaHopperBoxBytes / r.element_bytes;  // one 128-byte swizzle row
  r.box[1] = static_cast<std::uint32_t>(p.page_size);
  r.box[2] = 1;
  XqajitTensorMap map{};
  driver.encode_tiled_tensor_map(&map, r);
  return map;
}

// The shortest table (in tiles) a batch of more than one wave is planned for (below).
constexpr std::int64_t kBalancedMinWaveTiles = 64;

// The balanced grid (m77), its two forms alike: (row blocks, ctas_per_block, 1) over Z = parts
// CTAs a row block, a walker's or a piece's row blocks side by side (they share its tiles in L2),
// and its workspace: a (request, row block)'s counter, as the split grid's, then row blocks x 2 Z
// slots of partial rows (balanced_plan.h: a cut piece's slot; the shares use the first Z, and
// slot Z's stats for their table).
void use_balanced_grid(MlaDecodePlan& plan, const MlaDecodeParams& p, const XqajitMlaGeometry& geo, int parts,
                       int ctas_per_block) {
  plan.balanced_parts = parts;
  plan.grid[0] = static_cast<unsigned>(geo.row_blocks);
  plan.grid[1] = static_cast<unsigned>(ctas_per_block);
  plan.grid[2] = 1;
  plan.split_cluster = 1;
  plan.merge_groups = static_cast<std::int64_t>(p.batch) * geo.row_blocks;
  plan.workspace_bytes = split_counter_bytes(plan.merge_groups) + static_cast<std::size_t>(geo.row_blocks * 2 * parts) *
                                                                      geo.rows_per_cta * (kVDim + 2) * sizeof(float);
}

// A small batch's shares (m84, mla/balanced_plan.h) where the split planner cut every request
// of a seesaw spec into seesaw splits (more than kXqajitMlaSeesawMinTiles tiles): Z CTAs a row
// block, request b cut into pieces of about the batch's tiles / Z, so that a ragged batch no
// longer waits for its longest request's splits (the split grid's even lengths keep their
// shape: Z / B pieces a request). A second launch merges, its block sized by the split planner's
// count (num_splits stays that: the pieces of an even batch's request). Where that count is 2,
// the split grid merged in a cluster, 1-6 % faster on even lengths (H=128 B=32 L=4096 80.0
// against 84.5 us), but ragged batches take 25-54 % less (B=24 L<=16384 212 -> 98; session 43
// run 4). `tiles`: the table's; `slots`: the CTAs resident at once.
void plan_shares(MlaDecodePlan& plan, const MlaDecodeParams& p, const XqajitMlaGeometry& geo, std::int64_t tiles,
                 std::int64_t slots) {
  const int split_tiles = plan.split_tokens / plan.spec.kv_tile;
  if (split_tiles <= kXqajitMlaSeesawMinTiles || tiles > kXqajitMlaSharesMaxTiles) return;
  // A request's pieces, at most Z - B + 1, stay within what one merge CTA folds.
  const int parts = static_cast<int>(std::min<std::int64_t>(slots / geo.row_blocks, kMaxSplits + p.batch - 1));
  if (parts < p.batch) return;
  use_balanced_grid(plan, p, geo, parts, parts);
  plan.merge_launch = true;  // the counters stay unused: the merge launch folds
}

// The balanced plan (m77, m78) where the split planner left one split a request to a hopper
// seesaw spec: a walker an SM (Z = SMs / row blocks), each taking 1 / Z of the batch's tiles
// where the lengths are uneven (the kernel decides, BalancedPlan::walks), else a CTA a request,
// the longest first (a ragged batch of several waves ends together); grid (row blocks, Z + B,
// 1). Split counts set by the caller or the tuning table keep their grid.
void plan_balanced(MlaDecodePlan& plan, const MlaDecodeParams& p, const XqajitMlaGeometry& geo,
                   const DeviceInfo& device) {
  if (plan.spec.backend != Backend::hopper || p.num_splits != 0) return;
  if (!xqajit_mla_hopper_balanced(plan.spec.group, plan.spec.q_len, dtype_bytes(plan.spec.kv), plan.spec.sparse ? 1 : 0))
    return;
  const std::int64_t tiles = (static_cast<std::int64_t>(p.max_pages_per_seq) * p.page_size + plan.spec.kv_tile - 1) /
                             plan.spec.kv_tile;
  const std::int64_t slots =
      static_cast<std::int64_t>(std::max(1, device.sm_count)) * resident_ctas_per_sm(device, geo.smem_bytes, geo.threads);
  if (plan.num_splits > 1) {
    if (p.batch <= kXqajitMlaSharesMaxBatch) {
      plan_shares(plan, p, geo, tiles, slots);
      return;
    }
    // Past the shares' warp, two splits (B=33 at 128 rows: 66 CTAs a row block) walk as B=34
    // does: the 2-split cluster waited for the longest request on ragged lengths (117.5 us
    // against FlashMLA's 63.1; session 43 run 7).
    if (plan.num_splits != 2) return;
    plan.num_splits = 1;
    plan.split_tokens = static_cast<int>(std::min<std::int64_t>(
        static_cast<std::int64_t>(p.max_pages_per_seq) * p.page_size, std::numeric_limits<int>::max()));
    plan.split_cluster = 1;
  }
  if (p.batch > kXqajitMlaBalancedMaxBatch) return;
  // Every tile index of the batch, and the plan's 64-bit products of them, stay in an int.
  if (tiles * p.batch >= std::numeric_limits<int>::max()) return;
  // Past one wave, only where a request may be long: the plan costs every CTA a load and a few
  // barriers before its Q, which many short CTAs do not earn back (B=200 L=2048, 32 tiles a
  // request: 269.8 us against one split's 251.2; at 64 tiles, B=128 and B=256 L=4096, level;
  // session 42 runs 1 and 8).
  if (static_cast<std::int64_t>(p.batch) * geo.row_blocks > slots && tiles < kBalancedMinWaveTiles) return;
  const int parts = static_cast<int>(std::max<std::int64_t>(1, slots / geo.row_blocks));
  use_balanced_grid(plan, p, geo, parts, parts + p.batch);
}

}  // namespace

void validate(const MlaDecodeParams& p) {
  using ops::Dim;
  using ops::one_of;
  const bool sparse = is_sparse(p);
  if (sparse) {  // indices instead of block_table and seq_lens (validate_sparse)
    ops::require_ptr(kOp, p.q, "q");
    ops::require_ptr(kOp, p.out, "out");
    ops::require_ptr(kOp, p.kv_cache, "kv_cache");
    ops::require_ptr(kOp, p.indices, "indices", false);
  } else {
    ops::require_tensors(kOp, p, {{p.kv_cache, "kv_cache"}});
    if (p.topk_length != nullptr) fail("topk_length", "is set without indices (it limits sparse index lists)");
  }
  if (p.input != DType::bf16 && p.input != DType::fp8)
    fail("input", fmt::format("= {}: allowed bf16, fp8", to_string(p.input)));
  if (p.kv != p.input && !(p.input == DType::bf16 && (p.kv == DType::fp8 || p.kv == DType::fp8ds)))
    fail("kv", fmt::format("= {} with input {}: allowed {}", to_string(p.kv), to_string(p.input),
                           p.input == DType::fp8 ? "fp8 (fp8ds needs a bf16 Q)" : "bf16, fp8, fp8ds"));
  ops::check_batch(kOp, p, 4);
  if (!one_of(p.num_heads, {16, 32, 64, 128}))
    fail("num_heads", fmt::format("= {}: allowed 16, 32, 64, 128 (Q heads per request)", p.num_heads));
  if (!one_of(p.page_size, {32, 64})) fail("page_size", fmt::format("= {}: allowed 32, 64", p.page_size));
  if (!sparse) ops::check_page_table(kOp, p);
  if (!(p.sm_scale > 0.f) || p.sm_scale > 1e6f)
    fail("sm_scale", fmt::format("= {} must be a positive softmax scale (DeepSeek-V3: 1/sqrt(192) = {:.6f})",
                                 p.sm_scale, 0.0721687836f));
  ops::check_split_knobs(kOp, p);
  const Strides s = resolved_strides(p);
  const std::int64_t pages = std::max(p.num_pages, 2);
  ops::check_row_strides(kOp, p, s, p.num_heads, {kQkDim, dtype_bytes(p.input), "the 576 values of a row"},
                         {kVDim, 2, "the 512 values of a row"});
  ops::check_strides(kOp, "kv_cache",
                     std::array<Dim, 2>{Dim{pages, s.kv_p, "kv_stride_page"},
                                        Dim{p.page_size, s.kv_t, "kv_stride_token"}},
                     cache_row_elems(p.kv), dtype_bytes(p.kv), cache_row_name(p.kv));
  if (sparse) validate_sparse(p);
  ops::check_lse(kOp, p, p.num_heads);
}

KernelSpec mla_decode_spec(const MlaDecodeParams& p, const Arch& arch) {
  KernelSpec s = ops::paged_spec(Kind::mla, p, arch);
  s.output = DType::bf16;
  s.head_dim = kQkDim;
  s.group = p.num_heads;
  s.sparse = is_sparse(p);
  return normalized(s);
}

MlaDecodePlan mla_decode_plan(const MlaDecodeParams& params, const DeviceInfo& device) {
  MlaDecodePlan plan;
  // --- tuning (#8): knobs the caller left automatic come from the tuning table ---
  MlaDecodeParams p = params;  // a plain struct copy: no allocation
  // A sparse launch is keyed by its topk, a dense one by its table's length (mla_decode_covered_keys).
  if (p.kv_tile == 0 && p.num_splits == 0 && p.backend == Backend::automatic)
    plan.source =
        ops::take_tuned_knobs(p, mla_decode_spec(p, device.best_arch()), device, mla_decode_covered_keys(p)).source;
  // --- end tuning ---
  plan.spec = mla_decode_spec(p, device.best_arch());
  const XqajitMlaGeometry geo = geometry(plan.spec);
  if (geo.stages == 0 || geo.smem_bytes > device.max_smem_per_block_optin)
    throw SpecError("kv_tile", std::to_string(plan.spec.kv_tile),
                    fmt::format("a smaller tile: the {} backend needs {} bytes of shared memory per block for "
                                "{} keys, {} allows {}",
                                to_string(plan.spec.backend), geo.smem_bytes, plan.spec.kv_tile, device.name,
                                device.max_smem_per_block_optin));
  plan.rows_per_cta = geo.rows_per_cta;
  plan.threads = static_cast<unsigned>(geo.threads);
  plan.smem_bytes = static_cast<unsigned>(geo.smem_bytes);

  SplitRequest request;
  // Sparse: splits cover positions of the index lists, as dense splits cover the sequence.
  request.covered_keys = mla_decode_covered_keys(p);
  request.base_ctas = static_cast<std::int64_t>(p.batch) * geo.row_blocks;
  request.kv_tile = plan.spec.kv_tile;
  request.threads = geo.threads;
  request.smem_bytes = geo.smem_bytes;
  request.merge_cap = merge_split_cap(geo.merge_bytes, geo.rows_per_cta);
  request.requested = p.num_splits;
  request.one_tile_splits = plan.spec.sparse;
  const SplitPlan split = plan_splits(kOp, request, device);
  plan.num_splits = split.num_splits;
  plan.split_tokens = split.split_tokens;
  plan.grid[0] = static_cast<unsigned>(split.num_splits);
  plan.grid[1] = static_cast<unsigned>(geo.row_blocks);
  plan.grid[2] = static_cast<unsigned>(p.batch);
  plan.workspace_bytes = split_workspace_bytes(request.base_ctas, split.num_splits, geo.rows_per_cta, kVDim);
  plan.merge_groups = split.num_splits > 1 ? request.base_ctas : 0;
  // Hopper merges two splits in a cluster: H=128 B=32 L=4096 spent ~25 us on the workspace
  // round trip and the merge launch (100 -> 82 us). Clusters of 4 and 8 were slower than the
  // workspace merge (H=64 B=32 L=4096, 4 splits: 70 -> 91 us; B=4 L=8192, 8: 50 -> 57): a
  // cluster of one-CTA-per-SM blocks waits for that many free SMs of one GPC (session 22 run 7).
  if (plan.spec.backend == Backend::hopper)
    plan.row_cluster = xqajit_mla_hopper_row_cluster(plan.spec.group, plan.spec.sparse ? 1 : 0);
  if (plan.spec.backend == Backend::hopper && split.num_splits == kXqajitMlaClusterSplits && plan.row_cluster == 1)
    plan.split_cluster = kXqajitMlaClusterSplits;
  plan.merge_launch = plan.split_cluster == 1 && split.num_splits > 1 &&
                      split.num_splits * std::min(geo.rows, geo.row_stride) > kLastCtaMergeRows;
  plan_balanced(plan, p, geo, device);
  if (plan.merge_launch) {
    // A row block's real rows (the rest is padding), a CTA each, or kXqajitMlaMergeRows a CTA where
    // they have few splits: the shares' up to 4 (m92: H=128 B=16-32 1.8-4.4 us faster; a ragged
    // request may have more pieces, which the rows kernel loops over), the split grid's 2. At 4
    // the split grid lost 0.4 us (H=64 B=32 L=4096: a row a CTA folds the 4 in one round trip,
    // the 16 rows' CTA in two; session 45 run 4).
    const int rows_max_splits = plan.balanced_parts > 0 ? kXqajitMlaMergeRowsMaxSplits : 2;
    if (plan.spec.backend == Backend::hopper && plan.num_splits <= rows_max_splits)
      plan.merge_rows = kXqajitMlaMergeRows;
    const int real_rows = std::min(geo.row_stride, geo.rows);  // a row block's (H=16: 16 of 64)
    plan.merge_grid[0] = static_cast<unsigned>((real_rows + plan.merge_rows - 1) / plan.merge_rows);
    plan.merge_grid[1] = static_cast<unsigned>(geo.row_blocks);  // a (request, row block)'s rows
    plan.merge_grid[2] = static_cast<unsigned>(p.batch);
    plan.merge_threads = static_cast<unsigned>(plan.merge_rows > 1 ? kXqajitMlaMergeRowsThreads
                                                                    : xqajit_mla_merge_threads(plan.num_splits));
  }
  return plan;
}

std::size_t mla_decode_workspace_size(const MlaDecodeParams& params, const DeviceInfo& device) {
  validate(params);
  return mla_decode_plan(params, device).workspace_bytes;
}

std::size_t mla_decode_cache_bytes(const MlaDecodeParams& p) {
  validate(p);
  const Strides s = resolved_strides(p);  // one latent row per token: one "head"
  return ops::cache_span_bytes(p, s.kv_p, s.kv_t, 1, 0, cache_row_elems(p.kv), dtype_bytes(p.kv));
}

void mla_decode(Engine& engine, const MlaDecodeParams& p, Stream stream) {
  constexpr ops::OpLaunch<MlaDecodeParams, MlaDecodePlan, Strides> kLaunch{
      kOp, &mla_decode_plan, &resolved_strides, "mla_decode_workspace_size"};
  auto [driver, plan, kernel, s, args] = ops::start_launch<XqajitMlaArgs>(kLaunch, engine, p, stream);
  args.kv_cache = p.kv_cache;
  args.sm_scale = p.sm_scale;
  args.kv_stride_page = s.kv_p;
  args.kv_stride_token = s.kv_t;
  args.merge_launch = plan.merge_launch ? 1 : 0;
  args.balanced_parts = plan.balanced_parts;  // its workspace: fill_shared_args, by plan.merge_groups
  if (is_sparse(p)) {
    const IndexStrides is = resolved_index_strides(p);
    args.indices = p.indices;
    args.topk_length = p.topk_length;
    args.indices_stride_batch = is.b;
    args.indices_stride_token = is.t;
    args.topk = p.topk;
    args.num_slots = p.num_pages * p.page_size;
  }
  ops::fill_lse_args(args, p, p.num_heads);
  args.attn_sink = p.attn_sink;

  LaunchConfig config = ops::launch_config(plan);
  config.programmatic_dependent_launch = p.programmatic_dependent_launch && plan.spec.arch.number() >= 90;
  if (plan.row_cluster > 1) config.cluster[1] = static_cast<unsigned>(plan.row_cluster);
  if (plan.split_cluster > 1) {  // else the last CTA merges through the workspace
    LaunchConfig split = config;
    split.cluster[0] = static_cast<unsigned>(plan.split_cluster);
    if (driver.clusters_fit(kernel, split)) config = split;
  }
  XqajitTensorMap kv_map{};  // by value after args: the hopper kernel's second parameter
  if (plan.spec.backend == Backend::hopper &&
      xqajit_mla_hopper_kv_map(plan.spec.group, plan.spec.q_len, row_bytes_of(plan.spec),
                               dtype_bytes(plan.spec.input), is_sparse(p) ? 1 : 0))
    kv_map = kv_tensor_map(p, s, driver);
  void* params[] = {&args, &kv_map};  // a kernel reads as many as it declares
  driver.launch(kernel, config, stream, params);
  if (plan.merge_launch) {
    LaunchConfig merge;
    std::copy(plan.merge_grid, plan.merge_grid + 3, merge.grid);
    merge.block[0] = plan.merge_threads;
    merge.programmatic_dependent_launch = config.programmatic_dependent_launch;
    if (plan.merge_rows > 1 && kernel.merge_rows_function) {
      driver.launch_merge_rows(kernel, merge, stream, params);
    } else {  // a row a CTA (a module built before xqajit_mla_merge_rows existed)
      merge.grid[0] = static_cast<unsigned>(plan.merge_grid[0] * plan.merge_rows);
      merge.block[0] = static_cast<unsigned>(xqajit_mla_merge_threads(plan.num_splits));
      driver.launch_merge(kernel, merge, stream, params);
    }
  }
}

}  // namespace xqajit
