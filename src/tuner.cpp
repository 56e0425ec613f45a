// The tuner's selection logic: candidate enumeration from a per-family table
// and winner selection over an injected Timer. GPU timing lives in the CLI
// (tools/xqajit/cmd_tune.cpp); tests inject a deterministic fake.

#include <algorithm>
#include <exception>

#include "detail/log.hpp"
#include "xqajit/decode_args.h"
#include "xqajit/tuning.hpp"

namespace xqajit {
namespace {

// Fixed split counts tried beside the automatic one: enough to cover "fewer"
// and "more" than the heuristic at small batch without exploding the grid.
const CandidateSpace kSpaces[] = {
    {Kind::gqa, {16, 32, 64, 128}, false, {1, 2, 4, 8, 16}},
    {Kind::mla, {0}, true, {1, 2, 4, 8, 16}},
};

}  // namespace

const CandidateSpace& candidate_space(Kind kind) {
  for (const auto& s : kSpaces)
    if (s.kind == kind) return s;
  return kSpaces[0];
}

bool candidate_fits(const KernelSpec& spec, const TunedChoice& choice) {
  if (spec.kind == Kind::gqa) {
    if (choice.backend != Backend::automatic && choice.backend != Backend::portable) return false;
    const auto g = xqajit_decode_geometry(spec.head_dim, spec.group, spec.q_len, choice.kv_tile,
                                          dtype_bytes(spec.kv), spec.arch.number());
    return g.stages != 0;
  }
  const auto backends = backends_for(spec.kind, spec.arch);
  return std::find(backends.begin(), backends.end(), choice.backend) != backends.end();
}

std::vector<TunedChoice> tuning_candidates(const KernelSpec& spec, const CandidateFilter& filter) {
  const CandidateSpace& space = candidate_space(spec.kind);
  std::vector<Backend> backends{Backend::automatic};
  if (space.backend_axis) backends = backends_for(spec.kind, spec.arch);
  std::vector<int> splits{0};
  splits.insert(splits.end(), space.fixed_splits.begin(), space.fixed_splits.end());
  std::vector<TunedChoice> out;
  for (Backend b : backends)
    for (int tile : space.kv_tiles)
      for (int n : splits) {
        const TunedChoice c{tile, n, b};
        if (!filter || filter(spec, c)) out.push_back(c);
      }
  return out;
}

TunedChoice heuristic_choice(const KernelSpec& spec) {
  KernelSpec s = spec;
  s.kv_tile = 0;
  s.backend = Backend::automatic;
  const KernelSpec n = normalized(s);
  TunedChoice c;
  c.num_splits = 0;
  if (spec.kind == Kind::mla) {
    c.backend = n.backend;
    c.kv_tile = 0;  // each backend's own default
  } else {
    c.kv_tile = n.kv_tile;
  }
  return c;
}

std::optional<TuningEntry> tune_key(const TuningKey& key, Timer& timer, const CandidateFilter& filter) {
  const std::vector<TunedChoice> candidates = tuning_candidates(key.spec, filter);
  if (candidates.size() < 2) return std::nullopt;
  const TunedChoice heuristic = heuristic_choice(key.spec);

  TuningEntry entry;
  entry.key = key;
  for (const TunedChoice& c : candidates) {
    try {
      const double us = timer.median_us(key, c);
      if (!(us > 0)) continue;
      entry.candidates.push_back({c, us, c == heuristic});
    } catch (const std::exception& e) {
      detail::logger()->info("tune: candidate {} skipped: {}", to_string(c), e.what());
    }
  }
  if (entry.candidates.size() < 2) return std::nullopt;

  const auto best = std::min_element(entry.candidates.begin(), entry.candidates.end(),
                                     [](const auto& a, const auto& b) { return a.median_us < b.median_us; });
  entry.winner = best->choice;
  for (const auto& c : entry.candidates)
    if (c.heuristic && c.median_us <= best->median_us * (1 + kTuningNoise)) entry.winner = c.choice;
  return entry;
}

}  // namespace xqajit
