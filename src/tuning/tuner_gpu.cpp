// The tuner on a GPU: times candidate variants of one launch on its own
// buffers, and Engine::tune, which publishes the result.
//
// How a candidate is timed, and why (as bench_decode times, docs/PERF.md):
//   - the workspace is the tuner's, sized for the largest candidate and zeroed
//     once (the split counters reset themselves, as in production);
//   - warm-up launches first (the first also loads, or compiles, the kernel);
//   - then a CUDA graph of back-to-back launches (PDL as the plan asks), rotating
//     over copies of the KV cache (cache_rotation) so each launch reads its pages
//     from HBM, as when many layers share the GPU; CUDA events around each replay,
//     the median per-launch time of the replays. Every candidate of a key gets
//     the same number of launches per graph, set from the heuristic's time.
//     Serving replays graphs: one plain launch after an L2 rewrite (the timer
//     until session 19) read 14-28 us launches 4-5 us slow and misordered them;
//   - the acceptance re-timing alternates winner and heuristic in short blocks
//     of replays (A A A B B B ...), so drift hits both.

#include <algorithm>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "runtime/cuda_api.hpp"
#include "tuning/gpu_scratch.hpp"
#include "util/log.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/ops/mla_decode.hpp"
#include "xqajit/tuning/tuner.hpp"

namespace xqajit {
namespace {

/// One launch of a candidate on copy `copy` of the KV cache, on `stream`.
using Launch = std::function<void(const TunedChoice&, int copy, CUstream stream)>;

double median(std::vector<double>& us) {
  std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 2), us.end());
  return us[us.size() / 2];
}

// The caller's KV caches and `copies - 1` byte copies of each: copy 0 is the caller's.
class CacheCopies {
 public:
  struct Cache {
    const void* ptr;
    std::size_t bytes;
  };
  CacheCopies(const detail::CudaApi& api, const std::vector<Cache>& caches, int copies) : caches_(caches) {
    for (int r = 1; r < copies; ++r)
      for (const Cache& c : caches_) {
        copies_.emplace_back(api, c.bytes);
        XQAJIT_CU_CHECK(api, cuMemcpyDtoD(copies_.back().ptr(), reinterpret_cast<CUdeviceptr>(c.ptr), c.bytes));
      }
    XQAJIT_CU_CHECK(api, cuStreamSynchronize(nullptr));  // the copies ran on the legacy stream
  }
  int count() const { return 1 + static_cast<int>(copies_.size() / std::max<std::size_t>(caches_.size(), 1)); }
  const void* at(std::size_t cache, int copy) const {
    return copy == 0 ? caches_[cache].ptr : copies_[(copy - 1) * caches_.size() + cache].get();
  }

 private:
  std::vector<Cache> caches_;
  std::vector<detail::DeviceMemory> copies_;
};

// Times graphs of launches of one problem on the tuner's stream (the context current).
class GraphTimer final : public Timer {
 public:
  GraphTimer(const detail::CudaApi& api, CUstream stream, Launch launch, int copies, const TunedChoice& heuristic,
             const TuneSettings& settings)
      : api_(api), stream_(stream), launch_(std::move(launch)), copies_(copies), heuristic_(heuristic),
        settings_(settings), events_(api) {}

  double median_us(const TuningKey&, const TunedChoice& choice) override {
    auto samples = replay_us(graph_of(choice), std::max(settings_.iters, 1));
    const double us = median(samples);
    if (settings_.on_candidate) settings_.on_candidate(choice, us);
    return us;
  }

  // Interleaved in short blocks (A A A B B B ...; the first replay of each block
  // untimed), not strictly A B A B: alternating two attention kernels launch
  // by launch slowed the one with the larger shared-memory footprint by 5 %
  // (geo-mean; up to 23 %) against its back-to-back median on an H200
  // (docs/PERF.md, "Tuner (session 3)"), which no serving loop does. Blocks
  // keep what interleaving is for (clock and thermal drift hit both alike).
  std::pair<double, double> interleaved_us(const TuningKey&, const TunedChoice& a,
                                           const TunedChoice& b) override {
    constexpr int kBlock = 3;
    const detail::CapturedGraph& ga = graph_of(a);
    const detail::CapturedGraph& gb = graph_of(b);
    std::vector<double> sa, sb;
    for (int r = 0; r < std::max(settings_.confirm_rounds, 1); ++r) {
      for (auto [graph, samples] : {std::pair{&ga, &sa}, std::pair{&gb, &sb}}) {
        auto block = replay_us(*graph, kBlock - 1);
        samples->insert(samples->end(), block.begin(), block.end());
      }
    }
    return {median(sa), median(sb)};
  }

 private:
  // The candidate's graph, captured on first use after its warm-up launches.
  const detail::CapturedGraph& graph_of(const TunedChoice& choice) {
    for (const auto& [c, graph] : graphs_)
      if (c == choice) return *graph;
    if (launches_ == 0) {
      try {
        launches_ = graph_launches(plain_us(heuristic_));
      } catch (const std::exception&) {
        launches_ = graph_launches(plain_us(choice));  // the heuristic cannot run here (tune_key allows it)
      }
    }
    for (int w = 0; w < std::max(settings_.warmup, 1); ++w) launch_(choice, 0, stream_);
    XQAJIT_CU_CHECK(api_, cuStreamSynchronize(stream_));
    auto graph = std::make_unique<detail::CapturedGraph>(api_, stream_, [&] {
      for (int i = 0; i < launches_; ++i) launch_(choice, i % copies_, stream_);
    });
    graphs_.emplace_back(choice, std::move(graph));
    return *graphs_.back().second;
  }

