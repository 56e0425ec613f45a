// GPU tests of sparse MLA decode (DSA, DeepSeek-V3.2: per-token top-k index lists) and of
// the LSE / attention-sink outputs of every MLA kernel, against the CPU float64 reference
// (tests/support/mla_reference.cpp). A randomized grid: index lists with duplicates, -1
// and out-of-range entries, all-invalid rows, topk_length shorter (and longer, and
// negative) than topk, slots in pages that several requests select, NaN in every cache
// slot no list selects, padded index strides, both LSE layouts ([B, q_len, H] and
// FlashMLA's [B, H, q_len]), sinks including -inf and +inf; outputs and LSE poisoned with
// NaN before every launch; a captured graph replayed with new indices and lengths.
// Fresh random inputs every run (the seed is printed; XQAJIT_TEST_SEED replays one).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "gpu/gpu_session.hpp"
#include "gpu/mla_problem.hpp"
#include "gpu/op_checks.hpp"
#include "xqajit/error.hpp"
#include "xqajit/ops/mla_decode.hpp"

using namespace xqajit;
using namespace xqajit::testing;

namespace {

constexpr double kTolerance = 0.02;  // bf16 operands, as tests/gpu/test_mla_decode.cpp
constexpr float kInfF = std::numeric_limits<float>::infinity();

struct SparseCase {
  DType input = DType::bf16, kv = DType::bf16;
  int heads = 128, page_size = 64, q_len = 1, batch = 2, topk = 2048, num_pages = 64;
  bool topk_length = false;
  bool zero_lengths = false;  // every topk_length 0 (with topk_length)
  bool padded = false;   // index lists and cache rows with padding between them
  int lse_layout = 1;    // 0: none, 1: [B, q_len, H], 2: [B, H, q_len] (FlashMLA's)
  bool sinks = false;
  int num_splits = 0;
  Backend backend = Backend::automatic;
  float sm_scale = 0.0721687836f;
  float q_scale = 1.f, kv_scale = 1.f;

  /// The params' dtypes, shapes, scales and knobs (no pointers, dense strides).
  MlaDecodeParams params() const {
    MlaDecodeParams p = shared_params<MlaDecodeParams>(*this);
    p.num_heads = heads;
    p.num_pages = num_pages;
    p.topk = topk;
    p.sm_scale = sm_scale;
    return p;
  }
};

std::string describe(const SparseCase& c) {
  return fmt::format("backend={} q={} kv={} H={} P={} q_len={} B={} topk={} pages={} topk_length={} padded={} "
                     "lse={} sinks={} splits={}",
                     to_string(c.backend), to_string(c.input), to_string(c.kv), c.heads, c.page_size, c.q_len,
                     c.batch, c.topk,
                     c.num_pages, c.topk_length, c.padded, c.lse_layout, c.sinks, c.num_splits);
}

struct SparseProblem {
  static constexpr int kQk = 576, kV = 512;
  SparseCase c;
  MlaDecodeParams host, dev;
  std::vector<std::uint8_t> q, kv;
  std::vector<std::int32_t> indices, lengths;
  std::vector<float> sinks;
  DeviceBuffer d_q, d_out, d_kv, d_indices, d_lengths, d_lse, d_sinks, d_ws;
  std::int64_t ix_t = 0, ix_b = 0, kv_tok = 0, kv_page = 0;
  std::size_t out_elems = 0, lse_elems = 0;

