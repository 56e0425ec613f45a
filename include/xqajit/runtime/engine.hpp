#pragma once
/// The facade: memory -> bundles -> disk cache -> remote (Redis) -> NVRTC, then a
/// per-device load. Thread-safe; threads (and, through the disk cache's lock and
/// the remote's lease, processes on one host or across a fleet) asking for the
/// same missing spec compile it once.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xqajit/runtime/driver.hpp"
#include "xqajit/runtime/options.hpp"
#include "xqajit/spec/spec.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit {

class DiskCache;
class Compiler;
class RemoteCache;
struct DecodeParams;
struct MlaDecodeParams;

/// Where a cubin came from.
enum class Source { memory, bundle, disk, remote, compiled };
std::string to_string(Source s);

struct CubinRef {
  std::string name;
  Source source = Source::memory;
  std::filesystem::path path;  // entry dir or bundle file; empty when memory-only
  std::string fingerprint;     // toolchain fingerprint of the build that made this cubin
  std::shared_ptr<const std::vector<char>> cubin;
  double seconds = 0;          // time spent in this call
};

struct EngineStats {
  std::uint64_t memory_hits = 0, bundle_hits = 0, disk_hits = 0, remote_hits = 0, compiles = 0, failures = 0;
  double compile_seconds = 0;
};

struct PrewarmResult {
  KernelSpec spec;
  std::string name;
  bool ok = false;
  Source source = Source::memory;
  double seconds = 0;
  std::string error;  // the exception's message (a CompileError's includes its log) when !ok
};

class Engine {
 public:
  explicit Engine(Options options = Options::from_env());
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// The cubin for `spec` (no GPU needed). Validates the spec against NVRTC's
  /// archs when NVRTC is present. Throws SpecError, CompileError, NotAvailableError.
  CubinRef cubin(const KernelSpec& spec);

  /// The kernel loaded on `device` (cached per device). If the kernel is not
  /// yet in memory and `capturing_stream` is being captured into a graph, throws
  /// NotAvailableError telling the caller to prewarm.
  const LoadedKernel& kernel(const KernelSpec& spec, int device, Stream capturing_stream = nullptr);

  /// Gets the cubin of every kernel a launch of `specs` may use over `jobs` worker
  /// threads (0 = hardware threads): a backend=auto spec becomes one kernel per
  /// backend its launch plan picks from (launch_variants), and the tuned variants
  /// this engine's tuning table names for them are added (prewarm_specs), so no
  /// launch compiles; one result per kernel. Never throws for a single spec;
  /// `on_done` is called (serialised) per kernel.
  std::vector<PrewarmResult> prewarm(const std::vector<KernelSpec>& specs, int jobs = 0,
                                     const std::function<void(const PrewarmResult&)>& on_done = {});

  /// `specs` plus the variants (kv_tile, backend) the tuning table chose for
  /// them on this toolchain: what prewarm() compiles.
  std::vector<KernelSpec> prewarm_specs(const std::vector<KernelSpec>& specs) const;

  /// Tunes the launch `params` describes on the caller's own buffers (q,
  /// caches, block table, lengths are read; `out` is written; the workspace is
  /// the tuner's own, zeroed once): times every candidate variant (CUDA events,
  /// warm-up, L2 flushed, median), re-times winner vs heuristic interleaved,
  /// then publishes the result for this process's plans and saves it in the
  /// tuning table (unless tuning is "off"). Synchronises `stream`; compiles
  /// candidates. Refused (NotAvailableError) while `stream` is capturing, like
  /// a compile. Returns nothing when the call has a single candidate.
  std::optional<TuningEntry> tune(const DecodeParams& params, Stream stream);
  std::optional<TuningEntry> tune(const MlaDecodeParams& params, Stream stream);
  /// The tuning table this engine published (empty when none; never null).
  std::shared_ptr<const TuningTable> tuning() const;

  EngineStats stats() const;
  const Options& options() const;
  /// Null when the engine runs memory-only (XQAJIT_DISK_CACHE=0).
  DiskCache* disk_cache();
  /// Null when no remote tier is configured (or it could not start: see the log).
  RemoteCache* remote_cache();
  const Compiler& compiler() const;
  /// The toolchain fingerprint entries are stored under.
  std::string fingerprint() const;

 private:
  void activate_tuning();  // publishes the tuning table for the plans (tuning.hpp)
  void publish_tuning(const TuningEntry& entry);  // after tune()
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A process-wide engine built from the environment on first use.
Engine& default_engine();

}  // namespace xqajit
