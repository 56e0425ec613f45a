#pragma once
/// Tuning results: which variant (kv_tile, split policy, backend) won for a
/// shape bucket on one device, persisted as a versioned JSON table
/// (`<cache root>/tuning/<device>.json`) and looked up on the launch path.
///
///   tuner (tuner.hpp) --measures--> TuningEntry --TuningTable::put--> save()
///   decode_plan --tuned_choice()--> exact bucket, else nearest bucket, else heuristic
///
/// Lookup is O(1): a hash of the key's fields (no strings built) finds the
/// group, whose exact-or-nearest answer for every (batch, seq) bucket was
/// precomputed when the table was built. It reads an immutable snapshot and
/// allocates nothing, so tuned launches stay graph-capturable and are safe
/// from many threads.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "xqajit/runtime/driver.hpp"
#include "xqajit/runtime/options.hpp"
#include "xqajit/spec/spec.hpp"

namespace xqajit {

class BundleReader;
class BundleWriter;

constexpr int kTuningFormatVersion = 1;
constexpr int kMaxTunedBatch = 2048;

/// Batch rounded down to a power of two, clamped to [1, 2048].
int batch_bucket(std::int64_t batch);
/// Longest sequence rounded down to a power of two (>= 1).
std::int64_t seq_bucket(std::int64_t max_seq_len);

/// Who ran it: the device and the toolchain that built the kernels.
struct TuningDevice {
  std::string name;  ///< e.g. "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::string toolchain;  ///< the compiler fingerprint
};

/// The tuning key: device + spec without its variant knobs (kv_tile, cta_rows,
/// backend) + shape bucket. q_len is part of the spec.
struct TuningKey {
  TuningDevice device;
  KernelSpec spec;           ///< its variant knobs are ignored (key_spec)
  int batch = 1;             ///< a bucket
  std::int64_t seq_len = 1;  ///< a bucket
};
/// `spec` as a tuning key holds it: the variant knobs a tuned choice sets (kv_tile,
/// cta_rows, backend) back at their automatic values.
KernelSpec key_spec(KernelSpec spec);
bool same_group(const TuningKey& a, const TuningKey& b);  ///< device and spec equal
bool operator==(const TuningKey& a, const TuningKey& b);

/// A variant's knobs. num_splits 0 = the automatic split count; cta_rows 0 = the plan's
/// rows per CTA (GQA hopper: planned_cta_rows), else KernelSpec::cta_rows.
struct TunedChoice {
  int kv_tile = 0;
  int num_splits = 0;
  Backend backend = Backend::automatic;
  int cta_rows = 0;
  friend bool operator==(const TunedChoice& a, const TunedChoice& b) {
    return a.kv_tile == b.kv_tile && a.num_splits == b.num_splits && a.backend == b.backend &&
           a.cta_rows == b.cta_rows;
  }
};
std::string to_string(const TunedChoice& c);  ///< "kv_tile=64 splits=auto backend=portable[ cta_rows=8]"

struct CandidateTime {
  TunedChoice choice;
  double median_us = 0;
  bool heuristic = false;  ///< the plan the heuristic would have chosen
};

struct TuningEntry {
  TuningKey key;
  TunedChoice winner;
  std::vector<CandidateTime> candidates;  ///< every candidate's median, for the margin
  /// The acceptance pass: winner and heuristic re-timed interleaved (tuner.hpp)
  /// after the selection; medians in µs, 0 when not run (winner == heuristic).
  double confirm_winner_us = 0, confirm_heuristic_us = 0;
  /// The winner lost that re-timing by more than the noise: the heuristic was kept.
  bool reverted = false;
  /// Heuristic over winner in the re-timing (1 when not re-timed).
  double retimed_gain() const {
    return confirm_winner_us > 0 && confirm_heuristic_us > 0 ? confirm_heuristic_us / confirm_winner_us : 1.0;
  }
  /// What the tuned plan gains over the heuristic plan: 1 when the winner is
  /// (or was reverted to) the heuristic.
  double gain() const { return reverted ? 1.0 : retimed_gain(); }
};

enum class ChoiceSource { heuristic, tuned, nearest };
std::string to_string(ChoiceSource s);

struct TunedLookup {
  ChoiceSource source = ChoiceSource::heuristic;
  TunedChoice choice;
};

/// Hash of (device, toolchain, spec minus knobs) computed field by field; no allocation.
std::uint64_t tuning_group_hash(const std::string& device_name, int cc_major, int cc_minor, int sm_count,
                                const std::string& toolchain, const KernelSpec& spec) noexcept;

/// An immutable-once-published set of entries. Build it (put/merge), then
/// publish it with set_active_tuning(); lookups read the published snapshot.
class TuningTable {
 public:
  /// Adds or replaces the entry for its key.
  void put(TuningEntry entry);
  /// Entries of `other` replace ours for equal keys.
  void merge(const TuningTable& other);
  const std::vector<TuningEntry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }

