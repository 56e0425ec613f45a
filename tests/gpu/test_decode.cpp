// GPU tests of xqajit::decode against the CPU float64 reference: the family
// (dtypes x head dims x page sizes x groups), layouts, scales, windows, sinks,
// speculative decoding, split-KV, repeated launches and CUDA-graph replays.
// Fresh random inputs every run (the seed is printed), outputs poisoned with
// NaN before every launch, NaN planted in every unused cache slot. The grid's
// cases: tests/gpu/decode_cases.hpp.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "gpu/decode_cases.hpp"
#include "gpu/decode_problem.hpp"
#include "gpu/gpu_session.hpp"
#include "gpu/op_checks.hpp"
#include "gqa/hopper_geometry.h"
#include "ops/paged_op.hpp"
#include "xqajit/error.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/runtime/engine.hpp"

using namespace xqajit;
using namespace xqajit::testing;

namespace {

double tolerance(const DecodeCase& c) {
  if (c.output == DType::fp8) return 0.08;
  return c.input == DType::bf16 ? 0.02 : 0.006;
}

std::string describe(const DecodeCase& c) {
  std::string lens;
  for (size_t i = 0; i < c.seq_lens.size() && i < 8; ++i) lens += std::to_string(c.seq_lens[i]) + ",";
  return fmt::format("backend={} in={} kv={} out={} D={} P={} group={} Hk={} q_len={} B={} lens=[{}...] {} window={} "
                     "sinks={} scale_ptrs={} splits={} cta_rows={} lse={}",
                     to_string(c.backend), to_string(c.input), to_string(c.kv), to_string(c.output), c.head_dim, c.page_size,
                     c.group, c.num_kv_heads, c.q_len, c.seq_lens.size(), lens,
                     c.layout == KvLayout::nhd ? "NHD" : "HND", c.window, c.sinks, c.scale_ptrs,
                     c.num_splits, c.cta_rows, c.lse_layout);
}

ErrorTable& stats() {
  static ErrorTable s;
  return s;
}

double& worst_lse() {  // over every case with an lse output
  static double w = 0;
  return w;
}

// Poison, launch, compare. Returns the relative error.
double run_and_check(DecodeProblem& pr, cudaStream_t stream, bool launch = true) {
  if (launch) {
    pr.d_out.fill(0xff);  // NaN in every output dtype
    if (pr.c.lse_layout) pr.d_lse.fill(0xff);
    decode(engine(), pr.dev, stream);
    XQAJIT_CUDART_CHECK(cudaGetLastError());
  }
  XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream));
  const std::string key = fmt::format("{} {}/{}/{}", to_string(pr.dev.backend), to_string(pr.c.input),
                                      to_string(pr.c.kv), to_string(pr.c.output));
  std::vector<double> lse_want;
  const std::vector<double> want = reference_decode(pr.host, pr.c.lse_layout ? &lse_want : nullptr);
  if (pr.c.lse_layout) {
    double worst = 0;
    const int bad = lse_mismatches(pr.lse(), lse_want, worst);
    INFO(describe(pr.c) << " lse layout " << pr.c.lse_layout << ", worst |lse error| " << worst);
    CHECK(bad == 0);
    worst_lse() = std::max(worst_lse(), worst);
  }
  return check_against_reference(pr.output(), want, pr.lens, tolerance(pr.c), describe(pr.c), key, stats());
}

void prewarm(const std::vector<DecodeCase>& cases) {
  std::vector<KernelSpec> specs;
  for (const DecodeCase& c : cases) {
    DecodeParams p = c.params();
    p.cta_rows = 0;  // the rows the plan chooses are its own spec, loaded at the first launch
    specs.push_back(decode_spec(p, device().best_arch()));
  }
  prewarm_or_fail(specs, "decode");
}

}  // namespace

TEST_CASE("decode matches the float64 reference across the family", "[gpu][decode]") {
  std::vector<DecodeCase> cases = family_cases();
  const std::vector<DecodeCase> features = feature_cases();
  cases.insert(cases.end(), features.begin(), features.end());
  prewarm(cases);
  for_each_problem<DecodeProblem>(cases, [](DecodeProblem& pr, cudaStream_t s) { run_and_check(pr, s); });
  stats().print("backend in/kv/out", "decode");
  std::printf("decode lse: worst |error| %.2e over the cases with an lse output\n", worst_lse());
}