  // One plain launch after warm-up (the heuristic's), to size every graph of the key.
  double plain_us(const TunedChoice& choice) {
    for (int w = 0; w < std::max(settings_.warmup, 1); ++w) launch_(choice, 0, stream_);
    XQAJIT_CU_CHECK(api_, cuEventRecord(events_.start, stream_));
    launch_(choice, 0, stream_);
    return elapsed_us();
  }

  // `timed` replays after one untimed one: the per-launch us of each.
  std::vector<double> replay_us(const detail::CapturedGraph& graph, int timed) {
    graph.replay();
    std::vector<double> us;
    for (int r = 0; r < timed; ++r) {
      XQAJIT_CU_CHECK(api_, cuEventRecord(events_.start, stream_));
      graph.replay();
      us.push_back(elapsed_us() / launches_);
    }
    return us;
  }

  double elapsed_us() {
    XQAJIT_CU_CHECK(api_, cuEventRecord(events_.stop, stream_));
    XQAJIT_CU_CHECK(api_, cuEventSynchronize(events_.stop));
    float ms = 0;
    XQAJIT_CU_CHECK(api_, cuEventElapsedTime(&ms, events_.start, events_.stop));
    return ms * 1000.0;
  }

  const detail::CudaApi& api_;
  CUstream stream_;
  Launch launch_;
  int copies_;
  TunedChoice heuristic_;
  const TuneSettings& settings_;
  detail::EventPair events_;
  int launches_ = 0;
  std::vector<std::pair<TunedChoice, std::unique_ptr<detail::CapturedGraph>>> graphs_;
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

// The KV caches a launch reads, and a launch's params pointed at copy `copy` of them.
std::vector<CacheCopies::Cache> kv_caches(const DecodeParams& p) {
  const DecodeCacheBytes bytes = decode_cache_bytes(p);
  if (bytes.k == 0) return {};
  return {{p.k_cache, bytes.k}, {p.v_cache, bytes.v}};
}
std::vector<CacheCopies::Cache> kv_caches(const MlaDecodeParams& p) {
  const std::size_t bytes = mla_decode_cache_bytes(p);
  if (bytes == 0) return {};
  return {{p.kv_cache, bytes}};
}
void use_caches(DecodeParams& p, const CacheCopies& rotation, int copy) {
  if (copy == 0) return;
  p.k_cache = rotation.at(0, copy);
  p.v_cache = rotation.at(1, copy);
}
void use_caches(MlaDecodeParams& p, const CacheCopies& rotation, int copy) {
  if (copy != 0) p.kv_cache = rotation.at(0, copy);
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
  }
  XQAJIT_CU_CHECK(api, cuStreamSynchronize(cu_stream));  // the caller's work on its buffers is done

  std::vector<CacheCopies::Cache> caches = kv_caches(params);
  std::size_t cache_bytes = 0, free_bytes = 0, total_bytes = 0;
  for (const auto& c : caches) cache_bytes += c.bytes;
  XQAJIT_CU_CHECK(api, cuMemGetInfo(&free_bytes, &total_bytes));
  const int copies = cache_rotation(cache_bytes, static_cast<std::size_t>(std::max(device.l2_bytes, 0)), free_bytes);
  if (cache_bytes == 0)
    detail::logger()->info("tune: num_pages is 0, so the KV cache is timed without copies (L2 may hold it)");
  const CacheCopies rotation(api, caches, copies);

  // Graphs cannot capture the legacy stream a caller may pass: the tuner times on its own.
  const detail::OwnedStream timing(api, CU_STREAM_NON_BLOCKING);
  Launch run = [&](const TunedChoice& c, int copy, CUstream s) {
    Params p = params;
    set_knobs(p, c);
    use_caches(p, rotation, copy);
    p.workspace = workspace.get();
    p.workspace_bytes = workspace.bytes();
    launch(engine, p, reinterpret_cast<Stream>(s));
  };
  std::optional<TuningEntry> entry;
  {
    GraphTimer timer(api, timing.get(), run, rotation.count(), heuristic, settings);
    entry = tune_key(key, timer, candidate_fits, heuristic);
    XQAJIT_CU_CHECK(api, cuStreamSynchronize(timing.get()));  // before the graphs, copies and workspace go
  }
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
  // The length mla_decode_plan looks up (topk for a sparse launch), so a key is found by the
  // launches it was tuned for.
  return key_for(engine, device, mla_decode_spec(without_knobs(p), device.best_arch()), p.batch,
                 mla_decode_covered_keys(p));
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
  return tune_params(engine, params, stream, settings, &decode_plan, &decode);
}

std::optional<TuningEntry> tune_launch(Engine& engine, const MlaDecodeParams& params, Stream stream,
                                       const TuneSettings& settings) {
  return tune_params(engine, params, stream, settings, &mla_decode_plan, &mla_decode);
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
