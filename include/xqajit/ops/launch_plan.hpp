#pragma once
/// What every op's launch plan holds (DecodePlan, MlaDecodePlan, ... derive from it):
/// the kernel it runs, how the sequence splits, the grid and the workspace. The plan
/// depends only on host-known maxima, so every replay of a captured graph launches
/// the same way.

#include <cstddef>

#include "xqajit/spec/spec.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit {

struct LaunchPlan {
  KernelSpec spec;               ///< normalized: backend and kv_tile resolved
  int num_splits = 1;
  int split_tokens = 0;          ///< keys per split, a multiple of the spec's kv_tile
  unsigned grid[3] = {1, 1, 1};  ///< splits x head or row blocks x batch
  unsigned threads = 0;
  unsigned smem_bytes = 0;
  std::size_t workspace_bytes = 0;  ///< split_plan.hpp's layout; 0 when one split suffices
  ChoiceSource source = ChoiceSource::heuristic;  ///< where kv_tile / splits came from (tuning.hpp)
};

}  // namespace xqajit
