// GPU tests of xqajit::mla_decode against the CPU float64 reference, for every
// backend this GPU runs (hopper and portable on sm_90a): a randomized grid over
// dtypes, heads, page sizes, q_len (causal and explicit masks), ragged batches
// with empty requests, strides, shared prefix pages, device-side scales, split
// and unsplit; self-resetting split counters; a captured graph replayed with new
// lengths and scales. Fresh random inputs every run (the seed is printed),
// outputs poisoned with NaN before every launch, NaN in every unused cache slot.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "gpu/gpu_session.hpp"
#include "gpu/mla_problem.hpp"
#include "gpu/op_checks.hpp"
#include "xqajit/engine.hpp"
#include "xqajit/error.hpp"
#include "mla/hopper_geometry.h"
#include "xqajit/ops/mla_decode.hpp"

using namespace xqajit;
using namespace xqajit::testing;

namespace {

std::vector<Backend> backends() {
  auto v = backends_for(Kind::mla, device().best_arch());
  if (const char* only = std::getenv("XQAJIT_TEST_MLA_BACKEND")) v = {parse_backend(only)};
  return v;
}

// bf16 operands (P rounded to bf16 too): ~3e-3 typical; fp8 Q and cache are
// exact in bf16, so the same bound holds (an fp8ds value is rounded to bf16 in the
// reference too, as FlashMLA's dequantisation does).
constexpr double kTolerance = 0.02;
// fp8 Q and cache on the fp8 tensor cores (mla/hopper_qgmma.cuh): P itself is e4m3 (3
// mantissa bits, ~2.5 % rms a value), which these uniform random rows average only
// partly. Reported under its own key; a wrong fragment or scale is off by O(1).
constexpr double kFp8PTolerance = 0.06;

// The fp8 tensor cores' cases (mla/hopper_qgmma.cuh): an fp8 Q's (P in e4m3) and a bf16 Q's
// (Q and P split into two e4m3 planes, held to the bf16 tolerance).
bool qgmma(const MlaCase& c) {
  const int row_bytes = xqajit_mla_row_bytes(dtype_bytes(c.kv), c.kv == DType::fp8ds ? 1 : 0);
  return c.backend == Backend::hopper &&
         xqajit_mla_hopper_qgmma(c.heads, c.q_len, row_bytes, c.input == DType::fp8 ? 1 : 2, 0);
}
bool fp8_p(const MlaCase& c) { return qgmma(c) && c.input == DType::fp8; }

std::string describe(const MlaCase& c) {
  std::string lens;
  for (size_t i = 0; i < c.seq_lens.size() && i < 6; ++i) lens += std::to_string(c.seq_lens[i]) + ",";
  return fmt::format("backend={} q={} kv={} H={} P={} q_len={} B={} lens=[{}...] scale_ptrs={} padded={} "
                     "mask={} shared={} pages_unknown={} splits={}",
                     to_string(c.backend), to_string(c.input), to_string(c.kv), c.heads, c.page_size, c.q_len,
                     c.seq_lens.size(), lens, c.scale_ptrs, c.padded, c.explicit_mask, c.shared_prefix_pages,
                     c.pages_unknown, c.num_splits);
}

ErrorTable& stats() {
  static ErrorTable s;
  return s;
}
// Split cases, by where their partials merged (merged_by_rows: of the launches, those of 16 rows a
// merge CTA, m92).
int merged_by_last_cta = 0, merged_by_launch = 0, merged_in_cluster = 0, merged_by_rows = 0;
// Launches of the hopper balanced plan (walkers over the batch's tiles, m77), and of a small
// batch's shares (m84).
int balanced_launches = 0, share_launches = 0;

double check_output(MlaProblem& pr, cudaStream_t stream) {
  XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream));
  const bool p8 = fp8_p(pr.c);
  const std::string key = fmt::format("{} {}/{}{}", to_string(pr.c.backend), to_string(pr.c.input),
                                      to_string(pr.c.kv), p8 ? " (e4m3 P)" : qgmma(pr.c) ? " (split Q, P)" : "");
  const Fp8dsValues values = fp8ds_values(pr.c.backend, pr.c.heads, pr.c.q_len, false);
  return check_against_reference(pr.output(), reference_mla_decode(pr.host, nullptr, values), pr.lens,
                                 p8 ? kFp8PTolerance : kTolerance,
                                 describe(pr.c), key, stats());
}

