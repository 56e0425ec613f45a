#include "xqajit/ops/decode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "ops/arg_checks.hpp"
#include "ops/decode_strides.hpp"
#include "gqa/hopper_geometry.h"
#include "xqajit/decode_args.h"
#include "xqajit/error.hpp"
#include "xqajit/ops/split_plan.hpp"
#include "xqajit/tuning/tuning.hpp"

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

using Strides = ops::DecodeStrides;
using ops::resolved_strides;

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
