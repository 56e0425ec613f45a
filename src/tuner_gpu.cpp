// The tuner on a GPU: times candidate variants of one launch on its own
// buffers, and Engine::tune, which publishes the result.
//
// How a candidate is timed, and why:
//   - the workspace is the tuner's, sized for the largest candidate and zeroed
//     once (the split counters reset themselves, as in production);
//   - warm-up launches first (the first also loads, or compiles, the kernel);
//   - before every timed launch a buffer of 2 x L2 is rewritten, so the pages
//     come from HBM as they do when many layers share the GPU;
//   - CUDA events around the launch alone, the median of the samples;
//   - the acceptance re-timing alternates winner and heuristic in short
//     blocks (A A A B B B ...), so drift hits both.

#include <algorithm>
#include <functional>
#include <type_traits>
#include <vector>

#include "detail/cuda_api.hpp"
#include "detail/gpu_scratch.hpp"
#include "xqajit/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/ops/mla_decode.hpp"
#include "xqajit/tuner.hpp"

namespace xqajit {
namespace {

using Launch = std::function<void(const TunedChoice&)>;

double median(std::vector<float>& ms) {
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2] * 1000.0;
}

// Times launches of one problem on one stream (its context current).
class LaunchTimer final : public Timer {
 public:
  LaunchTimer(const detail::CudaApi& api, CUstream stream, const DeviceInfo& device, Launch launch,
              const TuneSettings& settings)
      : api_(api), stream_(stream), launch_(std::move(launch)), settings_(settings), events_(api) {
    flush_bytes_ = 2 * static_cast<std::size_t>(std::max(device.l2_bytes, 1 << 20));
    flush_ = detail::DeviceMemory(api_, flush_bytes_);
  }

  double median_us(const TuningKey&, const TunedChoice& choice) override {
    auto samples = run({choice}, std::max(settings_.warmup, 1), std::max(settings_.iters, 1));
    const double us = median(samples[0]);
    if (settings_.on_candidate) settings_.on_candidate(choice, us);
    return us;
  }

  // Interleaved in short blocks (A A A B B B ...; the first launch of each block
  // untimed), not strictly A B A B: alternating two attention kernels launch
  // by launch slowed the one with the larger shared-memory footprint by 5 %
  // (geo-mean; up to 23 %) against its back-to-back median on an H200
  // (docs/PERF.md, "Tuner (session 3)"), which no serving loop does. Blocks
  // keep what interleaving is for (clock and thermal drift hit both alike).
  std::pair<double, double> interleaved_us(const TuningKey&, const TunedChoice& a,
                                           const TunedChoice& b) override {
    constexpr int kBlock = 3;
    std::vector<float> sa, sb;
    for (int r = 0; r < std::max(settings_.confirm_rounds, 1); ++r) {
      auto block_a = run({a}, 1, kBlock - 1);
      auto block_b = run({b}, 1, kBlock - 1);
      sa.insert(sa.end(), block_a[0].begin(), block_a[0].end());
      sb.insert(sb.end(), block_b[0].begin(), block_b[0].end());
    }
    return {median(sa), median(sb)};
  }

 private:
  // `rounds` rounds over `choices` in order, each timed launch after an L2 flush.
  std::vector<std::vector<float>> run(const std::vector<TunedChoice>& choices, int warmup, int rounds) {
    for (int w = 0; w < warmup; ++w)
      for (const auto& c : choices) launch_(c);
    XQAJIT_CU_CHECK(api_, cuStreamSynchronize(stream_));
    std::vector<std::vector<float>> samples(choices.size());
    for (int r = 0; r < rounds; ++r)
      for (std::size_t i = 0; i < choices.size(); ++i) {
        XQAJIT_CU_CHECK(api_, cuMemsetD32Async(flush_.ptr(), static_cast<unsigned>(++flushes_),
                                               flush_bytes_ / 4, stream_));
        XQAJIT_CU_CHECK(api_, cuEventRecord(events_.start, stream_));
        launch_(choices[i]);
        XQAJIT_CU_CHECK(api_, cuEventRecord(events_.stop, stream_));
        XQAJIT_CU_CHECK(api_, cuEventSynchronize(events_.stop));
        float ms = 0;
        XQAJIT_CU_CHECK(api_, cuEventElapsedTime(&ms, events_.start, events_.stop));
        samples[i].push_back(ms);
      }
    return samples;
  }