  /// Exact bucket, else the nearest bucket of the same group whose batch is at
  /// most kNearestBatchSteps log2 steps away (distance in log2 steps of batch
  /// plus seq; ties: the entry put first), its fixed split count scaled by the
  /// batch ratio so the grid keeps its CTAs; else heuristic. O(1), no allocation.
  ///
  /// Why the limit and the scaling: a split count is tuned for its batch (the
  /// grid is batch x heads x splits). A table tuned to B=8 answered B=16 and B=64
  /// with B=8's 2 splits and ran them 1.30 x slower than the heuristic (H100,
  /// docs/PERF.md "Session 19", run 2).
  static constexpr int kNearestBatchSteps = 1;
  TunedLookup lookup(const std::string& device_name, int cc_major, int cc_minor, int sm_count,
                     const std::string& toolchain, const KernelSpec& spec, std::int64_t batch,
                     std::int64_t max_seq_len) const noexcept;
  TunedLookup lookup(const TuningKey& key) const noexcept;

  std::string to_json() const;
  /// Throws std::runtime_error on a bad checksum, a foreign version or malformed JSON.
  static TuningTable from_json(const std::string& text);

 private:
  // One (device, toolchain, spec) group: for every (log2 batch, log2 seq)
  // bucket, the index of the entry that answers it (exact or nearest).
  static constexpr int kBatchSlots = 12;  // 1 ... 2048
  static constexpr int kSeqSlots = 41;    // 1 ... 2^40
  struct Group {
    std::size_t representative = 0;    // an entry of the group (collision check)
    std::vector<std::int32_t> answer;  // kBatchSlots * kSeqSlots entry indices
  };
  void insert(TuningEntry entry);  // put() without reindex()
  void reindex();
  std::vector<TuningEntry> entries_;
  std::unordered_map<std::uint64_t, std::vector<Group>> groups_;  // group hash -> groups (collisions: > 1)
};

/// "tuning/<sanitised device name>.json" under `cache_root`.
std::filesystem::path tuning_file(const std::filesystem::path& cache_root, const std::string& device_name);
/// Reads a table; a missing file gives an empty table, a corrupt or
/// foreign-version one an empty table and one warning (never throws).
TuningTable load_tuning(const std::filesystem::path& file);
/// Merges `table` into what is on disk under an exclusive lock and publishes
/// atomically, so concurrent writers keep a valid file. Throws on I/O errors.
void save_tuning(const std::filesystem::path& file, const TuningTable& table);

// ---- bundles: a tuning table travels as a specially named entry ----

/// Bundle entries named "xqajit-tuning/<file>.json" (arch "any") hold tuning
/// tables; kernel lookups never match them (no canonical name looks like this).
constexpr const char* kBundleTuningPrefix = "xqajit-tuning/";
bool is_tuning_entry_name(const std::string& name);
/// Every tuning table in `bundle` merged (a bad one is skipped with a warning).
TuningTable load_bundle_tuning(const BundleReader& bundle);
/// Adds `table` to `writer` as entry kBundleTuningPrefix + `file_name`.
void add_bundle_tuning(BundleWriter& writer, const TuningTable& table, const std::string& file_name,
                       const std::string& fingerprint);

/// The process-wide snapshot decode_plan / mla_decode_plan read, with the
/// toolchain fingerprint of the kernels this process builds. nullptr = none.
void set_active_tuning(std::shared_ptr<const TuningTable> table, std::string toolchain = {});
std::shared_ptr<const TuningTable> active_tuning();
/// Lookup against the active snapshot (heuristic when none). No allocation.
TunedLookup tuned_choice(const DeviceInfo& device, const KernelSpec& spec, std::int64_t batch,
                         std::int64_t max_seq_len) noexcept;

/// While alive, tuned_choice() on this thread answers "heuristic": the tuner
/// asks decode_plan for the plan the heuristic makes (a thread-local flag:
/// other threads' launches keep their tuned plans).
class HeuristicPlansScope {
 public:
  HeuristicPlansScope();
  ~HeuristicPlansScope();
  HeuristicPlansScope(const HeuristicPlansScope&) = delete;
  HeuristicPlansScope& operator=(const HeuristicPlansScope&) = delete;

 private:
  bool previous_;
};

/// The tables an engine with `options` publishes: Options::tuning's file, or
/// every `<cache>/tuning/*.json` over the tables shipped in bundles; empty for
/// "off". Never throws (a bad table is skipped with a warning).
TuningTable load_tuning_tables(const Options& options);

/// `specs` plus, for each spec whose kv_tile is automatic, the variant every
/// matching entry of `table` chose (its kv_tile and backend), so that a tuned
/// launch never compiles. Entries of another toolchain are skipped unless
/// `toolchain` is empty. `specs` come first, as given; then each variant not
/// already among them (by canonical name), once.
std::vector<KernelSpec> with_tuned_variants(const std::vector<KernelSpec>& specs, const TuningTable& table,
                                            const std::string& toolchain = {});

}  // namespace xqajit