  // A fresh set of index lists (and lengths); marks the slots they select in `used`.
  void random_lists(std::mt19937& rng, std::vector<char>& used) {
    const int B = c.batch, Q = c.q_len, K = c.topk;
    const std::int64_t slots = std::int64_t(c.num_pages) * c.page_size;
    indices.assign(std::size_t(B) * ix_b, -7);  // padding between lists: never read
    // Requests draw from their own quarter of the cache and from a region every request
    // shares (pages selected by several requests, as prefix caching gives).
    const std::int64_t shared = std::max<std::int64_t>(1, slots / 4);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Q; ++t) {
        std::int32_t* list = &indices[std::size_t(b) * ix_b + std::size_t(t) * ix_t];
        const unsigned kind = rng() % 10;
        for (int k = 0; k < K; ++k) {
          const unsigned r = rng() % 100;
          std::int32_t s;
          if (kind == 0) {  // a row with no valid entry at all
            s = r % 2 ? -1 : static_cast<std::int32_t>(slots + r);
          } else if (r < 8) {
            s = -1;
          } else if (r < 11) {  // out of range both ways
            s = r == 8 ? static_cast<std::int32_t>(slots) : r == 9 ? std::numeric_limits<std::int32_t>::max() : -5;
          } else if (r < 20 && k > 0) {  // a duplicate
            s = list[rng() % k];
          } else if (r < 45) {
            s = static_cast<std::int32_t>(rng() % shared);
          } else {
            const std::int64_t own = shared + (std::int64_t(b) * 7919 + rng()) % (slots - shared);
            s = static_cast<std::int32_t>(own);
          }
          list[k] = s;
          if (s >= 0 && s < slots) used[std::size_t(s)] = 1;
        }
      }
    lengths.assign(B, K);
    if (c.topk_length)
      for (int& n : lengths) {
        const unsigned r = rng() % 8;
        n = r == 0 ? 0 : r == 1 ? -3 : r == 2 ? K + 17 : static_cast<int>(rng() % (K + 1));
      }
  }

  SparseProblem(const SparseCase& cs, std::mt19937& rng, const DeviceInfo& device) : c(cs) {
    const int B = c.batch, Q = c.q_len, H = c.heads, P = c.page_size;
    ix_t = c.topk + (c.padded ? 13 : 0);
    ix_b = Q * ix_t + (c.padded ? 5 : 0);
    std::vector<char> used(std::size_t(c.num_pages) * P, 0);
    random_lists(rng, used);

    q = nan_bytes(c.input, std::size_t(B) * Q * H * kQk);
    for (std::size_t i = 0; i < q.size() / dtype_bytes(c.input); ++i)
      random_element(c.input, q.data(), static_cast<std::int64_t>(i), 1.f, rng);
    kv_tok = c.padded ? mla_row_elems(c.kv) + 64 : mla_row_elems(c.kv);
    kv_page = P * kv_tok + (c.padded ? 128 : 0);
    kv = nan_bytes(c.kv, std::size_t(c.num_pages) * kv_page);  // NaN wherever no list points
    fill_used(used, rng);

    sinks.resize(H);
    for (int h = 0; h < H; ++h) {
      const unsigned r = rng() % 16;
      sinks[h] = r == 0 ? -kInfF : r == 1 ? kInfF : static_cast<float>(rng() % 400) / 100.f - 2.f;
    }

    MlaDecodeParams p = c.params();
    p.indices_stride_token = ix_t;
    p.indices_stride_batch = ix_b;
    p.kv_stride_token = kv_tok;
    p.kv_stride_page = kv_page;
    if (c.lse_layout) lse_strides(c.lse_layout, Q, H, p.lse_stride_batch, p.lse_stride_token, p.lse_stride_head);
    out_elems = std::size_t(B) * Q * H * kV;
    lse_elems = std::size_t(B) * Q * H;

    host = p;
    host.q = q.data();
    host.kv_cache = kv.data();
    host.indices = indices.data();
    host.topk_length = c.topk_length ? lengths.data() : nullptr;
    host.attn_sink = c.sinks ? sinks.data() : nullptr;

    d_q = to_device(q);
    d_out = DeviceBuffer(out_elems * 2 + 16);
    d_kv = to_device(kv);
    d_indices = to_device(indices);
    d_lengths = to_device(lengths);
    d_lse = DeviceBuffer(lse_elems * 4 + 16);
    d_sinks = to_device(sinks);
    dev = p;
    dev.q = d_q.get();
    dev.out = d_out.get();
    dev.kv_cache = d_kv.get();
    dev.indices = d_indices.get<std::int32_t>();
    dev.topk_length = c.topk_length ? d_lengths.get<std::int32_t>() : nullptr;
    dev.lse = c.lse_layout ? d_lse.get<float>() : nullptr;
    dev.attn_sink = c.sinks ? d_sinks.get<float>() : nullptr;
    const std::size_t ws = mla_decode_workspace_size(dev, device);
    if (ws > 0) {
      d_ws = DeviceBuffer(ws);
      d_ws.fill(0);  // once, at allocation
      dev.workspace = d_ws.get();
      dev.workspace_bytes = ws;
    }
  }

