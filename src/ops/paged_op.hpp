#pragma once
// What every paged-KV op's launcher shares (decode, mla_decode, ...): the checks of the
// fields their params spell alike, the Q/out row strides, the launch's first steps
// (plan, workspace, kernel) and the kernel-args fields their ABI structs spell alike.
// An op keeps its own dtype/shape rules, its cache strides, its plan and its launch
// options; see docs/ADDING_AN_OP.md.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "ops/arg_checks.hpp"
#include "xqajit/ops/launch_plan.hpp"
#include "xqajit/ops/split_plan.hpp"
#include "xqajit/runtime/driver.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit::ops {

// --- checks ---

struct NamedPtr {
  const void* ptr;
  const char* name;
};

/// q and out (16-byte aligned), the op's caches (aligned), then block_table and seq_lens.
template <class Params>
void require_tensors(const char* op, const Params& p, std::initializer_list<NamedPtr> caches) {
  require_ptr(op, p.q, "q");
  require_ptr(op, p.out, "out");
  for (const NamedPtr& c : caches) require_ptr(op, c.ptr, c.name);
  require_ptr(op, p.block_table, "block_table", false);
  require_ptr(op, p.seq_lens, "seq_lens", false);
}

/// batch (a grid dimension: at most 65535) and q_len (1 to the op's max_q_len).
template <class Params>
void check_batch(const char* op, const Params& p, int max_q_len) {
  if (p.batch < 1 || p.batch > 65535) fail(op, "batch", fmt::format("= {}: allowed 1 to 65535", p.batch));
  if (p.q_len < 1 || p.q_len > max_q_len)
    fail(op, "q_len", fmt::format("= {}: allowed 1 to {}", p.q_len, max_q_len));
}

/// The block table's shape: columns used, row stride, the 2^30 keys a request may
/// address, and the page count (0 = unknown).
template <class Params>
void check_page_table(const char* op, const Params& p) {
  if (p.max_pages_per_seq < 1)
    fail(op, "max_pages_per_seq", fmt::format("= {} must be >= 1", p.max_pages_per_seq));
  if (p.block_table_stride != 0 && p.block_table_stride < p.max_pages_per_seq)
    fail(op, "block_table_stride", fmt::format("= {} is smaller than max_pages_per_seq = {}",
                                               p.block_table_stride, p.max_pages_per_seq));
  if (static_cast<std::int64_t>(p.max_pages_per_seq) * p.page_size > (1 << 30))
    fail(op, "max_pages_per_seq", "* page_size exceeds 2^30 keys");
  if (p.num_pages < 0) fail(op, "num_pages", "must be >= 0");
}

/// The split count and the KV tile the caller may force (0 = the plan's choice).
template <class Params>
void check_split_knobs(const char* op, const Params& p) {
  if (p.num_splits < 0 || p.num_splits > kMaxSplits)
    fail(op, "num_splits", fmt::format("= {}: allowed 0 (automatic) to {}", p.num_splits, kMaxSplits));
  if (p.kv_tile != 0 && !one_of(p.kv_tile, {16, 32, 64, 128}))
    fail(op, "kv_tile", fmt::format("= {}: allowed 0 (default), 16, 32, 64, 128", p.kv_tile));
}

// --- Q and out strides ---

/// Element strides of Q [batch, q_len, heads, q_row] and out [batch, q_len, heads,
/// out_row], the caller's zeros resolved to the dense layout.
struct RowStrides {
  std::int64_t q_b, q_t, q_h, o_b, o_t, o_h;
};

template <class Params>
RowStrides resolved_row_strides(const Params& p, std::int64_t heads, std::int64_t q_row, std::int64_t out_row) {
  auto pick = [](std::int64_t v, std::int64_t dflt) { return v != 0 ? v : dflt; };
  RowStrides s{};
  s.q_h = pick(p.q_stride_head, q_row);
  s.q_t = pick(p.q_stride_token, heads * q_row);
  s.q_b = pick(p.q_stride_batch, p.q_len * heads * q_row);
  s.o_h = pick(p.out_stride_head, out_row);
  s.o_t = pick(p.out_stride_token, heads * out_row);
  s.o_b = pick(p.out_stride_batch, p.q_len * heads * out_row);
  return s;
}