TEST_CASE("adjacent KV heads launched as 2-CTA clusters match the reference", "[gpu][decode]") {
  // The plan's kv_head_cluster rule (fp8 cache, head_dim 128, 128-key tiles, NHD rows of
  // adjacent heads contiguous, an even Hkv, splits of >= 4 tiles), randomized around it.
  std::vector<DecodeCase> cases;
  for (int i = 0; i < 8; ++i) {
    DecodeCase c;
    c.kv = DType::fp8;
    c.input = rng()() % 2 ? DType::bf16 : DType::fp16;
    c.output = rng()() % 4 == 0 ? DType::fp8 : c.input;
    c.rcp_out_scale = 2.f;
    c.group = 1 << (rng()() % 4);
    c.num_kv_heads = 2 * (1 + static_cast<int>(rng()() % 4));
    c.page_size = rng()() % 2 ? 64 : 128;
    c.q_len = i == 7 ? 4 : 1;  // speculative decoding: 4 x group columns
    if (c.q_len > 1) c.group = 4;
    // ... in one row block: the plan splits a small batch's 16 rows (h43), and head pairs need one
    if (c.q_len > 1 && c.backend != Backend::portable) c.cta_rows = 16;
    c.window = rng()() % 4 == 0 ? 1800 + static_cast<int>(rng()() % 1000) : 0;  // covers >= 4 tiles a split
    c.num_splits = 1;  // automatic would split B=1 into 2-tile splits; 2..16 splits take the split cluster
    c.sinks = rng()() % 3 == 0;
    c.lse_layout = static_cast<int>(rng()() % 3);
    c.scale_ptrs = rng()() % 2 == 0;
    draw_scales(c);
    c.seq_lens = random_lens(1 + static_cast<int>(rng()() % 5), 4000, i % 2 == 0);
    c.seq_lens[0] = 2048 + static_cast<int>(rng()() % 2000);  // splits of >= 4 tiles
    fit_draft_lengths(c);
    c.extra_pages = i % 2;
    cases.push_back(c);
  }
  prewarm(cases);
  int clustered = 0;
  for_each_problem<DecodeProblem>(cases, [&](DecodeProblem& pr, cudaStream_t s) {
    clustered += decode_plan(pr.dev, device()).kv_head_cluster == 2;
    run_and_check(pr, s);
  });
  std::fprintf(stderr, "cluster cases: %zu, launched as clusters: %d\n", cases.size(), clustered);
  const bool hopper_plans = device().best_arch().number() == 90 && cases[0].backend != Backend::portable;
  if (hopper_plans) CHECK(clustered == static_cast<int>(cases.size()));
}

TEST_CASE("splits launched as one cluster merge in shared memory and match the reference", "[gpu][decode]") {
  // DecodePlan::split_cluster (sm_90+, 2..8 splits): every split of a merge group in one
  // cluster, merged through distributed shared memory; randomized over the family.
  std::vector<DecodeCase> cases;
  for (int i = 0; i < 10; ++i) {
    DecodeCase c;
    c.input = rng()() % 2 ? DType::bf16 : DType::fp16;
    c.kv = rng()() % 2 ? DType::fp8 : c.input;
    c.output = c.kv == DType::fp8 && rng()() % 4 == 0 ? DType::fp8 : c.input;  // fp8 out needs an fp8 cache
    c.rcp_out_scale = 2.f;
    c.head_dim = i == 9 ? 256 : (rng()() % 4 == 0 ? 64 : 128);
    c.group = 1 << (rng()() % 4);
    c.num_kv_heads = 1 + static_cast<int>(rng()() % 4);
    c.page_size = 16 << (rng()() % 4);
    c.layout = rng()() % 2 ? KvLayout::hnd : KvLayout::nhd;
    c.q_len = i % 4 == 3 ? 2 + static_cast<int>(rng()() % 6) : 1;
    if (c.q_len > 1) c.group = 4;
    c.window = rng()() % 4 == 0 ? 300 + static_cast<int>(rng()() % 3000) : 0;
    c.num_splits = i % 3 == 0 ? 0 : 2 + static_cast<int>(rng()() % 7);  // automatic, or 2..8
    c.sinks = rng()() % 3 == 0;
    c.lse_layout = static_cast<int>(rng()() % 3);
    c.scale_ptrs = rng()() % 2 == 0;
    draw_scales(c);
    c.seq_lens = random_lens(1 + static_cast<int>(rng()() % 3), 6000, i % 2 == 0);  // some splits empty
    c.seq_lens[0] = 2000 + static_cast<int>(rng()() % 8000);
    fit_draft_lengths(c);
    c.extra_pages = i % 2;
    cases.push_back(c);
  }
  prewarm(cases);
  int clustered = 0, planned = 0;
  for_each_problem<DecodeProblem>(cases, [&](DecodeProblem& pr, cudaStream_t s) {
    const DecodePlan plan = decode_plan(pr.dev, device());
    if (plan.split_cluster > 1) {
      ++planned;
      LaunchConfig config = ops::launch_config(plan);  // as decode() launches it
      config.cluster[0] = static_cast<unsigned>(plan.split_cluster);
      clustered += Driver::instance().clusters_fit(engine().kernel(plan.spec, device().ordinal, s), config);
    }
    run_and_check(pr, s);
  });
  std::fprintf(stderr, "split-cluster cases: %zu, planned as clusters: %d, launched as clusters: %d\n",
               cases.size(), planned, clustered);
  if (device().best_arch().number() == 90) {  // either backend
    CHECK(planned >= static_cast<int>(cases.size()) / 2);  // forced 2..8 splits always qualify
    CHECK(clustered == planned);
  }
}