  void fill_used(const std::vector<char>& used, std::mt19937& rng) {
    for (std::size_t s = 0; s < used.size(); ++s) {
      if (!used[s]) continue;
      const std::int64_t base = std::int64_t(s / c.page_size) * kv_page + std::int64_t(s % c.page_size) * kv_tok;
      // Rows already filled stay (a slot selected again keeps its value): check the first value.
      if (!std::isnan(load_element(c.kv, kv.data(), base))) continue;
      random_mla_row(c.kv, kv.data(), base, rng);
    }
  }

  std::vector<double> output() const {
    std::vector<std::uint8_t> raw(out_elems * 2);
    d_out.download(raw.data(), raw.size());
    std::vector<double> o(out_elems);
    for (std::size_t i = 0; i < out_elems; ++i) o[i] = load_element(DType::bf16, raw.data(), std::int64_t(i));
    return o;
  }
};

struct Tally {
  int cases = 0, failures = 0;
  double worst_out = 0, worst_lse = 0;
  std::string worst_out_case;  // the case of worst_out
};
Tally& tally() {
  static Tally t;
  return t;
}

// The lse's absolute tolerance for a case's path. The hopper kernel's 16-row fp8ds CTAs
// (Fp8dsValues::exact) take Q as two e4m3 planes, hi + lo, about 2^-9 a value off the
// reference's bf16 Q, so each logit carries ~2^-9 sqrt(512) rms(q k) sm_scale of absolute
// error whatever its size: a row of one key has lse = that logit (session 48 run 8, seed
// 3359157421: 0.3040 against 0.2964, with scales up to 6). Every other path takes the bf16 Q.
double lse_atol(const SparseCase& c) {
  return c.kv == DType::fp8ds && fp8ds_values(c.backend, c.heads, c.q_len, true) == Fp8dsValues::exact ? 2e-2 : kLseAtol;
}

// Compares out (and lse when `lse_got` is not empty) with the reference; rows the
// reference leaves empty (lse +inf) must be exact zeros with lse +inf.
void check(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
           const std::vector<double>& lse_got, const std::vector<double>& lse_want, double lse_atol = kLseAtol) {
  const double err = relative_error(got, want);
  int nan = 0, nonzero_empty = 0;
  double lse_worst = 0;
  constexpr int kV = 512;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) ++nan;
    if (std::isinf(lse_want[i / kV]) && got[i] != 0.0) ++nonzero_empty;
  }
  std::size_t bad_row = 0;
  const int lse_bad = lse_mismatches(lse_got, lse_want, lse_worst, &bad_row, lse_atol);
  INFO(what << " rel_err=" << err << " lse_worst=" << lse_worst);
  CHECK(nan == 0);
  CHECK(nonzero_empty == 0);
  CHECK(err < kTolerance);
  CHECK(lse_bad == 0);
  Tally& t = tally();
  ++t.cases;
  if (err > t.worst_out) t.worst_out = err, t.worst_out_case = what;
  t.worst_lse = std::max(t.worst_lse, lse_worst);
  if (nan || nonzero_empty || lse_bad || !(err < kTolerance)) {
    ++t.failures;
    std::fprintf(stderr, "FAILED %s: rel_err %.3e nan %d nonzero_empty %d lse_bad %d (worst %.2e)\n", what.c_str(),
                 err, nan, nonzero_empty, lse_bad, lse_worst);
    if (lse_bad)
      std::fprintf(stderr, "  first lse miss: row %zu ([batch, q_len, H] order) got %.6f want %.6f\n", bad_row,
                   lse_got[bad_row], lse_want[bad_row]);
  }
}

