// The tuner's selection logic: candidate enumeration from a per-family table,
// winner selection and the interleaved re-timing over an injected Timer. GPU
// timing lives in src/tuning/tuner_gpu.cpp; tests inject a deterministic fake.

#include <algorithm>
#include <cmath>
#include <exception>

#include "util/log.hpp"
#include "gqa/hopper_geometry.h"
#include "xqajit/decode_args.h"
#include "xqajit/tuning/tuner.hpp"

namespace xqajit {
namespace {

// Fixed split counts tried beside the automatic one: enough to cover "fewer"
// and "more" than the heuristic at small batch without exploding the grid.
const CandidateSpace kSpaces[] = {
    {Kind::gqa, {16, 32, 64, 128}, true, {1, 2, 4, 8, 16}, {0, 8, 16, 32}},
    {Kind::mla, {0}, true, {1, 2, 4, 8, 16}, {0}},
};

}  // namespace

const CandidateSpace& candidate_space(Kind kind) {
  for (const auto& s : kSpaces)
    if (s.kind == kind) return s;
  return kSpaces[0];
}

bool candidate_fits(const KernelSpec& spec, const TunedChoice& choice) {
  const auto backends = backends_for(spec.kind, spec.arch);
  if (std::find(backends.begin(), backends.end(), choice.backend) == backends.end()) return false;
  KernelSpec candidate;
  try {
    candidate = candidate_spec(spec, choice);
    validate(candidate);  // e.g. a backend without a feature the spec asks for
  } catch (const std::exception&) {
    return false;
  }
  if (spec.kind != Kind::gqa) return true;
  // Rows per CTA at or past the kernel's own N name no variant: the same kernel as 0.
  if (choice.cta_rows != 0 && candidate.cta_rows == 0) return false;
  const int arch = spec.arch.number(), kv_bytes = dtype_bytes(spec.kv);
  if (choice.backend == Backend::hopper) {
    if (choice.kv_tile < 64) return false;  // the swapped wgmma product needs 64 keys on M
    return xqajit_gqa_hopper_geometry(spec.head_dim, spec.group, spec.q_len, choice.kv_tile, kv_bytes, arch,
                                      choice.cta_rows)
               .stages != 0;
  }
  return xqajit_decode_geometry(spec.head_dim, spec.group, spec.q_len, choice.kv_tile, kv_bytes, arch)
             .stages != 0;
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
      for (int rows : space.cta_rows)
        for (int n : splits) {
          const TunedChoice c{tile, n, b, rows};
          if (!filter || filter(spec, c)) out.push_back(c);
        }
  return out;
}

TunedChoice heuristic_choice(const KernelSpec& spec) {
  const KernelSpec n = normalized(key_spec(spec));
  TunedChoice c;
  c.backend = n.backend;
  c.kv_tile = spec.kind == Kind::mla ? 0 : n.kv_tile;  // MLA: each backend's own default
  return c;
}

KernelSpec candidate_spec(const KernelSpec& spec, const TunedChoice& choice) {
  KernelSpec s = spec;
  s.kv_tile = choice.kv_tile;
  s.backend = choice.backend;
  s.cta_rows = choice.cta_rows;
  return normalized(s);
}

int cache_rotation(std::size_t cache_bytes, std::size_t l2_bytes, std::size_t free_bytes) {
  if (cache_bytes == 0) return 1;
  const std::size_t span = 8 * std::max<std::size_t>(l2_bytes, 1 << 20);
  int copies = static_cast<int>(std::min<std::size_t>((span + cache_bytes - 1) / cache_bytes, 8));
  while (copies > 1 && static_cast<std::size_t>(copies - 1) * cache_bytes > free_bytes / 2) --copies;
  return copies;
}

int graph_launches(double launch_us) {
  if (!(launch_us > 0)) return 20;
  return static_cast<int>(std::clamp(std::lround(400.0 / launch_us), 4L, 20L));
}

std::optional<TuningEntry> tune_key(const TuningKey& key, Timer& timer, const CandidateFilter& filter) {
  return tune_key(key, timer, filter, heuristic_choice(key.spec));
}

std::optional<TuningEntry> tune_key(const TuningKey& key, Timer& timer, const CandidateFilter& filter,
                                    const TunedChoice& heuristic) {
  std::vector<TunedChoice> candidates = tuning_candidates(key.spec, filter);
  if (candidates.size() < 2) return std::nullopt;
  if (std::find(candidates.begin(), candidates.end(), heuristic) == candidates.end())
    candidates.insert(candidates.begin(), heuristic);  // the baseline is always timed

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
  const CandidateTime* base = nullptr;
  for (const auto& c : entry.candidates)
    if (c.heuristic) base = &c;
  if (!base) return entry;  // the heuristic cannot run here: nothing to compare with
  if (base->median_us <= best->median_us * (1 + kTuningNoise)) {
    entry.winner = heuristic;
    return entry;
  }
  // The acceptance pass: a separate, interleaved re-timing of winner vs
  // heuristic, so the reported gain is not the minimum of many noisy medians.
  try {
    const auto [winner_us, heuristic_us] = timer.interleaved_us(key, entry.winner, heuristic);
    entry.confirm_winner_us = winner_us;
    entry.confirm_heuristic_us = heuristic_us;
    if (winner_us > heuristic_us * (1 + kTuningNoise)) {
      detail::logger()->info("tune: {} lost the re-timing to the heuristic ({:.2f} vs {:.2f} us): reverted",
                             to_string(entry.winner), winner_us, heuristic_us);
      entry.winner = heuristic;
      entry.reverted = true;
    }
  } catch (const std::exception& e) {
    detail::logger()->warn("tune: re-timing failed ({}); keeping the heuristic", e.what());
    entry.winner = heuristic;
    entry.reverted = true;
  }
  return entry;
}

}  // namespace xqajit