  const detail::CudaApi& api_;
  CUstream stream_;
  Launch launch_;
  const TuneSettings& settings_;
  detail::EventPair events_;
  std::size_t flush_bytes_ = 0;
  detail::DeviceMemory flush_;
  unsigned flushes_ = 0;
};

TunedChoice knobs_of(const KernelSpec& planned, Kind kind) {
  TunedChoice c;
  c.backend = planned.backend;
  // A family whose only tile is "the backend's default" stores 0, as its candidates do.
  c.kv_tile = candidate_space(kind).kv_tiles == std::vector<int>{0} ? 0 : planned.kv_tile;
  return c;
}

template <class Params>
void set_knobs(Params& p, const TunedChoice& c) {
  p.kv_tile = c.kv_tile;
  p.num_splits = c.num_splits;
  p.backend = c.backend;
  if constexpr (std::is_same_v<Params, DecodeParams>) p.cta_rows = c.cta_rows;  // MLA has fixed rows
}

// The workspace of the largest candidate the plan accepts (0 when none splits).
template <class Params, class PlanFn>
std::size_t largest_workspace(Params p, const std::vector<TunedChoice>& choices, const DeviceInfo& device,
                              PlanFn plan) {
  std::size_t bytes = 0;
  for (const auto& c : choices) {
    set_knobs(p, c);
    try {
      bytes = std::max(bytes, plan(p, device).workspace_bytes);
    } catch (const std::exception&) {
      // the candidate cannot be planned: tune_key skips it when its launch throws
    }
  }
  return bytes;
}

template <class Params, class PlanFn, class LaunchFn>
std::optional<TuningEntry> tune_params(Engine& engine, const Params& params, Stream stream,
                                       const TuneSettings& settings, PlanFn plan, LaunchFn launch) {
  validate(params);
  Driver& driver = Driver::instance(engine.options().libcuda_path);
  if (driver.stream_is_capturing(stream))
    throw NotAvailableError(
        "tuning compiles candidate kernels and synchronises the stream, which a stream capturing a CUDA "
        "graph cannot do: tune (Engine::tune or `xqajit tune`) before capture");
  const int ordinal = driver.stream_device(stream);
  const DeviceInfo& device = driver.device(ordinal);
  const TuningKey key = tuning_key(engine, params, device);
  const TunedChoice heuristic = heuristic_choice(params, device);

  const detail::CudaApi& api = detail::cuda_api(engine.options().libcuda_path);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  detail::ContextScope context(api, cu_stream, ordinal);
  std::vector<TunedChoice> choices = tuning_candidates(key.spec);
  choices.push_back(heuristic);
  detail::DeviceMemory workspace(api, largest_workspace(params, choices, device, plan));
  if (workspace.bytes()) {
    // Zeroed once, like a caller's workspace; launches leave the counters at zero.
    XQAJIT_CU_CHECK(api, cuMemsetD8Async(workspace.ptr(), 0, workspace.bytes(), cu_stream));
    XQAJIT_CU_CHECK(api, cuStreamSynchronize(cu_stream));
  }
  Launch run = [&](const TunedChoice& c) {
    Params p = params;
    set_knobs(p, c);
    p.workspace = workspace.get();
    p.workspace_bytes = workspace.bytes();
    launch(engine, p, stream);
  };
  LaunchTimer timer(api, cu_stream, device, run, settings);
  auto entry = tune_key(key, timer, candidate_fits, heuristic);
  XQAJIT_CU_CHECK(api, cuStreamSynchronize(cu_stream));  // before the workspace goes
  return entry;
}

TuningKey key_for(const Engine& engine, const DeviceInfo& device, KernelSpec spec, int batch,
                  std::int64_t max_seq_len) {
  TuningKey key;
  key.device = {device.name, device.cc_major, device.cc_minor, device.sm_count, engine.fingerprint()};
  key.spec = key_spec(spec);
  key.batch = batch_bucket(batch);
  key.seq_len = seq_bucket(max_seq_len);
  return key;
}

template <class Params>
Params without_knobs(Params p) {
  set_knobs(p, TunedChoice{});
  return p;
}

}  // namespace

TuningKey tuning_key(const Engine& engine, const DecodeParams& p, const DeviceInfo& device) {
  // The plan's own lookup (decode_plan) uses exactly these fields.
  return key_for(engine, device, decode_spec(without_knobs(p), device.best_arch()), p.batch,
                 static_cast<std::int64_t>(p.max_pages_per_seq) * p.page_size);
}

TuningKey tuning_key(const Engine& engine, const MlaDecodeParams& p, const DeviceInfo& device) {
  return key_for(engine, device, mla_decode_spec(without_knobs(p), device.best_arch()), p.batch,
                 static_cast<std::int64_t>(p.max_pages_per_seq) * p.page_size);
}

TunedChoice heuristic_choice(const DecodeParams& params, const DeviceInfo& device) {
  HeuristicPlansScope heuristic_only;
  return knobs_of(decode_plan(without_knobs(params), device).spec, Kind::gqa);
}

TunedChoice heuristic_choice(const MlaDecodeParams& params, const DeviceInfo& device) {
  HeuristicPlansScope heuristic_only;
  return knobs_of(mla_decode_plan(without_knobs(params), device).spec, Kind::mla);
}

std::optional<TuningEntry> tune_launch(Engine& engine, const DecodeParams& params, Stream stream,
                                       const TuneSettings& settings) {
  return tune_params(
      engine, params, stream, settings,
      [](const DecodeParams& p, const DeviceInfo& d) { return decode_plan(p, d); },
      [](Engine& e, const DecodeParams& p, Stream s) { decode(e, p, s); });
}

std::optional<TuningEntry> tune_launch(Engine& engine, const MlaDecodeParams& params, Stream stream,
                                       const TuneSettings& settings) {
  return tune_params(
      engine, params, stream, settings,
      [](const MlaDecodeParams& p, const DeviceInfo& d) { return mla_decode_plan(p, d); },
      [](Engine& e, const MlaDecodeParams& p, Stream s) { mla_decode(e, p, s); });
}

std::optional<TuningEntry> Engine::tune(const DecodeParams& params, Stream stream) {
  auto entry = tune_launch(*this, params, stream);
  if (entry) publish_tuning(*entry);
  return entry;
}

std::optional<TuningEntry> Engine::tune(const MlaDecodeParams& params, Stream stream) {
  auto entry = tune_launch(*this, params, stream);
  if (entry) publish_tuning(*entry);
  return entry;
}

}  // namespace xqajit