double run_and_check(MlaProblem& pr, cudaStream_t stream) {
  const MlaDecodePlan plan = mla_decode_plan(pr.dev, device());
  // (a split cluster falls back to the last CTA where the device cannot hold every cluster)
  if (plan.num_splits > 1)
    ++(plan.merge_launch ? merged_by_launch : plan.split_cluster > 1 ? merged_in_cluster : merged_by_last_cta);
  if (plan.balanced_parts > 0) ++(plan.merge_launch ? share_launches : balanced_launches);
  if (plan.merge_launch && plan.merge_rows > 1) ++merged_by_rows;
  pr.d_out.fill(0xff);  // NaN in bf16
  mla_decode(engine(), pr.dev, stream);
  XQAJIT_CUDART_CHECK(cudaGetLastError());
  return check_output(pr, stream);
}

// Ragged lengths whose reference cost (sum of L x H x q_len) stays bounded.
std::vector<int> random_lens(int batch, int heads, int q_len, bool with_zero) {
  const long budget = 3'000'000;
  const int max_len = static_cast<int>(std::min<long>(32768, budget / (long(batch) * heads * q_len)));
  std::uniform_int_distribution<int> u(0, std::max(1, max_len));
  std::vector<int> v(batch);
  for (int& x : v) x = u(rng());
  if (with_zero) v[rng()() % batch] = 0;
  return v;
}

MlaCase random_case(Backend backend, int i) {
  MlaCase c;
  c.backend = backend;
  cycle_dtypes(c, i, device_has_fp8());
  // Serving shapes (H 16/128, page 64, q_len 1/2) most of the time, the rest of the grid often.
  const bool serving = rng()() % 3 != 0;
  c.heads = serving ? pick({16, 128}) : pick({16, 32, 64, 128});
  c.page_size = serving ? 64 : pick({32, 64});
  c.q_len = serving ? pick({1, 1, 2}) : pick({1, 2, 3, 4});
  const int batch = pick({1, 2, 3, 5, 8, 17, 33, 64});
  c.seq_lens = random_lens(batch, c.heads, c.q_len, batch > 1 && rng()() % 2 == 0);
  c.scale_ptrs = rng()() % 3 == 0;
  c.padded = rng()() % 3 == 0;
  c.explicit_mask = c.q_len > 1 && rng()() % 2 == 0;
  c.shared_prefix_pages = rng()() % 4 == 0 ? 1 + static_cast<int>(rng()() % 4) : 0;
  c.pages_unknown = rng()() % 4 == 0;
  c.num_splits = pick({0, 0, 0, 1, 2, 7, 16});
  random_scales(c, rng());
  return c;
}

// More (request, row block) CTAs than SMs (H 64/128, q_len 1-4): grids of two waves or
// more with short ragged lengths (empty, one-tile, odd and even tile counts), and now and
// then a longer batch whose CTAs reach the seesaw's steady step.
MlaCase past_one_wave_case(Backend backend, bool longer) {
  MlaCase c;
  c.backend = backend;
  c.heads = pick({64, 128, 128});
  c.q_len = longer ? 1 : pick({1, 2, 4});
  if (c.heads == 64 && c.q_len == 1) c.q_len = 2;  // two row blocks at least
  const int row_blocks = (c.heads * c.q_len + 63) / 64;
  const int batch = device().sm_count / row_blocks + 1 + static_cast<int>(rng()() % 24);
  if (longer) {
    c.seq_lens.resize(batch);
    for (int& len : c.seq_lens) len = 500 + static_cast<int>(rng()() % 400);  // 8-14 tiles
  } else {
    c.seq_lens = random_lens(batch, c.heads, c.q_len, true);
  }
  c.explicit_mask = c.q_len > 1 && rng()() % 2 == 0;
  c.scale_ptrs = rng()() % 2 == 0;
  c.padded = rng()() % 3 == 0;
  c.shared_prefix_pages = rng()() % 3 == 0 ? 1 : 0;
  return c;
}