TEST_CASE("query rows split over several CTAs (cta_rows) match the reference", "[gpu][decode]") {
  // KernelSpec::cta_rows: the hopper kernel runs a KV head's rows as row blocks of 8-32,
  // asked for or the plan's small-batch rule (planned_cta_rows); randomized over the family.
  if (device().best_arch().number() != 90 || DecodeCase::test_backend() == Backend::portable) {
    WARN("skipped: rows per CTA are the hopper kernel's (sm_90a, backend hopper or auto)");
    return;
  }
  std::vector<DecodeCase> cases;
  for (int i = 0; i < 12; ++i) {
    DecodeCase c;
    c.input = rng()() % 2 ? DType::bf16 : DType::fp16;
    c.kv = rng()() % 2 ? DType::fp8 : c.input;
    c.output = c.kv == DType::fp8 && rng()() % 4 == 0 ? DType::fp8 : c.input;
    c.rcp_out_scale = 2.f;
    c.head_dim = i % 6 == 5 ? (i % 4 == 1 ? 64 : 256) : 128;
    c.group = 4 << (rng()() % 3);  // 4, 8, 16
    c.q_len = i % 4 == 0 ? 1 : 2 + static_cast<int>(rng()() % 7);
    if (c.q_len == 1) c.group = 16 << (rng()() % 3);  // 16-64 rows of one token
    c.num_kv_heads = 1 + static_cast<int>(rng()() % 3);
    c.page_size = 16 << (rng()() % 4);
    c.layout = rng()() % 2 ? KvLayout::hnd : KvLayout::nhd;
    c.window = rng()() % 4 == 0 ? 100 + static_cast<int>(rng()() % 2000) : 0;
    c.num_splits = rng()() % 2 ? 0 : 2 + static_cast<int>(rng()() % 10);  // automatic, or 2..11
    c.sinks = rng()() % 3 == 0;
    c.lse_layout = static_cast<int>(rng()() % 3);
    c.scale_ptrs = rng()() % 2 == 0;
    draw_scales(c);
    // Asked for (8, 16 or 32 rows per CTA, below the kernel's own N: a row block), or 0: the
    // plan's choice, which splits the rows of speculative decoding at head_dim 128 where
    // batch x KV heads is small (as here). 8 rows (group 4 x q_len 2) have no smaller block.
    const int n = xqajit_gqa_hopper_n(c.group * c.q_len, c.head_dim);
    int below = 0;  // how many of 8, 16, 32 lie below N
    while (below < 3 && (8 << below) < n) ++below;
    c.cta_rows = i % 3 == 2 || below == 0 ? 0 : 8 << (rng()() % below);
    c.seq_lens = random_lens(1 + static_cast<int>(rng()() % 3), 5000, i % 2 == 0);
    fit_draft_lengths(c);
    cases.push_back(c);
  }
  prewarm(cases);
  int row_blocked = 0, asked = 0;  // cases whose CTAs hold fewer rows than the kernel's N; asked so
  for_each_problem<DecodeProblem>(cases, [&](DecodeProblem& pr, cudaStream_t s) {
    const DecodePlan plan = decode_plan(pr.dev, device());
    if (pr.c.cta_rows != 0) {
      REQUIRE(plan.spec.backend == Backend::hopper);  // asking for rows asks for it
      CHECK(plan.spec.cta_rows == pr.c.cta_rows);
      ++asked;
    }
    row_blocked += plan.spec.cta_rows != 0;
    run_and_check(pr, s);
  });
  std::fprintf(stderr, "row-block cases: %zu, in smaller row blocks than the default: %d (%d asked for)\n",
               cases.size(), row_blocked, asked);
  CHECK(asked >= 4);  // 8 of 12 ask; only a group-4 q_len-2 draw cannot
  CHECK(row_blocked >= asked);
}

