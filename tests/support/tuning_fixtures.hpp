#pragma once
// Specs, a device, table entries and a deterministic timer shared by the
// tuning and tuner tests.

#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "xqajit/tuning/tuner.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit::test {

/// A bf16 spec of `kind` on sm_90a, 64-token pages.
inline KernelSpec bf16_spec(Kind kind, int head_dim, int group) {
  KernelSpec s;
  s.kind = kind;
  s.input = s.kv = s.output = DType::bf16;
  s.head_dim = head_dim;
  s.page_size = 64;
  s.group = group;
  s.arch = Arch::parse("sm_90a");
  return s;
}

inline KernelSpec gqa_spec() { return bf16_spec(Kind::gqa, 128, 8); }
inline KernelSpec mla_spec() { return bf16_spec(Kind::mla, 576, 16); }

inline TuningDevice h100() { return {"NVIDIA H100 80GB HBM3", 9, 0, 132, "fp-v1"}; }

inline TuningEntry entry(int batch, std::int64_t seq, TunedChoice winner, KernelSpec spec = gqa_spec()) {
  TuningEntry e;
  e.key = {h100(), spec, batch, seq};
  e.winner = winner;
  e.candidates = {{winner, 10.0, false}, {TunedChoice{64, 0, Backend::automatic}, 12.5, true}};
  return e;
}

inline DeviceInfo h100_info() {
  DeviceInfo d;
  d.name = "NVIDIA H100 80GB HBM3";
  d.cc_major = 9;
  d.sm_count = 132;
  d.max_smem_per_block_optin = 232448;
  d.l2_bytes = 50 << 20;
  return d;
}

// Deterministic timer: a table of µs per choice; unknown choices throw (cannot run).
struct FakeTimer : Timer {
  std::map<std::string, double> us;
  double fallback = 100;
  int calls = 0;
  FakeTimer() = default;
  FakeTimer(std::initializer_list<std::pair<TunedChoice, double>> table) {
    for (const auto& [choice, t] : table) us[to_string(choice)] = t;
  }
  double median_us(const TuningKey&, const TunedChoice& c) override {
    ++calls;
    auto it = us.find(to_string(c));
    if (it != us.end()) {
      if (it->second < 0) throw std::runtime_error("does not run");
      return it->second;
    }
    return fallback;
  }
  // The interleaved re-timing: `retimed` overrides a choice's µs there.
  std::map<std::string, double> retimed;
  int interleaved_calls = 0;
  std::pair<double, double> interleaved_us(const TuningKey& key, const TunedChoice& a,
                                           const TunedChoice& b) override {
    ++interleaved_calls;
    const auto pick = [&](const TunedChoice& c) {
      auto it = retimed.find(to_string(c));
      return it != retimed.end() ? it->second : median_us(key, c);
    };
    return {pick(a), pick(b)};
  }
};

}  // namespace xqajit::test