// q_len 2 over 64 heads (128 rows) with a mask, pages of 32, shared prefix pages, padded
// strides and device scales.
void with_awkward_layouts(MlaCase& c) {
  c.heads = 64;
  c.q_len = 2;
  c.explicit_mask = true;
  c.page_size = 32;
  c.shared_prefix_pages = 2;
  c.padded = true;
  c.scale_ptrs = true;
}

// Batches the hopper backend runs as the balanced plan (bf16, 128 rows or more, the launcher's
// one split a request: B x row blocks from half the SMs to all of them, and past one wave):
// walkers whose ranges cut requests into pieces (merged by the last to arrive), requests wholly
// inside a range (their own CTA), empty requests, one long request over many walkers,
// all-empty batches, q_len 4 (eight row blocks), even lengths and ragged batches of two waves
// (a CTA a request, the longest first: the plan's other mode) and the awkward layouts; the
// portable backend runs them as usual.
MlaCase balanced_case(Backend backend, int i) {
  MlaCase c;
  c.backend = backend;
  c.heads = i % 3 == 2 ? 64 : 128;
  c.q_len = c.heads == 64 ? 2 : i == 4 ? 4 : 1;
  const int row_blocks = c.heads * c.q_len / 64;
  const int half_wave = device().sm_count / (2 * row_blocks);
  // Half a wave to one (i < 6), or one to three waves (i >= 6).
  const int lo = i < 6 ? half_wave + 1 : 2 * half_wave + 1, span = i < 6 ? half_wave : 4 * half_wave;
  // (i == 2: half a wave exactly, B=33 at 128 rows, which the split planner gave 2 splits)
  const int batch = i == 2 ? half_wave : lo + static_cast<int>(rng()() % span);
  c.seq_lens.resize(batch);
  for (int& len : c.seq_lens) len = static_cast<int>(rng()() % (i == 1 ? 900 : 300));
  if (i == 0 || i == 7) c.seq_lens[rng()() % batch] = 4000 + static_cast<int>(rng()() % 2000);  // over many walkers
  // Past one wave the host plans a table of 64 tiles or more only: short requests in a wide one.
  if (i == 6) c.extra_pages = 64;
  if (i == 3) std::fill(c.seq_lens.begin(), c.seq_lens.end(), 0);
  if (i == 5) std::fill(c.seq_lens.begin(), c.seq_lens.end(), 1000);  // even: a CTA a request
  if (i != 3 && i != 5) c.seq_lens[rng()() % batch] = 0;
  if (c.heads == 64) with_awkward_layouts(c);
  c.explicit_mask = c.q_len > 1 && i % 2 == 0;
  if (i == 1) c.sm_scale *= 16.f;  // sharp logits (m75's lazy max) across pieces
  c.scale_ptrs = c.scale_ptrs || rng()() % 2 == 0;
  return c;
}

