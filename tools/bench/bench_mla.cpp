// bench_mla: MLA decode per shape and backend: median microseconds (graph
// replays of back-to-back launches after warm-up, rotating latent caches so L2
// does not flatter small shapes), GB/s of latent read (as % of the copy
// bandwidth) and TFLOP/s (2 * B * q_len * H * L * (576 + 512)).
//
//   bench_mla [--only "A|B"]   (prints a table; JSON lines to stderr)
//   bench_mla --shapes "H B L q_len in/kv [splits]|..."   (these shapes instead of the list;
//             splits 0 or absent = the launcher's choice: fixed costs vs steps vs merges)
//   bench_mla --extras [lse|sink|both]   (every launch also writes lse and/or applies attention
//             sinks: their cost; default both)
//   bench_mla --sparse TOPK [--invalid PCT]   (sparse MLA, DSA: every query token attends to
//             TOPK distinct random keys of its request's L, given as int32 slots
//             page * page_size + offset, PCT % of them -1; the issue-31 shapes unless --shapes.
//             GB/s = valid indices x the row's bytes (656 fp8ds, 1152 bf16) / time; TFLOP/s =
//             2 * B * q_len * H * TOPK * (576 + 512) / time)
//   bench_mla --backend hopper|portable   (that backend only; default every one this GPU runs)
//   bench_mla --ragged   (dense: request lengths uniform on [1, L], GB/s and TFLOP/s over the
//             keys drawn: a serving batch, whose longest request sets a one-split launch's time)
// The options combine, in any order.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/bench_common.hpp"
#include "tuning/topk_lists.hpp"
#include "xqajit/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/ops/mla_decode.hpp"

using namespace xqajit;
using namespace xqajit::testing;