void run_and_check(SparseProblem& pr, cudaStream_t stream) {
  pr.d_out.fill(0xff);  // NaN in bf16
  pr.d_lse.fill(0xff);  // NaN in float
  mla_decode(engine(), pr.dev, stream);
  XQAJIT_CUDART_CHECK(cudaGetLastError());
  XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> lse_want;
  const std::vector<double> want =
      reference_mla_decode(pr.host, &lse_want, fp8ds_values(pr.c.backend, pr.c.heads, pr.c.q_len, true));
  const std::vector<double> lse_got =
      pr.c.lse_layout ? download_lse(pr.d_lse, pr.c.lse_layout, pr.c.batch, pr.c.q_len, pr.c.heads)
                      : std::vector<double>{};
  check(describe(pr.c), pr.output(), want, lse_got, lse_want, lse_atol(pr.c));
}

SparseCase random_case(Backend backend, int i) {
  SparseCase c;
  c.backend = backend;
  cycle_dtypes(c, i, device_has_fp8());
  const bool serving = rng()() % 3 != 0;  // V3.2 shapes most of the time
  c.heads = serving ? pick({16, 64, 128}) : pick({16, 32, 64, 128});
  c.q_len = serving ? pick({1, 2}) : pick({1, 2, 3, 4});
  c.page_size = serving ? 64 : pick({32, 64});
  c.topk = serving ? pick({2048, 2048, 512}) : pick({64, 100, 128, 777, 2048, 4096});
  // Bounded reference cost: B x q_len x H x topk.
  const int max_batch = std::max(1, static_cast<int>(4'000'000L / (long(c.q_len) * c.heads * c.topk)));
  c.batch = std::min(max_batch, pick({1, 2, 3, 5, 8, 16}));
  c.num_pages = pick({8, 40, 200});
  c.topk_length = rng()() % 2 == 0;
  c.padded = rng()() % 3 == 0;
  c.lse_layout = pick({0, 1, 2, 2});
  c.sinks = rng()() % 3 == 0;
  c.num_splits = pick({0, 0, 0, 1, 2, 7, 16});
  random_scales(c, rng());
  return c;
}

KernelSpec spec_of(const SparseCase& c) {
  MlaDecodeParams p = c.params();
  p.indices = reinterpret_cast<const std::int32_t*>(16);  // sparse
  return mla_decode_spec(p, device().best_arch());
}

}  // namespace