/// One contiguous row of a tensor: its elements, element bytes, and its name in messages.
struct Row {
  int elems;
  int elem_bytes;
  const char* name = "head_dim";
};

template <class Params>
void check_row_strides(const char* op, const Params& p, const RowStrides& s, int heads, Row q, Row out) {
  check_strides(op, "q",
                std::array<Dim, 3>{Dim{p.batch, s.q_b, "q_stride_batch"}, Dim{p.q_len, s.q_t, "q_stride_token"},
                                   Dim{heads, s.q_h, "q_stride_head"}},
                q.elems, q.elem_bytes, q.name);
  check_strides(op, "out",
                std::array<Dim, 3>{Dim{p.batch, s.o_b, "out_stride_batch"}, Dim{p.q_len, s.o_t, "out_stride_token"},
                                   Dim{heads, s.o_h, "out_stride_head"}},
                out.elems, out.elem_bytes, out.name);
}

/// Element strides of the optional log-sum-exp output lse [batch, q_len, heads] (float32),
/// the caller's zeros resolved to the dense layout.
struct LseStrides {
  std::int64_t b, t, h;
};

template <class Params>
LseStrides resolved_lse_strides(const Params& p, std::int64_t heads) {
  LseStrides s{};
  s.h = p.lse_stride_head != 0 ? p.lse_stride_head : 1;
  s.t = p.lse_stride_token != 0 ? p.lse_stride_token : heads;
  s.b = p.lse_stride_batch != 0 ? p.lse_stride_batch : p.q_len * heads;
  return s;
}

/// lse, where given: float32 entries written one by one, so any positive strides that
/// keep the rows apart.
template <class Params>
void check_lse(const char* op, const Params& p, int heads) {
  if (p.lse == nullptr) return;
  require_ptr(op, p.lse, "lse", false);
  if (reinterpret_cast<std::uintptr_t>(p.lse) % alignof(float) != 0)
    fail(op, "lse", fmt::format("({}) is not 4-byte aligned (float32 entries)", static_cast<const void*>(p.lse)));
  const LseStrides l = resolved_lse_strides(p, heads);
  check_strides(op, "lse",
                std::array<Dim, 3>{Dim{p.batch, l.b, "lse_stride_batch"}, Dim{p.q_len, l.t, "lse_stride_token"},
                                   Dim{heads, l.h, "lse_stride_head"}},
                1, 16, "one value");
}

template <class Args, class Params>
void fill_lse_args(Args& a, const Params& p, int heads) {
  if (p.lse == nullptr) return;
  const LseStrides l = resolved_lse_strides(p, heads);
  a.lse = p.lse;
  a.lse_stride_batch = l.b;
  a.lse_stride_token = l.t;
  a.lse_stride_head = l.h;
}

/// Bytes of a paged cache a launch can read: from its pointer to the end of the last
/// row (`row` elements) of the last head of page num_pages - 1, by the resolved strides;
/// 0 when num_pages is 0 (unknown). The tuner copies this much to time cold caches.
template <class Params>
std::size_t cache_span_bytes(const Params& p, std::int64_t page_stride, std::int64_t token_stride, int heads,
                             std::int64_t head_stride, int row, int elem_bytes) {
  if (p.num_pages == 0) return 0;
  const std::int64_t last =
      (p.num_pages - 1) * page_stride + (p.page_size - 1) * token_stride + (heads - 1) * head_stride;
  return static_cast<std::size_t>(last + row) * elem_bytes;
}

// --- the spec ---

/// The spec fields every op's params give alike: dtypes in, page size, q_len, the
/// tile and backend knobs (0 / auto: the spec's defaults), and the target arch.
template <class Params>
KernelSpec paged_spec(Kind kind, const Params& p, const Arch& arch) {
  KernelSpec s;
  s.kind = kind;
  s.input = p.input;
  s.kv = p.kv;
  s.page_size = p.page_size;
  s.q_len = p.q_len;
  s.arch = arch;
  s.kv_tile = p.kv_tile;  // 0: the spec's default (default_kv_tile in spec.cpp)
  s.backend = p.backend;
  return s;
}

// --- the launch ---