// Small batches the hopper backend runs as shares (bf16, 128 rows or more, the launcher's
// splits of more than 8 tiles, up to 32 requests: m84): a long request cut into many pieces beside short
// ones, empty requests, even lengths in a wide table (the launcher's split shape), q_len 2 over
// 64 heads with the awkward layouts, sharp logits across pieces; the portable backend runs
// them as usual. i == 4: 26-32 requests of 2000-4100 keys, cut into one to three pieces, two
// mostly (the split planner's 2 splits).
MlaCase shares_case(Backend backend, int i) {
  MlaCase c;
  c.backend = backend;
  c.heads = 128;
  if (i == 4) {
    c.seq_lens.resize(26 + rng()() % 7);
    for (int& len : c.seq_lens) len = 2000 + static_cast<int>(rng()() % 2100);
    c.sm_scale *= 16.f;  // sharp logits across the pieces
    c.scale_ptrs = rng()() % 2 == 0;
    return c;
  }
  // (i == 3: up to 32 requests, where the split grid had 2 splits a request)
  const int batch = i == 1 ? 8 : 3 + static_cast<int>(rng()() % (i == 3 ? 30 : 6));
  c.seq_lens.resize(batch);
  for (int& len : c.seq_lens) len = static_cast<int>(rng()() % (i == 3 ? 500 : 3000));
  c.seq_lens[rng()() % batch] = 8000 + static_cast<int>(rng()() % 4000);  // over many pieces
  if (i != 1) c.seq_lens[rng()() % batch] = 0;
  if (i == 1) {  // even, in a table of 97 tiles: the launcher's split shape
    std::fill(c.seq_lens.begin(), c.seq_lens.end(), 2100);
    c.extra_pages = 64;
  }
  if (i == 2) with_awkward_layouts(c);
  c.explicit_mask = c.q_len > 1;
  if (i == 3) c.sm_scale *= 16.f;  // sharp logits (m75's lazy max) across pieces
  c.scale_ptrs = c.scale_ptrs || rng()() % 2 == 0;
  return c;
}

void prewarm(const std::vector<MlaCase>& cases) {
  std::vector<KernelSpec> specs;
  for (const MlaCase& c : cases) specs.push_back(mla_decode_spec(c.params(), device().best_arch()));
  prewarm_or_fail(specs, "MLA");
}

}  // namespace