namespace {

struct Shape {
  int H, B, L, q_len;
  DType input, kv;
  int splits = 0;  // 0 = the launcher's choice
  int topk = 0;    // > 0: sparse, index lists of topk keys of each request's L (--sparse)
};

// "H B L q_len in/kv [splits]|..." -> shapes (the --shapes option).
std::vector<Shape> parse_shapes(const char* text) {
  std::vector<Shape> shapes;
  std::string all(text);
  std::size_t start = 0;
  while (start <= all.size()) {
    const std::size_t end = std::min(all.find('|', start), all.size());
    const std::string one = all.substr(start, end - start);
    Shape s{};
    char in[8] = {}, kv[8] = {};
    const int n = std::sscanf(one.c_str(), "%d %d %d %d %7[a-z0-9]/%7[a-z0-9] %d", &s.H, &s.B, &s.L, &s.q_len, in, kv,
                              &s.splits);
    if (n < 6) throw ArgumentError(fmt::format("--shapes: '{}' is not 'H B L q_len in/kv [splits]'", one));
    s.input = parse_dtype("input", in);
    s.kv = parse_dtype("kv", kv);
    shapes.push_back(s);
    start = end + 1;
  }
  return shapes;
}

// The dense list: compute-bound H=128, memory-bound H=16, one long request, MTP; small
// batches (B = 1-4), where the split merge is most of the time.
std::vector<Shape> dense_shapes() {
  const DType bf = DType::bf16, f8 = DType::fp8;
  std::vector<Shape> shapes;
  for (DType in : {bf, f8}) {
    const DType kv = in;
    shapes.push_back({128, 128, 4096, 1, in, kv});
    shapes.push_back({128, 64, 8192, 1, in, kv});
    shapes.push_back({128, 32, 4096, 1, in, kv});
    shapes.push_back({128, 1, 32768, 1, in, kv});
    shapes.push_back({128, 1, 8192, 1, in, kv});  // small batch: where the merge launch matters
    shapes.push_back({128, 4, 8192, 1, in, kv});
    shapes.push_back({16, 1, 8192, 1, in, kv});
    shapes.push_back({16, 1, 32768, 1, in, kv});
    for (int H : {32, 64}) {  // between the two: where backend=auto changes sides
      shapes.push_back({H, 1, 8192, 1, in, kv});
      shapes.push_back({H, 32, 4096, 1, in, kv});
      shapes.push_back({H, 64, 8192, 1, in, kv});
    }
    shapes.push_back({16, 64, 8192, 1, in, kv});
    shapes.push_back({16, 128, 4096, 1, in, kv});
    shapes.push_back({16, 32, 4096, 1, in, kv});
    shapes.push_back({16, 64, 8192, 2, in, kv});
    shapes.push_back({128, 64, 4096, 2, in, kv});  // MTP at DeepSeek's 128 heads: compute-bound
  }
  shapes.push_back({16, 64, 8192, 1, bf, f8});
  shapes.push_back({128, 64, 8192, 1, bf, f8});
  // DeepSeek-V3.2's fp8-with-scales cache (656-byte rows): issue 31's
  // dense target is H=16 at <= 0.6 x the bf16 cache's time.
  for (int H : {16, 128}) {
    shapes.push_back({H, 64, 8192, 1, bf, DType::fp8ds});
    shapes.push_back({H, 128, 4096, 1, bf, DType::fp8ds});
  }
  return shapes;
}

// The sparse list (DeepSeek-V3.2, bf16 Q over both caches), contexts of 32768 keys: issue 31's
// FLOP/s targets (H=128, B=128 q_len 2 and B=64 q_len 1, against FlashMLA), its bandwidth
// target (H=16, tensor-parallel 8, also with one MTP draft), the head counts between, and small
// batches.
std::vector<Shape> sparse_shapes() {
  std::vector<Shape> shapes;
  for (DType kv : {DType::fp8ds, DType::bf16})
    for (auto [H, B, q_len] :
         {std::tuple{128, 128, 2}, std::tuple{128, 64, 1}, std::tuple{128, 32, 1}, std::tuple{128, 1, 1},
          std::tuple{64, 64, 1}, std::tuple{32, 64, 1}, std::tuple{16, 64, 1}, std::tuple{16, 128, 1},
          std::tuple{16, 128, 2}, std::tuple{16, 64, 2}, std::tuple{16, 1, 1}})
      shapes.push_back({H, B, 32768, q_len, DType::bf16, kv});
  return shapes;
}

// A sparse shape's index lists (tuning/topk_lists.hpp) through the request's pages (`pages`
// shuffled), each entry -1 with probability invalid_pct / 100. Returns the lists and how many
// entries are valid.
std::pair<std::vector<std::int32_t>, std::int64_t> index_lists(const Shape& s, const BenchPages& pages,
                                                               int invalid_pct, std::mt19937& rng) {
  std::uniform_int_distribution<int> percent(0, 99);
  std::int64_t valid = 0;
  std::vector<std::int32_t> lists = topk_index_lists(
      s.B, s.q_len, s.topk, s.L, rng, [&](int b, int key) { return pages.slot(b, key); },
      [&] {
        const bool skip = percent(rng) < invalid_pct;
        valid += !skip;
        return skip;
      });
  return {std::move(lists), valid};
}

// --sparse TOPK and --invalid PCT: 0 and 0 without them. Throws ArgumentError for bad values.
std::pair<int, int> sparse_options(int argc, char** argv) {
  const auto number = [&](const char* flag, int lo, int hi) {
    if (!has_flag(argc, argv, flag)) return 0;
    const char* v = flag_value(argc, argv, flag);
    char* end = nullptr;
    const long n = v ? std::strtol(v, &end, 10) : 0;
    if (v == nullptr)
      throw ArgumentError(fmt::format("{} needs a value: a whole number {} to {}", flag, lo, hi));
    if (*end != '\0' || n < lo || n > hi)
      throw ArgumentError(fmt::format("{} '{}': allowed a whole number {} to {}", flag, v, lo, hi));
    return static_cast<int>(n);
  };
  const int topk = number("--sparse", 1, 1 << 20);  // the launcher's bound
  const int invalid = number("--invalid", 0, 100);
  if (has_flag(argc, argv, "--invalid") && topk == 0)
    throw ArgumentError("--invalid: only with --sparse TOPK");
  return {topk, invalid};
}

}  // namespace

