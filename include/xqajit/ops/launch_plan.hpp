#pragma once
/// The launch contract every op shares: the knobs its params carry (LaunchKnobs:
/// DecodeParams, MlaDecodeParams, ... derive from it) and what its plan holds
/// (LaunchPlan: DecodePlan, MlaDecodePlan, ...): the kernel it runs, how the sequence
/// splits, the grid and the workspace. The plan depends only on host-known maxima, so
/// every replay of a captured graph launches the same way.

#include <cstddef>
#include <cstdint>

#include "xqajit/spec/spec.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit {

/// Which kernel, how it splits the sequence, its workspace and how it is launched: left
/// at their defaults, the op's plan (or the tuning table) chooses.
struct LaunchKnobs {
  /// Which kernel: auto (the op's plan: decode's measured per-shape rule, hopper or
  /// portable on sm_90a; MLA's hopper on sm_90a; portable elsewhere), portable (every
  /// arch) or hopper (sm_90a only).
  Backend backend = Backend::automatic;
  int kv_tile = 0;     ///< KV tokens per pipeline step; 0 = the spec's default for the backend
  int num_splits = 0;  ///< CTAs along the sequence; 0 = chosen from the device and shapes
  void* workspace = nullptr;  ///< zeroed ONCE at allocation; never re-zeroed between launches
  std::size_t workspace_bytes = 0;
  /// Programmatic dependent launch on sm_90+: this launch's CTAs may become
  /// resident while the previous kernel in the stream drains; the kernel waits
  /// (griddepcontrol.wait) before its first global read, so it sees every
  /// upstream write. false: a plain stream-ordered launch. true: where the plan
  /// measured it no slower (DecodePlan::programmatic_dependent_launch; MLA: on sm_90+).
  bool programmatic_dependent_launch = true;
};

struct LaunchPlan {
  KernelSpec spec;               ///< normalized: backend and kv_tile resolved
  int num_splits = 1;
  int split_tokens = 0;          ///< keys per split, a multiple of the spec's kv_tile
  unsigned grid[3] = {1, 1, 1};  ///< splits x head or row blocks x batch
  unsigned threads = 0;
  unsigned smem_bytes = 0;
  std::size_t workspace_bytes = 0;  ///< split_plan.hpp's layout; 0 when one split suffices
  /// The workspace's counters, one a group of CTAs whose partial rows merge (a request's head
  /// or row block), before its partials (split_plan.hpp); 0: no workspace.
  std::int64_t merge_groups = 0;
  ChoiceSource source = ChoiceSource::heuristic;  ///< where kv_tile / splits came from (tuning.hpp)
};

}  // namespace xqajit