TEST_CASE("mla_decode matches the float64 reference on a randomized grid", "[gpu][mla]") {
  const int per_backend = std::getenv("XQAJIT_TEST_MLA_CASES") ? std::atoi(std::getenv("XQAJIT_TEST_MLA_CASES")) : 36;
  std::vector<MlaCase> cases;
  for (Backend b : backends()) {
    for (int i = 0; i < per_backend; ++i) cases.push_back(random_case(b, i));
    MlaCase lone;  // one long request across the GPU (split-KV), both head counts
    lone.backend = b;
    lone.seq_lens = {32768};
    lone.heads = 128;
    cases.push_back(lone);
    lone.heads = 16;
    lone.input = lone.kv = DType::fp8;
    lone.q_scale = 0.3f;
    lone.kv_scale = 0.2f;
    lone.seq_lens = {20001};
    cases.push_back(lone);
    // 32 rows (the hopper narrow schedule's wider N): H=32 at q_len 1 and H=16 at q_len 2 with
    // a mask, every cache dtype, ragged with an empty request, splits of the launcher's choice.
    for (int i = 0; i < 4; ++i) {
      MlaCase narrow;
      narrow.backend = b;
      cycle_dtypes(narrow, i, device_has_fp8());
      narrow.heads = i % 2 == 0 ? 32 : 16;
      narrow.q_len = i % 2 == 0 ? 1 : 2;
      narrow.explicit_mask = narrow.q_len > 1;
      narrow.seq_lens = random_lens(5, narrow.heads, narrow.q_len, true);
      narrow.padded = i == 1;
      narrow.scale_ptrs = i == 2;
      random_scales(narrow, rng());
      cases.push_back(narrow);
    }
    // 16 rows over every fp8 cache (hopper: the narrow schedule on the fp8 tensor cores, each
    // warpgroup on its own tiles, m43; fp8ds with an S^T accumulator and a P^T plane a scale
    // group, m51): ragged with an empty request, a split count of the launcher's choice, two
    // (the cluster) and seven (a merge launch).
    for (int i = 1; i < 4 && device_has_fp8(); ++i) {
      MlaCase raw;
      raw.backend = b;
      cycle_dtypes(raw, i, true);
      raw.heads = 16;
      raw.seq_lens = random_lens(9, raw.heads, 1, true);
      raw.num_splits = i == 1 ? 0 : i == 2 ? 2 : 7;
      raw.padded = i == 2;
      raw.scale_ptrs = i == 3;
      random_scales(raw, rng());
      cases.push_back(raw);
    }
    MlaCase pair;  // two splits of 16 rows: the last CTA merges (32 split rows; hopper: the split cluster)
    pair.backend = b;
    pair.seq_lens = {3000, 700};
    pair.num_splits = 2;
    cases.push_back(pair);
    // The hopper backend's seesaw (two row blocks or more, bf16 cache, splits of more than
    // 8 tiles): odd and even tile counts, partial last tiles, a one-tile and an empty
    // request beside them; then q_len 2 over 64 heads (128 rows) with a mask, pages of 32,
    // shared prefix pages, padded strides, device scales and two splits.
    MlaCase seesaw;
    seesaw.backend = b;
    seesaw.heads = 128;
    seesaw.seq_lens = {4100, 777, 0, 1500, 64};
    seesaw.num_splits = 1;
    cases.push_back(seesaw);
    with_awkward_layouts(seesaw);
    seesaw.seq_lens = {2000, 3333};
    seesaw.num_splits = 2;
    cases.push_back(seesaw);
    for (int i = 0; i < 4; ++i) cases.push_back(past_one_wave_case(b, i == 0));
    for (int i = 0; i < 8; ++i) cases.push_back(balanced_case(b, i));
    for (int i = 0; i < 5; ++i) cases.push_back(shares_case(b, i));
    MlaCase empty;  // every request empty, with splits
    empty.backend = b;
    empty.seq_lens = {0, 0, 0};
    empty.num_splits = 4;
    cases.push_back(empty);
    // Logits spread 16 x wider than the grid's (hopper: the lazy rescaling of m75, where the
    // running max moves only by more than 2^8): a tile's max often passes the running one by
    // more than that (the max moves, O rescales) and often by less (it stays, P reaches up to
    // 2^8). The seesaw (128 heads, one split), the per-tile schedule (64 heads, the
    // launcher's splits) and 16 rows (the narrow schedule, which rescales eagerly), bf16
    // throughout.
    for (int heads : {128, 64, 16}) {
      MlaCase sharp;
      sharp.backend = b;
      sharp.heads = heads;
      sharp.seq_lens = heads == 64 ? std::vector<int>{3000, 1234} : std::vector<int>{4100, 900};
      sharp.num_splits = heads == 64 ? 0 : 1;
      sharp.sm_scale *= 16.f;
      cases.push_back(sharp);
    }
  }
  for (Backend b : backends()) for (DType input : {DType::fp8, DType::bf16}) {
    if (!device_has_fp8()) break;
    // fp8 and bf16 Q over an fp8 cache, 32 rows or more (hopper: the fp8 tensor cores, m35,
    // m39): the seesaw's tile counts and tails with scales as given, the awkward layouts with
    // two splits (the cluster), 32 heads at q_len 4 with a mask and seven splits (a merge
    // launch), and one long request in the launcher's many short splits.
    MlaCase q8;
    q8.backend = b;
    q8.input = input;
    q8.kv = DType::fp8;
    q8.heads = 128;
    q8.seq_lens = {4100, 777, 0, 1500, 64};
    q8.num_splits = 1;
    random_scales(q8, rng());
    cases.push_back(q8);
    with_awkward_layouts(q8);
    q8.seq_lens = {2000, 3333};
    q8.num_splits = 2;
    cases.push_back(q8);
    q8.heads = 32;
    q8.q_len = 4;
    q8.padded = false;
    q8.seq_lens = {5000, 90, 2047};
    q8.num_splits = 7;
    cases.push_back(q8);
    // Dense fp8ds at 16 rows (m51) on random layouts and splits, and one long request along
    // which the scale groups' largest scales move (O^T's group blocks follow them).
    for (int i = 0; i < 6 && device_has_fp8(); ++i) {
      MlaCase ds;
      ds.backend = b;
      ds.input = DType::bf16;
      ds.kv = DType::fp8ds;
      ds.heads = 16;
      ds.page_size = pick({32, 64});
      const int batch = pick({1, 3, 9, 33});
      ds.seq_lens = i == 0 ? std::vector<int>{40000} : random_lens(batch, 16, 1, batch > 1);
      ds.num_splits = i == 0 ? 0 : pick({0, 0, 1, 2, 7, 16});
      ds.padded = rng()() % 2 == 0;
      ds.scale_ptrs = rng()() % 2 == 0;
      ds.shared_prefix_pages = rng()() % 3 == 0 ? 1 : 0;
      ds.pages_unknown = rng()() % 4 == 0;
      random_scales(ds, rng());
      cases.push_back(ds);
    }
    q8.heads = 128;
    q8.q_len = 1;
    q8.explicit_mask = false;
    q8.page_size = 64;
    q8.shared_prefix_pages = 0;
    q8.seq_lens = {30001};
    q8.num_splits = 0;
    cases.push_back(q8);
    if (input != DType::fp8) continue;  // (the cases below once)
    MlaCase ds;  // the fp8-with-scales cache: a long split request, then the awkward layouts
    ds.backend = b;
    ds.kv = DType::fp8ds;
    ds.heads = 128;
    ds.seq_lens = {20001};
    cases.push_back(ds);
    with_awkward_layouts(ds);
    ds.kv_scale = 0.7f;
    ds.seq_lens = {2000, 0, 3333, 17};
    ds.num_splits = 2;
    cases.push_back(ds);
  }
  prewarm(cases);
  for_each_problem<MlaProblem>(cases, run_and_check);
  stats().print("backend q/kv", "mla");
  std::fprintf(stderr,
               "split cases merged by the last CTA: %d, by a merge launch: %d (of 16 rows a CTA: %d), in a "
               "cluster: %d; balanced launches: %d, shares: %d\n",
               merged_by_last_cta, merged_by_launch, merged_by_rows, merged_in_cluster, balanced_launches,
               share_launches);
  // Every merge ran: the last CTA's on the portable backend (hopper merges two splits in a
  // cluster and more in a merge launch), the cluster's on hopper.
  const std::vector<Backend> ran = backends();
  const auto runs = [&](Backend b) { return std::find(ran.begin(), ran.end(), b) != ran.end(); };
  if (runs(Backend::portable)) CHECK(merged_by_last_cta > 0);
  if (runs(Backend::hopper)) CHECK(merged_in_cluster > 0);
  if (runs(Backend::hopper)) CHECK(balanced_launches > 0);
  if (runs(Backend::hopper)) CHECK(share_launches > 0);
  if (runs(Backend::hopper)) CHECK(merged_by_rows > 0);
  CHECK(merged_by_launch > 0);
}