/// The knobs the caller left automatic from the tuning table (issue #8), where it has an
/// entry for this spec, batch and `keys` (the length the op's tuning entries are keyed by);
/// the caller takes any op-specific knob from the answer.
template <class Params>
TunedLookup take_tuned_knobs(Params& p, const KernelSpec& spec, const DeviceInfo& device, std::int64_t keys) {
  const TunedLookup tuned = tuned_choice(device, spec, p.batch, keys);
  if (tuned.source != ChoiceSource::heuristic) {
    p.kv_tile = tuned.choice.kv_tile;
    p.num_splits = tuned.choice.num_splits;
    p.backend = tuned.choice.backend;
  }
  return tuned;
}

/// The kernel-args fields every op's ABI struct spells alike: tensors, scales, the split
/// workspace (counters, then the partials), Q/out strides, the table's shape, the split.
template <class Args, class Params>
void fill_shared_args(Args& a, const Params& p, const RowStrides& s, const LaunchPlan& plan) {
  a.q = p.q;
  a.out = p.out;
  a.block_table = p.block_table;
  a.seq_lens = p.seq_lens;
  a.spec_mask = p.spec_mask;
  a.q_scale_ptr = p.q_scale_ptr;
  a.kv_scale_ptr = p.kv_scale_ptr;
  a.q_scale = p.q_scale;
  a.kv_scale = p.kv_scale;
  if (plan.merge_groups > 0) {
    a.counters = static_cast<unsigned*>(p.workspace);
    a.partial = reinterpret_cast<float*>(static_cast<char*>(p.workspace) + split_counter_bytes(plan.merge_groups));
  }
  a.q_stride_batch = s.q_b;
  a.q_stride_token = s.q_t;
  a.q_stride_head = s.q_h;
  a.o_stride_batch = s.o_b;
  a.o_stride_token = s.o_t;
  a.o_stride_head = s.o_h;
  a.block_table_stride = static_cast<int>(p.block_table_stride != 0 ? p.block_table_stride : p.max_pages_per_seq);
  a.max_pages_per_seq = p.max_pages_per_seq;
  a.batch = p.batch;
  a.num_splits = plan.num_splits;
  a.split_tokens = plan.split_tokens;
}

/// What the shared launch steps call of an op: its name (in messages), its plan, its
/// resolved strides (a RowStrides with its caches'), and the name of its workspace query
/// (in the message for a workspace that is too small).
template <class Params, class Plan, class Strides>
struct OpLaunch {
  const char* name;
  Plan (*plan)(const Params&, const DeviceInfo&);
  Strides (*strides)(const Params&);
  const char* workspace_query;
};

template <class Plan, class Strides, class Args>
struct LaunchStart {
  Driver& driver;
  Plan plan;
  const LoadedKernel& kernel;
  Strides strides;
  Args args;  ///< the shared fields filled (fill_shared_args); the op adds its own
};

/// Every launch's first steps: the checks, the plan on the stream's device, the caller's
/// workspace against it, the kernel (memory -> bundles -> disk -> remote -> NVRTC; no
/// compile while capturing), then the op's strides and its kernel args' shared fields.
template <class Args, class Params, class Plan, class Strides>
LaunchStart<Plan, Strides, Args> start_launch(const OpLaunch<Params, Plan, Strides>& op, Engine& engine,
                                              const Params& p, Stream stream) {
  validate(p);
  Driver& driver = Driver::instance();
  const int device = driver.stream_device(stream);
  Plan plan = op.plan(p, driver.device(device));
  check_workspace(op.name, p.workspace, p.workspace_bytes, plan.workspace_bytes, plan.num_splits,
                  op.workspace_query);
  const LoadedKernel& kernel = engine.kernel(plan.spec, device, stream);
  LaunchStart<Plan, Strides, Args> start{driver, std::move(plan), kernel, op.strides(p), Args{}};
  fill_shared_args(start.args, p, start.strides, start.plan);
  return start;
}

/// The plan's grid, block and shared memory; the op adds PDL and clusters.
inline LaunchConfig launch_config(const LaunchPlan& plan) {
  LaunchConfig config;
  std::copy(plan.grid, plan.grid + 3, config.grid);
  config.block[0] = plan.threads;
  config.dynamic_smem = plan.smem_bytes;
  return config;
}

}  // namespace xqajit::ops
