#include "xqajit/tuning/tuning.hpp"

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

#include "util/fs.hpp"
#include "util/log.hpp"
#include "xqajit/cache/bundle.hpp"
#include "xqajit/ops/split_plan.hpp"
#include "xqajit/detail/sha256.hpp"

namespace xqajit {
namespace {

using nlohmann::json;

int floor_log2(std::int64_t v) {
  int l = 0;
  while (v > 1) v >>= 1, ++l;
  return l;
}

// FNV-1a over raw bytes; the field-by-field hash below never builds a string.
struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, std::size_t n) {
    auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  void i(std::int64_t v) { bytes(&v, sizeof v); }
  void s(const std::string& v) { i(static_cast<std::int64_t>(v.size())), bytes(v.data(), v.size()); }
};

bool same_spec_minus_knobs(const KernelSpec& a, const KernelSpec& b) { return key_spec(a) == key_spec(b); }

struct Active {
  std::shared_ptr<const TuningTable> table;
  std::string toolchain;
};
std::atomic<bool> g_have_active{false};
thread_local bool t_heuristic_only = false;  // HeuristicPlansScope
std::shared_ptr<const Active> g_active;      // accessed with std::atomic_load/store only

}  // namespace

KernelSpec key_spec(KernelSpec spec) {
  spec.kv_tile = 0;
  spec.cta_rows = 0;
  spec.backend = Backend::automatic;
  return spec;
}

int batch_bucket(std::int64_t batch) {
  if (batch <= 1) return 1;
  if (batch >= kMaxTunedBatch) return kMaxTunedBatch;
  return 1 << floor_log2(batch);
}

std::int64_t seq_bucket(std::int64_t max_seq_len) {
  if (max_seq_len <= 1) return 1;
  return std::int64_t{1} << floor_log2(max_seq_len);
}

bool same_group(const TuningKey& a, const TuningKey& b) {
  return a.device.name == b.device.name && a.device.cc_major == b.device.cc_major &&
         a.device.cc_minor == b.device.cc_minor && a.device.sm_count == b.device.sm_count &&
         a.device.toolchain == b.device.toolchain && same_spec_minus_knobs(a.spec, b.spec);
}

bool operator==(const TuningKey& a, const TuningKey& b) {
  return same_group(a, b) && a.batch == b.batch && a.seq_len == b.seq_len;
}

std::string to_string(const TunedChoice& c) {
  return "kv_tile=" + std::to_string(c.kv_tile) +
         " splits=" + (c.num_splits == 0 ? std::string("auto") : std::to_string(c.num_splits)) +
         " backend=" + to_string(c.backend) + (c.cta_rows ? " cta_rows=" + std::to_string(c.cta_rows) : "");
}

std::string to_string(ChoiceSource s) {
  switch (s) {
    case ChoiceSource::tuned:
      return "tuned";
    case ChoiceSource::nearest:
      return "nearest";
    case ChoiceSource::heuristic:
      break;
  }
  return "heuristic";
}

std::uint64_t tuning_group_hash(const std::string& device_name, int cc_major, int cc_minor, int sm_count,
                                const std::string& toolchain, const KernelSpec& spec) noexcept {
  Fnv f;
  f.s(device_name), f.i(cc_major), f.i(cc_minor), f.i(sm_count), f.s(toolchain);
  f.i(static_cast<int>(spec.kind)), f.i(static_cast<int>(spec.input)), f.i(static_cast<int>(spec.kv));
  f.i(static_cast<int>(spec.output)), f.i(spec.head_dim), f.i(spec.page_size), f.i(spec.group);
  f.i(spec.q_len), f.i(spec.sliding_window), f.i(spec.arch.major), f.i(spec.arch.minor), f.i(spec.arch.accel);
  if (spec.sparse) f.i(1);  // dense keys hash as before
  return f.h;
}

void TuningTable::insert(TuningEntry entry) {
  entry.key.batch = batch_bucket(entry.key.batch);
  entry.key.seq_len = seq_bucket(entry.key.seq_len);
  entry.key.spec = key_spec(entry.key.spec);
  for (auto& e : entries_)
    if (e.key == entry.key) {
      e = std::move(entry);
      return;
    }
  entries_.push_back(std::move(entry));
}

void TuningTable::put(TuningEntry entry) {
  insert(std::move(entry));
  reindex();
}

void TuningTable::merge(const TuningTable& other) {
  for (const auto& e : other.entries_) insert(e);
  reindex();
}