TEST_CASE("sparse mla_decode matches the float64 reference on a randomized grid", "[gpu][mla][sparse]") {
  const int n = std::getenv("XQAJIT_TEST_SPARSE_CASES") ? std::atoi(std::getenv("XQAJIT_TEST_SPARSE_CASES")) : 48;
  std::vector<SparseCase> cases;
  std::vector<Backend> backends = backends_for(Kind::mla, device().best_arch());
  if (const char* only = std::getenv("XQAJIT_TEST_MLA_BACKEND")) backends = {parse_backend(only)};
  for (Backend b : backends) {
    for (int i = 0; i < n; ++i) cases.push_back(random_case(b, i));
    if (device_has_fp8())
      for (int i = 0; i < n / 4; ++i) {              // H=16 over fp8ds: the hopper narrow schedule's gather
        SparseCase c = random_case(b, 3);            // (m53; case 3 of cycle_dtypes: bf16 Q over fp8ds),
        c.heads = 16, c.q_len = pick({1, 1, 2, 4});  // a CTA a query token from q_len 2
        cases.push_back(c);
      }
    SparseCase v32;  // DeepSeek-V3.2 at data-parallel attention: one long list, split wide
    v32.backend = b;
    v32.kv = DType::fp8ds;  // its cache: 656-byte fp8-with-scales rows
    v32.batch = 1;
    v32.q_len = 2;
    v32.num_pages = 400;
    cases.push_back(v32);
    v32.heads = 16;  // tensor-parallel 8, with sinks and FlashMLA's LSE layout
    v32.q_len = 2;   // V3.2's MTP: a hopper CTA a query token
    v32.batch = 4;
    v32.sinks = true;
    v32.lse_layout = 2;
    v32.topk_length = true;
    cases.push_back(v32);
    v32.kv = DType::bf16;  // the same over a bf16 cache, padded
    v32.padded = true;
    cases.push_back(v32);
    SparseCase empty;  // every list empty (topk_length 0) or all invalid, with splits
    empty.backend = b;
    empty.topk_length = true;
    empty.zero_lengths = true;
    empty.num_splits = 4;
    empty.batch = 3;
    empty.topk = 256;
    cases.push_back(empty);
    if (device_has_fp8()) {  // the same at H=16 over fp8ds (the narrow schedule's gather, m53)
      empty.heads = 16, empty.kv = DType::fp8ds;
      cases.push_back(empty);
    }
  }
  std::vector<KernelSpec> specs;
  for (const SparseCase& c : cases) specs.push_back(spec_of(c));
  prewarm_or_fail(specs, "sparse MLA");
  CudaStream stream;
  const bool verbose = std::getenv("XQAJIT_TEST_VERBOSE") != nullptr;  // each case named before it runs
  for (const SparseCase& c : cases) {
    if (verbose) std::fprintf(stderr, "case %s\n", describe(c).c_str());
    SparseProblem pr(c, rng(), device());
    if (c.zero_lengths) {
      pr.lengths.assign(pr.lengths.size(), 0);
      pr.d_lengths.upload(pr.lengths);
    }
    CHECK(mla_decode_plan(pr.dev, device()).spec.sparse);
    run_and_check(pr, stream.get());
  }
  std::fprintf(stderr, "sparse cases: %d, failed: %d; worst out rel err %.2e (%s), worst lse abs err %.2e\n",
               tally().cases, tally().failures, tally().worst_out, tally().worst_out_case.c_str(), tally().worst_lse);
}

