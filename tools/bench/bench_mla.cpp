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
// The options combine, in any order.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.hpp"
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
    if (n < 6) throw ArgumentError(fmt::format("bench_mla --shapes: '{}' is not 'H B L q_len in/kv [splits]'", one));
    s.input = parse_dtype("input", in);
    s.kv = parse_dtype("kv", kv);
    shapes.push_back(s);
    start = end + 1;
  }
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  const ShapeFilter only(argc, argv);
  try {
    const DeviceInfo info = Driver::instance().device(0);
    const double copy_bw = report_device(info);
    const DType bf = DType::bf16, f8 = DType::fp8;
    // The shapes: compute-bound H=128, memory-bound H=16, one long request, MTP;
    // small batches (B = 1-4), where the split merge is most of the time.
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
    // DeepSeek-V3.2's fp8-with-scales cache (656-byte rows; the portable kernel): issue 31's
    // dense target is H=16 at <= 0.6 x the bf16 cache's time.
    for (int H : {16, 128}) {
      shapes.push_back({H, 64, 8192, 1, bf, DType::fp8ds});
      shapes.push_back({H, 128, 4096, 1, bf, DType::fp8ds});
    }
    if (const char* list = flag_value(argc, argv, "--shapes")) shapes = parse_shapes(list);
    const BenchExtras extras = BenchExtras::parse(argc, argv);  // optional outputs on every launch

    std::vector<Backend> backends = backends_for(Kind::mla, info.best_arch());
    Options opts = Options::from_env();
    Engine engine(opts);
    CudaStream stream;
    std::mt19937 rng(1234);
    std::printf("\n%-9s %-30s %6s %9s %8s %7s %8s %7s %5s\n", "backend", "shape (H B L q_len q/kv)", "splits", "us",
                "GB/s", "%copy", "TFLOP/s", "nvrtc_s", "regs");
    for (const Shape& s : shapes)
      for (Backend backend : backends) {
        const std::string key = fmt::format("{} {} {} {} {}/{}", s.H, s.B, s.L, s.q_len, to_string(s.input),
                                            to_string(s.kv));
        if (!only.keeps(key)) continue;
        MlaDecodeParams p;
        BenchPages pages(s.B, s.L, 64);
        pages.set_shape(p);
        const std::size_t row_bytes = s.kv == DType::fp8ds ? 656 : 576 * dtype_bytes(s.kv);
        const std::size_t kv_bytes = pages.count * pages.page_size * row_bytes;
        const int rotate = static_cast<int>(std::clamp<std::size_t>((512u << 20) / kv_bytes + 1, 1, 8));
        pages.upload(p, rng);
        std::vector<DeviceBuffer> caches;
        for (int r = 0; r < rotate; ++r) {
          caches.emplace_back(kv_bytes);
          fill_random(caches.back(), s.kv, rng);
        }
        DeviceBuffer d_q(std::size_t(s.B) * s.q_len * s.H * 576 * dtype_bytes(s.input));
        DeviceBuffer d_out(std::size_t(s.B) * s.q_len * s.H * 512 * 2);
        fill_random(d_q, s.input, rng);

        p.input = s.input;
        p.kv = s.kv;
        p.q_len = s.q_len;
        p.num_heads = s.H;
        p.q = d_q.get();
        p.out = d_out.get();
        p.sm_scale = 0.0721687836f;
        p.q_scale = s.input == f8 ? 0.1f : 1.f;
        p.kv_scale = s.kv == f8 ? 0.1f : 1.f;
        p.backend = backend;
        p.num_splits = s.splits;
        const ExtrasBuffers extra(extras, s.B, s.q_len, s.H, rng);
        p.lse = extra.lse();
        p.attn_sink = extra.sinks();
        const std::string label = key + extras.label();
        MlaDecodePlan plan;
        try {
          plan = mla_decode_plan(p, info);
        } catch (const Error& e) {
          std::printf("%-9s %-30s skipped: %s\n", to_string(backend).c_str(), label.c_str(), e.what());
          continue;
        }
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
        const double bytes = double(s.B) * s.L * row_bytes;
        const double gbps = bytes / (us * 1e-6) / 1e9;
        const double tflops = 2.0 * s.B * s.q_len * s.H * double(s.L) * (576 + 512) / (us * 1e-6) / 1e12;
        // "64+m": 64 splits merged by a second launch (MlaDecodePlan::merge_launch).
        const std::string splits = fmt::format("{}{}", plan.num_splits, plan.merge_launch ? "+m" : "");
        std::printf("%-9s %-30s %6s %9.1f %8.0f %6.1f%% %8.1f %7.2f %5d\n", to_string(backend).c_str(), label.c_str(),
                    splits.c_str(), us, gbps, 100.0 * gbps * 1e9 / copy_bw, tflops, cubin.seconds, k.num_regs);
        std::fprintf(stderr,
                     "{\"backend\": \"%s\", \"H\": %d, \"B\": %d, \"L\": %d, \"q_len\": %d, \"input\": \"%s\", "
                     "\"kv\": \"%s\", \"splits\": %d, \"merge_launch\": %s, \"us\": %.2f, \"GBps\": %.1f, \"pct_copy\": %.1f, "
                     "\"TFLOPs\": %.1f, \"nvrtc_s\": %.3f, \"spec\": \"%s\"%s}\n",
                     to_string(backend).c_str(), s.H, s.B, s.L, s.q_len, to_string(s.input).c_str(),
                     to_string(s.kv).c_str(), plan.num_splits, plan.merge_launch ? "true" : "false", us, gbps, 100.0 * gbps * 1e9 / copy_bw, tflops,
                     cubin.seconds, cubin.name.c_str(), extras.json().c_str());
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mla: %s\n", e.what());
    return 1;
  }
  return 0;
}
