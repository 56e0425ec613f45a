// bench_decode: the device's copy bandwidth, then per decode shape the median
// microseconds (CUDA events around graph replays of many launches, after
// warm-up, rotating among several KV buffers so L2 does not flatter small
// shapes), GB/s of K+V read and that as a percentage of the copy bandwidth.
// Also the NVRTC seconds of each spec (memory-only engine: every spec compiles).
//
//   bench_decode [--quick | --sweep | --waves | --spec-rows | --spec-rows-dims | --spec-long] [--only "A|B"]
//                [--extras [lse|sink|both]]    (prints a table; JSON lines to stderr)
//
// --extras: every launch also writes lse (float32 [B, q_len, Hq]) and/or applies attention
// sinks (float32 [Hq]): their cost, against a run without (no value: both).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.hpp"
#include "support/gpu_buffers.hpp"
#include "support/reference.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/spec/spec.hpp"

using namespace xqajit;
using namespace xqajit::testing;

namespace {

struct Shape {
  int B, L, Hq, Hk, D;
  DType input, kv;
  int page;
  int kv_tile = 0;  // 0 = the spec default
  int splits = 0;   // 0 = the launcher's choice
  bool hnd = false; // HND pages (each head's page is one contiguous block)
  int q_len = 1;    // > 1: speculative decoding with a causal mask over the drafts
  int cta_rows = 0; // hopper rows per CTA; 0 = the plan's choice, 64 = one block of all rows
};

// XQAJIT_BENCH_BACKENDS=portable,hopper times every shape with each backend
// (side by side in one run); unset: the plan's automatic choice.
std::vector<Backend> bench_backends() {
  std::vector<Backend> v;
  const char* env = std::getenv("XQAJIT_BENCH_BACKENDS");
  std::string list = env ? env : "auto";
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    if (end > start) v.push_back(parse_backend(list.substr(start, end - start)));
    start = end + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  // --quick: the first 4 shapes; --only A|B: shapes whose "B L Hq Hk D in kv page" contains A or B.
  const auto mode = [&](const char* flag) { return has_flag(argc, argv, flag); };
  const bool quick = mode("--quick");
  const ShapeFilter only(argc, argv);
  try {
    const BenchExtras extras = BenchExtras::parse(argc, argv);
    const DeviceInfo info = Driver::instance().device(0);
    const double copy_bw = report_device(info);

    const DType bf = DType::bf16, fp = DType::fp16, f8 = DType::fp8;
    std::vector<Shape> shapes = {
        {1, 8192, 32, 8, 128, bf, bf, 64},    {1, 65536, 32, 8, 128, bf, bf, 64},
        {16, 4096, 32, 8, 128, bf, bf, 64},   {64, 4096, 32, 8, 128, bf, bf, 64},
        {128, 8192, 32, 8, 128, bf, bf, 64},  {256, 2048, 32, 8, 128, bf, bf, 64},
        {32, 4096, 64, 8, 128, fp, fp, 64},   {32, 4096, 32, 32, 128, bf, bf, 64},
        {32, 4096, 16, 4, 256, bf, bf, 64},   {64, 4096, 32, 8, 128, bf, bf, 16},
        {1, 8192, 32, 8, 128, bf, bf, 16},    {64, 4096, 32, 8, 128, bf, f8, 64},
        {1, 8192, 32, 8, 128, bf, f8, 64},    {128, 8192, 32, 8, 128, bf, f8, 64},
        {32, 4096, 16, 4, 256, bf, f8, 64},   {16, 4096, 32, 8, 128, bf, f8, 64},
        {1, 65536, 32, 8, 128, bf, f8, 64},   {32, 4096, 64, 8, 128, fp, f8, 64},
        {64, 4096, 32, 8, 128, bf, f8, 16},   {1, 8192, 32, 8, 128, bf, f8, 16},
        // variant knobs (run 3 of PERF.md swept t32, forced 16/64 splits and HND pages: all
        // slower or equal), kept: fp8 with 64-key tiles (default 128), D=256 with 64-key tiles
        {64, 4096, 32, 8, 128, bf, f8, 64, 64}, {32, 4096, 16, 4, 256, bf, bf, 64, 64},
        {64, 4096, 32, 8, 128, bf, bf, 64, 0, 0, true}, {64, 4096, 32, 8, 128, bf, f8, 64, 0, 0, true},
        {128, 8192, 32, 8, 128, bf, f8, 64, 0, 0, true},
        {64, 4096, 32, 8, 128, bf, f8, 64, 128}, {128, 8192, 32, 8, 128, bf, f8, 64, 128},
        {16, 4096, 32, 8, 128, bf, f8, 64, 128}, {1, 8192, 32, 8, 128, bf, f8, 64, 128},
        {1, 65536, 32, 8, 128, bf, f8, 64, 128}, {32, 4096, 64, 8, 128, fp, f8, 64, 128},
        {64, 4096, 32, 8, 128, bf, f8, 16, 128}, {128, 8192, 32, 8, 128, bf, f8, 64, 128, 0, true},
        // speculative decoding: q_len 8 against q_len 1 of the same shape (issue #7: <= 1.1x with fp8)
        {64, 4096, 32, 8, 128, bf, f8, 64, 0, 0, false, 8}, {64, 4096, 32, 8, 128, bf, bf, 64, 0, 0, false, 8},
        {64, 4096, 32, 8, 128, bf, f8, 64, 128, 0, false, 8},  // the t128 of sessions 7-11 (now t64: h29)
        // ... at B=1, where the plan keeps the splits to one cluster (h41), against 16 forced
        {1, 8192, 32, 8, 128, bf, bf, 64, 0, 0, false, 8}, {1, 8192, 32, 8, 128, bf, f8, 64, 0, 0, false, 8},
        {1, 8192, 32, 8, 128, bf, bf, 64, 0, 16, false, 8}, {1, 8192, 32, 8, 128, bf, f8, 64, 0, 16, false, 8},
        // 64 rows per KV head (q_len 8 x group 8): the plan's 128-key tile against 64 (h42)
        {64, 4096, 64, 8, 128, bf, f8, 64, 0, 0, false, 8}, {64, 4096, 64, 8, 128, bf, f8, 64, 64, 0, false, 8},
        {8, 4096, 64, 8, 128, bf, f8, 64, 0, 0, false, 8}, {8, 4096, 64, 8, 128, bf, f8, 64, 64, 0, false, 8},
    };
    if (quick) shapes.resize(4);
    // --sweep: the split count and tile at the shapes that miss a target (PDL on; us_nopdl off).
    if (mode("--sweep")) {
      shapes.clear();
      for (DType kv : {bf, f8}) {
        for (int t : {32, 64, 128})
          for (int sp : {0, 16, 24, 48, 64}) {
            if (kv == bf && t == 128) continue;
            shapes.push_back({1, 8192, 32, 8, 128, bf, kv, 64, t, sp});
          }
      }
      for (int L : {16384, 32768, 65536})  // where the short-split rule stops (8 tiles)
        for (int sp : {0, 16, 32}) shapes.push_back({1, L, 32, 8, 128, bf, bf, 64, 0, sp});
      for (int sp : {0, 16}) shapes.push_back({1, 65536, 32, 8, 128, bf, f8, 64, 0, sp});
      for (int sp : {0, 3, 4, 6}) shapes.push_back({16, 4096, 32, 8, 128, bf, f8, 64, 0, sp});
      for (int sp : {0, 3, 4}) shapes.push_back({16, 4096, 32, 8, 128, bf, f8, 64, 64, sp});
      for (int sp : {0, 48, 64}) shapes.push_back({1, 65536, 32, 8, 128, bf, f8, 64, 0, sp});
      shapes.push_back({1, 65536, 32, 8, 128, bf, f8, 64, 64, 0});
      for (int sp : {0, 4, 6}) shapes.push_back({32, 4096, 16, 4, 256, bf, f8, 64, 0, sp});
      shapes.push_back({32, 4096, 16, 4, 256, bf, f8, 64, 64, 0});
      shapes.push_back({128, 8192, 32, 8, 128, bf, f8, 64, 64, 0});
    }

    // --waves: forced split counts where the CTAs fill a fraction of their last wave
    // (wave quantisation; docs/KERNEL_NOTES.md, hopper h3), and B=1 split counts (up to 16
    // splits merge in a cluster on the hopper backend, more through the workspace).
    if (mode("--waves")) {
      shapes.clear();
      for (DType kv : {bf, f8}) {
        for (int sp : {0, 1, 2, 3, 4}) shapes.push_back({64, 4096, 32, 8, 128, bf, kv, 64, 0, sp});
        for (int sp : {0, 1, 2, 3}) shapes.push_back({128, 8192, 32, 8, 128, bf, kv, 64, 0, sp});
        for (int sp : {0, 8, 16, 24, 32, 48}) shapes.push_back({1, 8192, 32, 8, 128, bf, kv, 64, 0, sp});
      }
      for (int sp : {0, 1, 2, 3, 4, 6}) shapes.push_back({16, 4096, 32, 8, 128, bf, f8, 64, 0, sp});
      for (DType kv : {bf, f8})  // 16 splits (one CTA per SM) against the slot rule's 32
        for (int sp : {0, 16, 32}) shapes.push_back({1, 65536, 32, 8, 128, bf, kv, 64, 0, sp});
      for (int sp : {2, 4}) shapes.push_back({16, 4096, 32, 8, 128, bf, f8, 64, 64, sp});  // 4 CTAs/SM: 4 splits fill one wave
      for (int B : {1, 2, 4})  // the short-split rule's CTAs per SM at small batch (fp8, 128-key tiles)
        for (int L : {8192, 16384}) shapes.push_back({B, L, 32, 8, 128, bf, f8, 64, 0, 0});
      for (int sp : {0, 8, 16}) shapes.push_back({2, 4096, 32, 8, 128, bf, f8, 64, 0, sp});  // splits of 2 tiles
      for (int sp : {0, 12, 16, 24}) shapes.push_back({1, 6144, 32, 8, 128, bf, f8, 64, 0, sp});  // or of 4
      for (int sp : {0, 16}) shapes.push_back({1, 4096, 32, 8, 128, bf, f8, 64, 0, sp});
      for (DType kv : {bf, f8})  // small batches whose splits merge in a cluster (2..8 splits): PDL on and off
        for (int B : {1, 2, 3, 4, 8})
          for (int L : {2048, 4096, 8192}) shapes.push_back({B, L, 32, 8, 128, bf, kv, 64, 0, 0});
      for (int sp : {1, 2, 4}) shapes.push_back({16, 4096, 32, 8, 128, bf, bf, 64, 0, sp});
    }

    // --spec-rows: speculative decoding at small batch, the plan's rows per CTA (h43) against
    // one block of all of a KV head's rows (the plan before h43).
    if (mode("--spec-rows")) {
      shapes.clear();
      for (DType kv : {bf, f8})
        for (auto [Hq, q] : {std::pair{32, 4}, std::pair{32, 8}, std::pair{64, 8}}) {
          std::vector<std::pair<int, int>> batch_len = {{1, 4096}, {1, 8192}, {2, 8192}, {4, 8192},
                                                        {8, 8192}, {1, 32768}};
          for (auto [B, L] : batch_len)
            for (int rows : {0, 64}) shapes.push_back({B, L, Hq, 8, 128, bf, kv, 64, 0, 0, false, q, rows});
        }
      // 8-row blocks of fp8 take the slot rule's 16 splits at B=1 L=8192 (h44), against h41's cap of 8
      shapes.push_back({1, 8192, 32, 8, 128, bf, f8, 64, 0, 8, false, 8});
      for (DType kv : {bf, f8})  // 64 rows at larger batch, where the rule keeps one block: two of 32 against it
        for (int B : {16, 64})
          for (int rows : {0, 32}) shapes.push_back({B, 4096, 64, 8, 128, bf, kv, 64, 0, 0, false, 8, rows});
    }

    // --spec-long: speculative decoding over long sequences, one knob at a time against the plan:
    // the 128-key tile, half the row blocks (twice the rows per CTA), both. A tuned table beat
    // the plan by 11-25 % at B=1 L=32768 with two knobs moved at once (KERNEL_NOTES, session 18).
    if (mode("--spec-long")) {
      shapes.clear();
      for (DType kv : {bf, f8})
        for (auto [Hq, q, half_rows] : {std::tuple{32, 4, 8}, std::tuple{32, 8, 16}, std::tuple{64, 8, 32}})
          for (auto [B, L] : {std::pair{1, 16384}, std::pair{2, 32768}, std::pair{1, 65536}})
            for (int tile : {0, 128})
              for (int rows : {0, half_rows})
                shapes.push_back({B, L, Hq, 8, 128, bf, kv, 64, tile, 0, false, q, rows});
    }

    // --spec-rows-dims: the same question at head_dim 64 and 256 (fp8: auto runs hopper there),
    // one block (the rule's choice: it is measured at 128 only) against blocks of 8 and 16 rows.
    if (mode("--spec-rows-dims")) {
      shapes.clear();
      for (int D : {64, 256})
        for (int q : {4, 8})
          for (int B : {1, 2})
            for (int rows : {0, 8, 16}) shapes.push_back({B, 8192, 32, 8, D, bf, f8, 64, 0, 0, false, q, rows});
    }

    Options opts = Options::from_env();
    opts.disk_cache = false;  // compile every spec: its NVRTC seconds are part of the report
    Engine engine(opts);
    CudaStream stream;
    std::mt19937 rng(1234);
    const int shape_w = extras.lse || extras.sink ? 58 : 46;  // room for " +lse +sink"
    std::printf("\n%-*s %6s %9s %9s %7s %9s %7s %8s\n", shape_w, "shape (B L Hq Hk D in kv page tile)",
                "splits", "us", "GB/s", "%copy", "us_nopdl", "nvrtc_s", "regs");
    const std::vector<Backend> backends = bench_backends();
    // A mode's blocks overlap (the plan rows of B=1 L=8192 and the small batches recur), and
    // a forced split count or tile can come out as the plan's own, or two counts round to one
    // launch: each launch (shape, kernel, splits) is timed once per backend asked for, where it
    // first appears.
    std::vector<std::string> timed;
    for (const Shape& s : shapes)
    for (const Backend backend : backends) {
      const std::string key = fmt::format("{} {} {} {} {} {} {} {}{}", s.B, s.L, s.Hq, s.Hk, s.D, to_string(s.input),
                                          to_string(s.kv), s.page, s.q_len > 1 ? fmt::format(" q{}", s.q_len) : "");
      if (!only.keeps(key)) continue;
      DecodeParams p;
      BenchPages pages(s.B, s.L, s.page);
      pages.set_shape(p);
      const std::size_t kv_bytes = pages.count * s.page * s.Hk * s.D * dtype_bytes(s.kv);
      const int rotate = static_cast<int>(std::clamp<std::size_t>((512u << 20) / (2 * kv_bytes) + 1, 1, 8));

      p.input = s.input;
      p.kv = s.kv;
      p.output = s.input;
      p.q_len = s.q_len;
      p.backend = backend;
      p.num_q_heads = s.Hq;
      p.num_kv_heads = s.Hk;
      p.head_dim = s.D;
      p.kv_scale = 0.5f;
      p.kv_tile = s.kv_tile;
      p.num_splits = s.splits;
      p.cta_rows = s.cta_rows;
      p.kv_layout = s.hnd ? KvLayout::hnd : KvLayout::nhd;
      // Before the plan: it is the plan decode() makes with them.
      const ExtrasBuffers extra(extras, s.B, s.q_len, s.Hq, rng);
      p.lse = extra.lse();
      p.sinks = extra.sinks();
      DecodePlan plan;
      try {
        plan = decode_plan(p, info);
      } catch (const Error& e) {  // a forced split count this spec cannot merge: skip the row
        std::printf("%-*s skipped: %s\n", shape_w, key.c_str(), e.what());
        continue;
      }
      const std::string launch = fmt::format("{} {} {} {} {} {}", key, to_string(backend), canonical_name(plan.spec),
                                             plan.num_splits, plan.split_tokens, s.hnd);
      if (std::find(timed.begin(), timed.end(), launch) != timed.end()) continue;
      timed.push_back(launch);
      pages.upload(p, rng);
      std::vector<DeviceBuffer> ks, vs;
      for (int r = 0; r < rotate; ++r) {
        ks.emplace_back(kv_bytes);
        vs.emplace_back(kv_bytes);
        fill_random(ks.back(), s.kv, rng);
        fill_random(vs.back(), s.kv, rng);
      }
      DeviceBuffer d_q(std::size_t(s.B) * s.q_len * s.Hq * s.D * 2), d_out(std::size_t(s.B) * s.q_len * s.Hq * s.D * 2);
      fill_random(d_q, s.input, rng);
      std::vector<std::uint32_t> mask(std::size_t(s.B) * s.q_len);  // causal: draft i sees drafts 0..i
      for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = (2u << (i % s.q_len)) - 1u;
      DeviceBuffer d_mask = to_device(mask);

      p.spec_mask = s.q_len > 1 ? d_mask.get<std::uint32_t>() : nullptr;
      p.q = d_q.get();
      p.out = d_out.get();
      const CubinRef cubin = engine.cubin(plan.spec);
      const DeviceBuffer ws = zeroed_workspace(p, plan.workspace_bytes);

      // Warm up (loads the kernel), then capture `kLaunches` launches rotating buffers.
      constexpr int kLaunches = 20;
      for (int r = 0; r < rotate; ++r) {
        p.k_cache = ks[r].get();
        p.v_cache = vs[r].get();
        decode(engine, p, stream.get());
      }
      XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream.get()));
      const LoadedKernel& k = engine.kernel(plan.spec, 0);
      // One graph of kLaunches back-to-back launches; median per-launch us of 10 replays.
      // us: as decode() plans it (PDL where the plan asks for it: each launch's CTAs become
      // resident while the previous one drains, as behind a real upstream kernel);
      // us_nopdl: the same graph with plain launches.
      auto time_launches = [&](bool pdl) {
        p.programmatic_dependent_launch = pdl;
        return graph_us_per_launch(stream.get(), kLaunches, [&](int i) {
          p.k_cache = ks[i % rotate].get();
          p.v_cache = vs[i % rotate].get();
          decode(engine, p, stream.get());
        });
      };
      // Each timed twice, alternating, the faster kept: some shapes (speculative decoding)
      // ran up to 10 % slower ~50 ms into a row whatever their launches, so a second graph
      // timed once would carry the drift (docs/KERNEL_NOTES.md h13).
      double runs[4];  // plain, as planned, plain, as planned
      for (int r = 0; r < 4; ++r) runs[r] = time_launches(r % 2 == 1);
      const double us_nopdl = std::min(runs[0], runs[2]), us = std::min(runs[1], runs[3]);
      const double kv_read = 2.0 * std::size_t(s.B) * s.L * s.Hk * s.D * dtype_bytes(s.kv);
      const double gbps = kv_read / (us * 1e-6) / 1e9;
      const std::string rows = plan.spec.cta_rows ? fmt::format(" r{}", plan.spec.cta_rows) : "";
      const std::string label = fmt::format("{} t{}{} {}{}{}{}", key, normalized(plan.spec).kv_tile, rows,
                                            to_string(plan.spec.backend).substr(0, 4),
                                            s.splits ? " forced" : "", s.hnd ? " HND" : "", extras.label());
      std::printf("%-*s %6d %9.1f %9.0f %6.1f%% %9.1f %7.2f %8d\n", shape_w, label.c_str(), plan.num_splits,
                  us, gbps, 100.0 * gbps * 1e9 / copy_bw, us_nopdl, cubin.seconds, k.num_regs);
      std::fprintf(
          stderr,
          "{\"B\": %d, \"L\": %d, \"Hq\": %d, \"Hk\": %d, \"D\": %d, \"input\": \"%s\", \"kv\": \"%s\", "
          "\"page\": %d, \"hnd\": %d, \"q_len\": %d, \"backend\": \"%s\", \"splits\": %d, \"us\": %.2f, "
          "\"us_nopdl\": %.2f, \"GBps\": %.1f, \"pct_copy\": %.1f, "
          "\"nvrtc_s\": %.3f, \"spec\": \"%s\", \"us_runs\": [%.2f, %.2f, %.2f, %.2f]%s}\n",
          s.B, s.L, s.Hq, s.Hk, s.D, to_string(s.input).c_str(), to_string(s.kv).c_str(), s.page,
          s.hnd ? 1 : 0, s.q_len, to_string(plan.spec.backend).c_str(), plan.num_splits, us, us_nopdl, gbps,
          100.0 * gbps * 1e9 / copy_bw, cubin.seconds, cubin.name.c_str(), runs[0], runs[1], runs[2], runs[3],
          extras.json().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