// Dense MLA's LSE and sinks, every backend this GPU runs (the epilogue both share).
TEST_CASE("dense mla_decode writes LSE and applies sinks", "[gpu][mla][lse]") {
  auto backends = backends_for(Kind::mla, device().best_arch());
  for (Backend b : backends)
    for (int i = 0; i < 15; ++i) {
      MlaCase c;
      c.backend = b;
      if (device_has_fp8() && i % 2) c.kv = DType::fp8, c.kv_scale = 0.3f;
      if (device_has_fp8() && i % 4 == 3) c.kv = DType::fp8ds, c.kv_scale = 1.f;
      c.heads = pick({16, 64, 128});
      c.q_len = pick({1, 2});
      c.seq_lens = {static_cast<int>(rng()() % 3000), 0, 1 + static_cast<int>(rng()() % 9000)};
      c.num_splits = pick({0, 1, 2, 3, 16});  // 2: hopper merges in a cluster
      if (i >= 12) {  // bf16, 128 rows, a batch past half the SMs: hopper's balanced plan (m77)
        c.kv = DType::bf16, c.kv_scale = 1.f;
        c.heads = i == 12 ? 128 : 64;
        c.q_len = i == 12 ? 1 : 2;
        c.seq_lens.assign(device().sm_count / 4 + 1 + rng()() % 20, 0);
        for (int& len : c.seq_lens) len = static_cast<int>(rng()() % 300);
        c.seq_lens[1] = 3000 + static_cast<int>(rng()() % 2000);
        c.num_splits = 0;
      }
      if (i == 14) {  // bf16, H=128, a small batch with a long request: hopper's shares (m84)
        c.kv = DType::bf16, c.kv_scale = 1.f;
        c.heads = 128;
        c.q_len = 1;
        c.seq_lens = {9000 + static_cast<int>(rng()() % 3000), 0, 1, 2900, static_cast<int>(rng()() % 3000), 700};
        c.num_splits = 0;
      }
      MlaProblem pr(c, rng(), device());
      const int B = static_cast<int>(c.seq_lens.size()), Q = c.q_len, H = c.heads, layout = 1 + i % 2;
      std::vector<float> sinks(H);
      for (int h = 0; h < H; ++h)
        sinks[h] = h == 0 ? kInfF : h == 1 ? -kInfF : static_cast<float>(rng()() % 400) / 100.f - 2.f;
      DeviceBuffer d_lse(std::size_t(B) * Q * H * 4 + 16), d_sinks = to_device(sinks);
      std::int64_t sb, st, sh;
      lse_strides(layout, Q, H, sb, st, sh);
      for (MlaDecodeParams* p : {&pr.dev, &pr.host}) {
        p->lse_stride_batch = sb, p->lse_stride_token = st, p->lse_stride_head = sh;
      }
      pr.dev.lse = d_lse.get<float>();
      const bool with_sinks = i % 3 != 0;
      pr.dev.attn_sink = with_sinks ? d_sinks.get<float>() : nullptr;
      pr.host.attn_sink = with_sinks ? sinks.data() : nullptr;
      CudaStream stream;
      pr.d_out.fill(0xff);
      d_lse.fill(0xff);
      mla_decode(engine(), pr.dev, stream.get());
      XQAJIT_CUDART_CHECK(cudaGetLastError());
      XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream.get()));
      std::vector<double> lse_want;
      const std::vector<double> want =
          reference_mla_decode(pr.host, &lse_want, fp8ds_values(b, H, Q, false));
      check(fmt::format("dense backend={} kv={} H={} q_len={} splits={} layout={} sinks={}", to_string(b),
                        to_string(c.kv), H, Q, c.num_splits, layout, with_sinks),
            pr.output(), want, download_lse(d_lse, layout, B, Q, H), lse_want);
    }
}

// Indices and lengths live on the device: a graph captured once replays correctly with
// new ones (the DSA indexer writes them in the graph's previous piece).
TEST_CASE("sparse mla_decode inside a captured graph replays with new indices", "[gpu][mla][sparse]") {
  SparseCase c;
  c.heads = 64;
  c.q_len = 2;
  c.batch = 3;
  c.topk = 512;
  c.topk_length = true;
  c.num_splits = 4;
  c.lse_layout = 2;
  c.sinks = true;
  c.num_pages = 60;
  SparseProblem pr(c, rng(), device());
  CudaStream stream;
  run_and_check(pr, stream.get());  // loads the kernel: nothing compiles during capture
  const CapturedGraph graph(stream.get(), [&](cudaStream_t s) { mla_decode(engine(), pr.dev, s); });
  for (int round = 0; round < 3; ++round) {
    std::vector<char> used(std::size_t(c.num_pages) * c.page_size, 0);
    pr.random_lists(rng(), used);
    pr.fill_used(used, rng());
    pr.host.indices = pr.indices.data();
    pr.host.topk_length = pr.lengths.data();
    pr.d_indices.upload(pr.indices);
    pr.d_lengths.upload(pr.lengths);
    pr.d_kv.upload(pr.kv);
    pr.d_out.fill(0xff);
    pr.d_lse.fill(0xff);
    graph.replay();
    XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream.get()));
    std::vector<double> lse_want;
    const std::vector<double> want =
        reference_mla_decode(pr.host, &lse_want, fp8ds_values(c.backend, c.heads, c.q_len, true));
    INFO("graph replay round " << round);
    check(describe(c), pr.output(), want, download_lse(pr.d_lse, c.lse_layout, c.batch, c.q_len, c.heads),
          lse_want, lse_atol(c));
  }
}
