#include "xqajit/ops/decode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "ops/arg_checks.hpp"
#include "ops/decode_strides.hpp"
#include "ops/paged_op.hpp"
#include "xqajit/decode_args.h"
#include "xqajit/error.hpp"
#include "xqajit/ops/split_plan.hpp"

namespace xqajit {
namespace {

// Every struct member is 8 or 4 bytes; pin the layout the kernel sees.
static_assert(sizeof(XqajitDecodeArgs) == 280, "XqajitDecodeArgs changed: update the kernel too");

constexpr const char* kOp = "decode";

[[noreturn]] void fail(const char* field, const std::string& why) { ops::fail(kOp, field, why); }
using ops::Dim;
using ops::one_of;
void check_strides(const char* tensor, std::array<Dim, 3> dims, int head_dim, int elem_bytes) {
  ops::check_strides(kOp, tensor, dims, head_dim, elem_bytes);
}

using Strides = ops::DecodeStrides;
using ops::resolved_strides;

}  // namespace

void validate(const DecodeParams& p) {
  ops::require_tensors(kOp, p, {{p.k_cache, "k_cache"}, {p.v_cache, "v_cache"}});
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
  ops::check_batch(kOp, p, 32);
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
  ops::check_page_table(kOp, p);
  if (p.q_len > 1 && p.spec_mask == nullptr)
    fail("spec_mask", fmt::format("is null but q_len = {}: speculative decoding needs a mask "
                                  "[batch, q_len, ceil(q_len/32)] (a causal mask: row i = bits 0..i)",
                                  p.q_len));
  if (p.sliding_window < 0) fail("sliding_window", fmt::format("= {} must be >= 0", p.sliding_window));
  ops::check_split_knobs(kOp, p);
  if (p.cta_rows != 0 && !one_of(p.cta_rows, {8, 16, 32, 64}))
    fail("cta_rows", fmt::format("= {}: allowed 0 (the plan's choice), 8, 16, 32, 64", p.cta_rows));
  if (p.cta_rows != 0 && p.backend == Backend::portable)
    fail("cta_rows", fmt::format("= {} with backend portable: rows per CTA are the hopper kernel's "
                                 "(backend hopper or auto on sm_90a), or 0", p.cta_rows));
  const Strides s = resolved_strides(p);
  const std::int64_t pages = std::max(p.num_pages, 2);
  ops::check_row_strides(kOp, p, s, p.num_q_heads, {p.head_dim, dtype_bytes(p.input)},
                         {p.head_dim, dtype_bytes(p.output)});
  check_strides("k_cache", {Dim{pages, s.k_p, "k_stride_page"}, Dim{p.page_size, s.k_t, "k_stride_token"},
                            Dim{p.num_kv_heads, s.k_h, "k_stride_head"}},
                p.head_dim, dtype_bytes(p.kv));
  check_strides("v_cache", {Dim{pages, s.v_p, "v_stride_page"}, Dim{p.page_size, s.v_t, "v_stride_token"},
                            Dim{p.num_kv_heads, s.v_h, "v_stride_head"}},
                p.head_dim, dtype_bytes(p.kv));
  ops::check_lse(kOp, p, p.num_q_heads);
}

KernelSpec decode_spec(const DecodeParams& p, const Arch& arch) {
  KernelSpec s = ops::paged_spec(Kind::gqa, p, arch);
  s.output = p.output;
  s.head_dim = p.head_dim;
  s.group = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 0;
  s.sliding_window = p.sliding_window > 0;
  s.cta_rows = p.cta_rows;  // 0: the plan's choice (planned_cta_rows in spec.cpp)
  // Rows per CTA are the hopper kernel's: asking for them with backend auto asks for it.
  s.backend = p.cta_rows != 0 && p.backend == Backend::automatic ? Backend::hopper : p.backend;
  return s;
}

DecodeCacheBytes decode_cache_bytes(const DecodeParams& p) {
  validate(p);
  const Strides s = resolved_strides(p);
  const int bytes = dtype_bytes(p.kv);
  return {ops::cache_span_bytes(p, s.k_p, s.k_t, p.num_kv_heads, s.k_h, p.head_dim, bytes),
          ops::cache_span_bytes(p, s.v_p, s.v_t, p.num_kv_heads, s.v_h, p.head_dim, bytes)};
}

namespace {

constexpr ops::OpLaunch<DecodeParams, DecodePlan, Strides> kLaunch{kOp, &decode_plan, &resolved_strides,
                                                                   "decode_workspace_size"};

/// What decode's kernel args add to the shared fields: the two caches and their strides,
/// sinks, lse, the fp8 output's scale, the window, the KV heads, the mask's words per row and
/// the bound of the L2 warm-up's page indices.
void fill_own_args(const DecodeParams& p, const Strides& s, const DecodePlan& plan, XqajitDecodeArgs& args) {
  args.k_cache = p.k_cache;
  args.v_cache = p.v_cache;
  args.sinks = p.sinks;
  ops::fill_lse_args(args, p, p.num_q_heads);
  args.rcp_out_scale_ptr = p.rcp_out_scale_ptr;
  args.rcp_out_scale = p.rcp_out_scale;
  args.window = p.sliding_window;
  args.k_stride_page = s.k_p;
  args.k_stride_token = s.k_t;
  args.k_stride_head = s.k_h;
  args.v_stride_page = s.v_p;
  args.v_stride_token = s.v_t;
  args.v_stride_head = s.v_h;
  args.num_kv_heads = p.num_kv_heads;
  args.mask_words = (p.q_len + 31) / 32;
  args.prefetch_pages = plan.l2_warmup ? p.num_pages : 0;
}

}  // namespace

void decode(Engine& engine, const DecodeParams& p, Stream stream) {
  auto [driver, plan, kernel, s, args] = ops::start_launch<XqajitDecodeArgs>(kLaunch, engine, p, stream);
  fill_own_args(p, s, plan, args);
  LaunchConfig config = ops::launch_config(plan);
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