int main(int argc, char** argv) {
  const ShapeFilter only(argc, argv);
  try {
    const auto [topk, invalid_pct] = sparse_options(argc, argv);
    const BenchExtras extras = BenchExtras::parse(argc, argv);
    // --ragged (dense): request lengths uniform on [1, L] (BenchPages::upload), GB/s and TFLOP/s
    // over the keys drawn.
    const bool ragged = has_flag(argc, argv, "--ragged");
    if (ragged && topk) throw ArgumentError("--ragged: dense shapes only (not with --sparse)");
    std::vector<Shape> shapes = topk ? sparse_shapes() : dense_shapes();
    if (const char* list = flag_value(argc, argv, "--shapes")) shapes = parse_shapes(list);
    for (Shape& s : shapes) {
      s.topk = topk;
      if (s.topk > s.L)
        throw ArgumentError(
            fmt::format("--sparse {}: the shape H={} B={} has L = {} keys a request, fewer than "
                        "topk (each list names topk distinct keys of its request): give a longer L "
                        "in --shapes",
                        topk, s.H, s.B, s.L));
    }

    const DeviceInfo info = Driver::instance().device(0);
    const double copy_bw = report_device(info);
    std::vector<Backend> backends = backends_for(Kind::mla, info.best_arch());
    if (const char* one = flag_value(argc, argv, "--backend")) {
      const Backend want = parse_backend(one);
      if (std::find(backends.begin(), backends.end(), want) == backends.end())
        throw ArgumentError(fmt::format("--backend {}: {} does not run it", one, info.name));
      backends = {want};
    }
    Options opts = Options::from_env();
    Engine engine(opts);
    CudaStream stream;
    std::mt19937 rng(1234);
    if (topk)
      std::printf(
          "sparse: topk %d, %d %% of the entries -1; GB/s = valid indices x row bytes (656 fp8ds, 1152 bf16) "
          "/ time; TFLOP/s = 2 B q_len H topk (576 + 512) / time\n",
          topk, invalid_pct);
    const int shape_w = topk || extras.lse || extras.sink ? 50 : 30;  // room for the label's suffixes
    std::printf("\n%-9s %-*s %9s %9s %8s %7s %8s %7s %5s\n", "backend", shape_w,
                topk ? "shape (H B L q_len q/kv topk)" : "shape (H B L q_len q/kv)", "splits", "us", "GB/s",
                "%copy", "TFLOP/s", "nvrtc_s", "regs");
    for (const Shape& s : shapes)
      for (Backend backend : backends) {
        const std::string key = fmt::format("{} {} {} {} {}/{}{}", s.H, s.B, s.L, s.q_len, to_string(s.input),
                                            to_string(s.kv), s.topk ? fmt::format(" k{}", s.topk) : "");
        if (!only.keeps(key)) continue;
        MlaDecodeParams p;
        BenchPages pages(s.B, s.L, 64);
        pages.set_shape(p);
        p.input = s.input;
        p.kv = s.kv;
        p.q_len = s.q_len;
        p.num_heads = s.H;
        p.sm_scale = 0.0721687836f;
        p.q_scale = s.input == DType::fp8 ? 0.1f : 1.f;
        p.kv_scale = s.kv == DType::fp8 ? 0.1f : 1.f;
        p.backend = backend;
        p.num_splits = s.splits;
        // Sparse: index lists (the spec and plan depend on them) and no block table or lengths.
        DeviceBuffer d_indices;
        std::int64_t valid = 0;
        if (s.topk) {
          pages.shuffle(rng);
          auto [lists, n] = index_lists(s, pages, invalid_pct, rng);
          valid = n;
          d_indices = to_device(lists);
          p.indices = d_indices.get<std::int32_t>();
          p.topk = s.topk;
          p.max_pages_per_seq = 0;
        } else {
          pages.upload(p, rng, ragged);
        }
        const ExtrasBuffers extra(extras, s.B, s.q_len, s.H, rng);
        p.lse = extra.lse();
        p.attn_sink = extra.sinks();
        const std::string label =
            key + (s.topk && invalid_pct ? fmt::format(" ({}% -1)", invalid_pct) : "") + (ragged ? " ragged" : "") +
            extras.label();
        MlaDecodePlan plan;
        try {
          plan = mla_decode_plan(p, info);
        } catch (const Error& e) {
          std::printf("%-9s %-*s skipped: %s\n", to_string(backend).c_str(), shape_w, label.c_str(),
                      e.what());
          continue;
        }

        const std::size_t row_bytes = s.kv == DType::fp8ds ? 656 : 576 * dtype_bytes(s.kv);
        const std::size_t kv_bytes = pages.count * pages.page_size * row_bytes;
        const int rotate = static_cast<int>(std::clamp<std::size_t>((512u << 20) / kv_bytes + 1, 1, 8));
        std::vector<DeviceBuffer> caches;
        for (int r = 0; r < rotate; ++r) {
          caches.emplace_back(kv_bytes);
          fill_random(caches.back(), s.kv, rng);
        }
        DeviceBuffer d_q(std::size_t(s.B) * s.q_len * s.H * 576 * dtype_bytes(s.input));
        DeviceBuffer d_out(std::size_t(s.B) * s.q_len * s.H * 512 * 2);
        fill_random(d_q, s.input, rng);
        p.q = d_q.get();
        p.out = d_out.get();

        const CubinRef cubin = engine.cubin(plan.spec);
        const DeviceBuffer ws = zeroed_workspace(p, plan.workspace_bytes);
        for (int r = 0; r < rotate; ++r) {  // warm up (loads the kernel)
          p.kv_cache = caches[r].get();
          mla_decode(engine, p, stream.get());
        }
        XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream.get()));
        const LoadedKernel& k = engine.kernel(plan.spec, 0);
        constexpr int kLaunches = 20;
        const double us = graph_us_per_launch(stream.get(), kLaunches, [&](int i) {
          p.kv_cache = caches[i % rotate].get();
          mla_decode(engine, p, stream.get());
        });
        // Dense: every key's row once; sparse: every valid index's row (a row two tokens'
        // lists name counts twice, as the kernel gathers it twice).
        const double bytes = s.topk ? double(valid) * row_bytes : pages.total_keys() * row_bytes;
        const double keys_per_row = s.topk ? s.topk : pages.total_keys() / s.B;
        const double gbps = bytes / (us * 1e-6) / 1e9;
        const double tflops = 2.0 * s.B * s.q_len * s.H * keys_per_row * (576 + 512) / (us * 1e-6) / 1e12;
        // "64+m": 64 splits merged by a second launch (MlaDecodePlan::merge_launch); "/b66": the
        // hopper balanced plan over 66 CTAs a row block (with +m: a small batch's shares).
        const std::string splits =
            fmt::format("{}{}{}", plan.num_splits, plan.merge_launch ? "+m" : "",
                        plan.balanced_parts > 0 ? fmt::format("/b{}", plan.balanced_parts) : "");
        std::printf("%-9s %-*s %9s %9.1f %8.0f %6.1f%% %8.1f %7.2f %5d\n", to_string(backend).c_str(),
                    shape_w, label.c_str(), splits.c_str(), us, gbps, 100.0 * gbps * 1e9 / copy_bw, tflops,
                    cubin.seconds, k.num_regs);
        std::string more = extras.json();  // the row's options, as JSON members
        if (s.topk)
          more += fmt::format(
              ", \"topk\": {}, \"invalid_pct\": {}, \"valid_indices\": {}, \"gathered_bytes\": {:.0f}",
              s.topk, invalid_pct, valid, bytes);
        std::fprintf(
            stderr,
            "{\"backend\": \"%s\", \"H\": %d, \"B\": %d, \"L\": %d, \"q_len\": %d, \"input\": \"%s\", "
            "\"kv\": \"%s\", \"splits\": %d, \"merge_launch\": %s, \"us\": %.2f, \"GBps\": %.1f, "
            "\"pct_copy\": %.1f, \"TFLOPs\": %.1f, \"nvrtc_s\": %.3f, \"spec\": \"%s\"%s}\n",
            to_string(backend).c_str(), s.H, s.B, s.L, s.q_len, to_string(s.input).c_str(),
            to_string(s.kv).c_str(), plan.num_splits, plan.merge_launch ? "true" : "false", us, gbps,
            100.0 * gbps * 1e9 / copy_bw, tflops, cubin.seconds, cubin.name.c_str(), more.c_str());
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mla: %s\n", e.what());
    return 1;
  }
  return 0;
}