TEST_CASE("split-KV counters reset themselves across launches", "[gpu][decode]") {
  DecodeCase c;
  c.kv = DType::fp8;
  c.kv_scale = 0.4f;
  c.num_splits = 6;
  c.seq_lens = {4000, 1, 0, 2500};
  DecodeProblem pr(c, rng(), device());
  check_counters_reset(pr, c.seq_lens, 4, pr.dev.batch * pr.dev.num_kv_heads,
                       [](DecodeProblem& p, cudaStream_t s) { run_and_check(p, s); });
}

TEST_CASE("a captured CUDA graph replays with new lengths and device-side scales", "[gpu][decode]") {
  DecodeCase c;
  c.kv = DType::fp8;
  c.scale_ptrs = true;
  c.kv_scale = 0.3f;
  c.num_splits = 4;
  c.sinks = true;
  c.lse_layout = 1;  // a replay writes lse for the new lengths too (the empty request: +inf)
  c.seq_lens = {1800, 0, 999, 64, 2048};
  DecodeProblem pr(c, rng(), device());
  CudaStream stream;
  run_and_check(pr, stream.get());  // loads the kernel: nothing compiles during capture

  const CapturedGraph graph(stream.get(), [&](cudaStream_t s) { decode(engine(), pr.dev, s); });
  for (int round = 0; round < 3; ++round) {
    draw_lengths(pr.lens, c.seq_lens, 0);
    pr.scales = {0.5f + round * 0.4f, 0.2f + round * 0.15f, 1.f};
    pr.host.q_scale = pr.scales[0];
    pr.host.kv_scale = pr.scales[1];
    pr.d_lens.upload(pr.lens);
    pr.d_scales.upload(pr.scales);
    pr.d_out.fill(0xff);
    graph.replay();
    run_and_check(pr, stream.get(), /*launch=*/false);
  }
}

// Programmatic dependent launch: the second decode's q is the first one's output
// and both share one workspace, launched back to back with nothing in between.
// A read of q (or a write of the workspace) before the kernel's griddepcontrol.wait
// would see NaN poison or clobber the first launch's partials.
TEST_CASE("chained decodes see their upstream kernel's writes (PDL on and off)", "[gpu][decode]") {
  for (const bool pdl : {true, false}) {
    DecodeCase c;
    c.num_splits = 8;
    c.seq_lens = {7000, 0, 2047};
    DecodeProblem first(c, rng(), device());
    c.seq_lens = {3000, 513, 1};
    DecodeProblem second(c, rng(), device());
    REQUIRE(second.d_q.bytes() == first.d_out.bytes() - 16);  // same layout, same dtype
    first.dev.programmatic_dependent_launch = pdl;
    second.dev.programmatic_dependent_launch = pdl;
    second.dev.q = first.dev.out;
    second.dev.workspace = first.dev.workspace;
    REQUIRE(second.dev.workspace_bytes == first.dev.workspace_bytes);
    CudaStream stream;
    decode(engine(), first.dev, stream.get());  // loads the kernel
    XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream.get()));
    for (int round = 0; round < 3; ++round) {
      first.d_out.fill(0xff);
      second.d_out.fill(0xff);
      XQAJIT_CUDART_CHECK(cudaDeviceSynchronize());  // the poison lands before the chain starts
      decode(engine(), first.dev, stream.get());
      decode(engine(), second.dev, stream.get());
      XQAJIT_CUDART_CHECK(cudaGetLastError());
      XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream.get()));
      INFO("pdl=" << pdl << " round " << round);
      run_and_check(first, stream.get(), /*launch=*/false);
      first.d_out.download(second.q.data(), second.q.size());  // the q the second launch read
      run_and_check(second, stream.get(), /*launch=*/false);
    }
  }
}

TEST_CASE("decode rejects a missing or short workspace before launching", "[gpu][decode]") {
  DecodeCase c;
  c.num_splits = 3;
  c.seq_lens = {1000};
  DecodeProblem pr(c, rng(), device());
  check_workspace_refusals(pr.dev, [](const DecodeParams& p, cudaStream_t s) { decode(engine(), p, s); });
}