// Precomputes, per group, the answer for every bucket, so lookup() does one
// hash find and one array read.
void TuningTable::reindex() {
  groups_.clear();
  struct Pending {
    std::uint64_t hash;
    std::size_t slot;                  // index in groups_[hash]
    std::vector<std::size_t> members;  // in put order
  };
  std::vector<Pending> pending;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto& k = entries_[i].key;
    const std::uint64_t h = tuning_group_hash(k.device.name, k.device.cc_major, k.device.cc_minor,
                                              k.device.sm_count, k.device.toolchain, k.spec);
    auto& bucket = groups_[h];
    std::size_t g = 0;
    while (g < bucket.size() && !same_group(entries_[bucket[g].representative].key, k)) ++g;
    if (g == bucket.size()) bucket.push_back(Group{i, {}}), pending.push_back({h, g, {}});
    for (auto& p : pending)
      if (p.hash == h && p.slot == g) {
        p.members.push_back(i);
        break;
      }
  }
  for (const Pending& p : pending) {
    Group& group = groups_[p.hash][p.slot];
    group.answer.assign(kBatchSlots * kSeqSlots, -1);
    for (int lb = 0; lb < kBatchSlots; ++lb)
      for (int ls = 0; ls < kSeqSlots; ++ls) {
        int best_dist = 1 << 30;
        for (std::size_t i : p.members) {
          const auto& k = entries_[i].key;
          const int batch_steps = std::abs(floor_log2(k.batch) - lb);
          if (batch_steps > kNearestBatchSteps) continue;
          const int d = batch_steps + std::abs(std::min(floor_log2(k.seq_len), kSeqSlots - 1) - ls);
          if (d < best_dist)
            best_dist = d,
            group.answer[static_cast<std::size_t>(lb * kSeqSlots + ls)] = static_cast<std::int32_t>(i);
        }
      }
  }
}
TunedLookup TuningTable::lookup(const std::string& device_name, int cc_major, int cc_minor, int sm_count,
                                const std::string& toolchain, const KernelSpec& spec, std::int64_t batch,
                                std::int64_t max_seq_len) const noexcept {
  TunedLookup out;
  const auto it = groups_.find(tuning_group_hash(device_name, cc_major, cc_minor, sm_count, toolchain, spec));
  if (it == groups_.end()) return out;
  for (const Group& group : it->second) {
    const auto& k = entries_[group.representative].key;
    // Hash collisions: the group must really match (compares in place, no allocation).
    if (k.device.name != device_name || k.device.toolchain != toolchain || k.device.sm_count != sm_count ||
        k.device.cc_major != cc_major || k.device.cc_minor != cc_minor ||
        !same_spec_minus_knobs(k.spec, spec))
      continue;
    const int lb = floor_log2(batch_bucket(batch));
    const int ls = std::min(floor_log2(seq_bucket(max_seq_len)), kSeqSlots - 1);
    const std::int32_t i = group.answer[static_cast<std::size_t>(lb * kSeqSlots + ls)];
    if (i < 0) return out;
    const TuningEntry& e = entries_[static_cast<std::size_t>(i)];
    const bool exact = e.key.batch == batch_bucket(batch) && e.key.seq_len == seq_bucket(max_seq_len);
    out.source = exact ? ChoiceSource::tuned : ChoiceSource::nearest;
    out.choice = e.winner;
    if (!exact && out.choice.num_splits > 0) {  // as many CTAs as the tuned grid had
      const double scaled = std::round(static_cast<double>(out.choice.num_splits) * e.key.batch /
                                       static_cast<double>(std::max<std::int64_t>(batch, 1)));
      out.choice.num_splits = static_cast<int>(std::clamp(scaled, 1.0, static_cast<double>(kMaxSplits)));
    }
    return out;
  }
  return out;
}

TunedLookup TuningTable::lookup(const TuningKey& k) const noexcept {
  return lookup(k.device.name, k.device.cc_major, k.device.cc_minor, k.device.sm_count, k.device.toolchain,
                k.spec, k.batch, k.seq_len);
}

void set_active_tuning(std::shared_ptr<const TuningTable> table, std::string toolchain) {
  std::shared_ptr<const Active> next;
  if (table) next = std::make_shared<const Active>(Active{std::move(table), std::move(toolchain)});
  g_have_active.store(next != nullptr, std::memory_order_release);
  std::atomic_store(&g_active, std::move(next));
}

std::shared_ptr<const TuningTable> active_tuning() {
  auto a = std::atomic_load(&g_active);
  return a ? a->table : nullptr;
}

TunedLookup tuned_choice(const DeviceInfo& device, const KernelSpec& spec, std::int64_t batch,
                         std::int64_t max_seq_len) noexcept {
  if (t_heuristic_only || !g_have_active.load(std::memory_order_acquire)) return {};
  const auto active = std::atomic_load(&g_active);  // a refcount bump, no allocation
  if (!active) return {};
  return active->table->lookup(device.name, device.cc_major, device.cc_minor, device.sm_count,
                               active->toolchain, spec, batch, max_seq_len);
}

HeuristicPlansScope::HeuristicPlansScope() : previous_(t_heuristic_only) { t_heuristic_only = true; }
HeuristicPlansScope::~HeuristicPlansScope() { t_heuristic_only = previous_; }

}  // namespace xqajit
