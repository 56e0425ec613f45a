#pragma once
/// The tuner: which variants a shape can run, how they are timed and how the
/// winner is chosen and confirmed. The results go into a TuningTable (tuning.hpp).
///
///   candidates (per family, filtered by what fits the arch and the call)
///     --Timer::median_us--> fastest (the heuristic keeps ties within noise)
///     --Timer::interleaved_us (winner A, heuristic B, interleaved)--> gain, or revert
///
/// Selection and confirmation run over an injected Timer (tests use a fake);
/// tune_launch() times real launches on a GPU (src/tuning/tuner_gpu.cpp).

#include <cstddef>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "xqajit/runtime/driver.hpp"
#include "xqajit/spec/spec.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit {

class Engine;
struct DecodeParams;
struct MlaDecodeParams;

/// A family's variant space, as data: the kv_tile values, whether the backend
/// is an axis, the fixed split counts tried beside the automatic one, and the
/// rows per CTA (GQA hopper) tried beside the plan's.
struct CandidateSpace {
  Kind kind;
  std::vector<int> kv_tiles;      ///< {0} = only the backend's default
  bool backend_axis = false;      ///< every backend backends_for() offers on the arch
  std::vector<int> fixed_splits;  ///< tried beside 0 (automatic)
  std::vector<int> cta_rows;      ///< 0 = the plan's; others only where they name a variant
};
const CandidateSpace& candidate_space(Kind kind);

/// Whether a candidate can serve the call (fits shared memory, backend runs
/// the call's features); injectable for tests.
using CandidateFilter = std::function<bool(const KernelSpec& spec, const TunedChoice& choice)>;
/// The default filter: a backend backends_for() offers on `spec.arch`; GQA
/// tiles whose geometry fits that backend (hopper: kv_tile >= 64); rows per CTA
/// only for hopper and below its own N.
bool candidate_fits(const KernelSpec& spec, const TunedChoice& choice);

/// Every candidate of spec's family that passes `filter`, in table order.
/// Backends are always explicit (never automatic).
std::vector<TunedChoice> tuning_candidates(const KernelSpec& spec,
                                           const CandidateFilter& filter = candidate_fits);
/// The choice the spec's defaults make (default kv_tile of the arch's first
/// backend, automatic split count). The GPU tuner asks the plan instead
/// (heuristic_choice(params, device) below), which also sees the shape.
TunedChoice heuristic_choice(const KernelSpec& spec);
/// The kernel spec a candidate compiles to (what prewarming a tune needs).
KernelSpec candidate_spec(const KernelSpec& spec, const TunedChoice& choice);

/// Times candidates for one key. Throws when a candidate cannot run (it is
/// then skipped).
class Timer {
 public:
  virtual ~Timer() = default;
  /// The median µs of `choice` alone (after warm-up).
  virtual double median_us(const TuningKey& key, const TunedChoice& choice) = 0;
  /// Medians of `a` and `b` timed alternately (the GPU timer: in short blocks,
  /// A A A B B B ...), so drift in clocks or temperature hits both. The
  /// default times each with median_us().
  virtual std::pair<double, double> interleaved_us(const TuningKey& key, const TunedChoice& a,
                                                   const TunedChoice& b) {
    return {median_us(key, a), median_us(key, b)};
  }
};

/// A candidate must beat the heuristic by more than this fraction to win, and
/// a winner that loses the interleaved re-timing by more than it is reverted to
/// the heuristic: the issue's "never slower than the heuristic by more than
/// noise (2 %)" is checked with half that margin.
constexpr double kTuningNoise = 0.01;

/// Times every candidate of `key` (and `heuristic`, if the filter dropped it)
/// and picks the winner: the fastest, unless the heuristic is within
/// kTuningNoise of it. A winner other than the heuristic is then re-timed
/// against it interleaved (entry.confirm_*); losing by more than kTuningNoise
/// reverts it (entry.reverted). Returns nothing when fewer than two candidates
/// run (nothing to tune).
std::optional<TuningEntry> tune_key(const TuningKey& key, Timer& timer, const CandidateFilter& filter,
                                    const TunedChoice& heuristic);
std::optional<TuningEntry> tune_key(const TuningKey& key, Timer& timer,
                                    const CandidateFilter& filter = candidate_fits);

// ---- on a GPU (src/tuning/tuner_gpu.cpp) ----

/// How the GPU tuner times a candidate -- as bench_decode does, because serving replays
/// graphs: a CUDA graph of back-to-back launches (PDL as the plan asks), rotating over
/// copies of the KV cache so that no launch finds its pages in L2 from the one before.
/// (Until session 19 it timed one plain launch after rewriting 2 x L2, which read 14-28 us
/// launches 4-5 us slow and misordered their variants: docs/KERNEL_NOTES.md, session 18.)
///
/// Cache copies, the caller's own included, for launches reading `cache_bytes`: enough
/// that one rotation spans 8 x L2, at most 8, the extra copies within half of
/// `free_bytes`; 1 when cache_bytes is 0 (unknown).
int cache_rotation(std::size_t cache_bytes, std::size_t l2_bytes, std::size_t free_bytes);
/// Launches per graph for launches of about `launch_us`: a graph of ~400 us, 4 to 20.
int graph_launches(double launch_us);

struct TuneSettings {
  int warmup = 3;           ///< untimed plain launches per candidate (the first loads the kernel)
  int iters = 10;           ///< timed replays of the candidate's graph (median us per launch)
  int confirm_rounds = 15;  ///< A-block B-block rounds of graph replays in the interleaved re-timing
  /// Called once per candidate timed (after its median is known), for progress.
  std::function<void(const TunedChoice&, double median_us)> on_candidate;
};

/// The tuning key of a launch: this device, `engine`'s toolchain, the spec
/// without knobs, the batch and longest-sequence buckets.
TuningKey tuning_key(const Engine& engine, const DecodeParams& params, const DeviceInfo& device);
TuningKey tuning_key(const Engine& engine, const MlaDecodeParams& params, const DeviceInfo& device);
/// What decode_plan / mla_decode_plan choose with the tuning table ignored.
TunedChoice heuristic_choice(const DecodeParams& params, const DeviceInfo& device);
TunedChoice heuristic_choice(const MlaDecodeParams& params, const DeviceInfo& device);

/// Times the candidates of the launch `params` describes on its own buffers (and copies of
/// its KV cache: cache_rotation; num_pages must be set for them) and returns the result
/// without publishing it (Engine::tune publishes). The tuner's workspace is allocated and
/// zeroed once, for the largest candidate; the graphs run on a stream of the tuner's after
/// `stream` has drained. Throws ArgumentError for bad params and NotAvailableError when
/// `stream` is capturing.
std::optional<TuningEntry> tune_launch(Engine& engine, const DecodeParams& params, Stream stream,
                                       const TuneSettings& settings = {});
std::optional<TuningEntry> tune_launch(Engine& engine, const MlaDecodeParams& params, Stream stream,
                                       const TuneSettings& settings = {});

}  // namespace xqajit