TEST_CASE("mla split-KV counters reset themselves across launches", "[gpu][mla]") {
  for (Backend b : backends()) {
    MlaCase c;  // bf16 Q
    c.backend = b;
    c.kv = DType::fp8;
    c.kv_scale = 0.4f;
    c.num_splits = 6;
    c.heads = 128;
    c.seq_lens = {4000, 1, 0, 2500};
    MlaProblem pr(c, rng(), device());
    const std::size_t counters = pr.dev.batch * mla_decode_plan(pr.dev, device()).grid[1];
    check_counters_reset(pr, c.seq_lens, 3, counters, run_and_check);
  }
}

// The whole call inside a captured graph between a producer (writes Q) and a
// consumer (reads the output), replayed with new lengths and device-side scales:
// the plan depends only on host-known maxima, so nothing needs re-capturing.
TEST_CASE("mla_decode inside a captured graph replays with new lengths and scales", "[gpu][mla]") {
  for (Backend b : backends())
    for (int variant = 0; variant < 3; ++variant) {
      const bool past_one_wave = variant == 1, shares = variant == 2;
      MlaCase c;
      c.backend = b;
      c.input = c.kv = DType::fp8;
      c.scale_ptrs = true;
      c.q_scale = 0.3f;
      c.kv_scale = 0.2f;
      c.q_len = 2;
      c.heads = 16;
      c.num_splits = 4;
      c.seq_lens = {1800, 0, 999, 64, 2048};
      if (past_one_wave) {  // bf16, H=128, more CTAs than SMs
        c.input = c.kv = DType::bf16;
        c.heads = 128;
        c.num_splits = 0;
        c.seq_lens.assign(device().sm_count / 4 + 3, 0);
        for (int& len : c.seq_lens) len = static_cast<int>(rng()() % 700);
      }
      if (shares) {  // bf16, H=128, a small batch (hopper: its shares, m84)
        c.input = c.kv = DType::bf16;
        c.heads = 128;
        c.num_splits = 0;
        c.seq_lens = {9000, 300, 0, 4000, 1200, 64};
      }
      MlaProblem pr(c, rng(), device());
      CudaStream stream;
      run_and_check(pr, stream.get());  // loads the kernel: nothing compiles during capture

      DeviceBuffer staged_q(pr.d_q.bytes()), consumed(pr.d_out.bytes());
      const CapturedGraph graph(stream.get(), [&](cudaStream_t s) {
        XQAJIT_CUDART_CHECK(
            cudaMemcpyAsync(pr.d_q.get(), staged_q.get(), pr.d_q.bytes(), cudaMemcpyDeviceToDevice, s));
        mla_decode(engine(), pr.dev, s);
        XQAJIT_CUDART_CHECK(
            cudaMemcpyAsync(consumed.get(), pr.d_out.get(), pr.d_out.bytes(), cudaMemcpyDeviceToDevice, s));
      });
      for (int round = 0; round < 3; ++round) {
        draw_lengths(pr.lens, c.seq_lens, 0);
        for (std::size_t i = 0; i < pr.q.size(); ++i)
          if (rng()() % 2 == 0) pr.q[i] ^= 0x01;  // a new Q (finite: random codes stay below 2^5)
        pr.scales = {0.2f + round * 0.1f, 0.1f + round * 0.15f};
        staged_q.upload(pr.q);
        pr.d_lens.upload(pr.lens);
        pr.d_scales.upload(pr.scales);
        pr.d_out.fill(0xff);
        graph.replay();
        XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream.get()));
        XQAJIT_CUDART_CHECK(
            cudaMemcpy(pr.d_out.get(), consumed.get(), pr.d_out.bytes(), cudaMemcpyDeviceToDevice));
        INFO("graph replay round " << round << " variant " << variant << " (1: past one wave, 2: shares)");
        check_output(pr, stream.get());
      }
    }
}

TEST_CASE("mla_decode refuses bad arguments before launching", "[gpu][mla]") {
  MlaCase c;
  c.backend = backends().front();
  c.num_splits = 3;
  c.seq_lens = {1000};
  MlaProblem pr(c, rng(), device());
  check_workspace_refusals(pr.dev,
                           [](const MlaDecodeParams& p, cudaStream_t s) { mla_decode(engine(), p, s); });
  CudaStream stream;
  MlaDecodeParams p = pr.dev;
  p.sm_scale = 0.f;
  CHECK_THROWS_WITH(mla_decode(engine(), p, stream.get()), Catch::Contains("sm_scale"));
}
