#pragma once
// The checks every op's GPU test makes (test_decode, test_mla_decode, ...): its cases'
// specs prewarmed first (nothing compiles between launches), each output compared with
// the float64 reference (no NaN, zeros for an empty request, relative error under the
// tolerance) into a table of worst errors, new lengths drawn for relaunches and graph
// replays, and the split counters back at zero after them.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gpu/gpu_session.hpp"
#include "gpu/lse_checks.hpp"
#include "support/gpu_buffers.hpp"
#include "support/reference.hpp"
#include "xqajit/error.hpp"

namespace xqajit::testing {

/// Builds each case's problem in order (so their random draws come in that order) and
/// hands it, with one stream for all, to `check(problem, stream)`.
template <class Problem, class Case, class Check>
void for_each_problem(const std::vector<Case>& cases, Check&& check) {
  CudaStream stream;
  for (const Case& c : cases) {
    Problem pr(c, rng(), device());
    check(pr, stream.get());
  }
}

/// Compiles (or loads) every spec before the first launch; fails the test on any error.
inline void prewarm_or_fail(const std::vector<KernelSpec>& specs, const char* what) {
  const auto results = engine().prewarm(specs, 0);
  double seconds = 0;
  int failed = 0;
  for (const auto& r : results) {
    seconds += r.seconds;
    if (!r.ok) {
      ++failed;
      std::fprintf(stderr, "prewarm %s failed: %s\n", r.name.c_str(), r.error.substr(0, 3000).c_str());
    }
  }
  std::fprintf(stderr, "prewarmed %zu %s specs (%d failed), %.1f s of compile/load time summed\n", results.size(),
               what, failed, seconds);
  REQUIRE(failed == 0);
}

/// Cases run, cases failed, and the worst relative error per key (backend, dtypes).
struct ErrorTable {
  int cases = 0, failures = 0;
  std::map<std::string, double> worst;

  void print(const char* key_title, const char* what) const {
    std::fprintf(stderr, "\n%-26s %s\n", key_title, "worst rel err");
    for (const auto& [k, v] : worst) std::fprintf(stderr, "%-26s %.2e\n", k.c_str(), v);
    std::fprintf(stderr, "%s cases: %d, failed: %d\n", what, cases, failures);
  }
};

/// Compares a device output with the reference, request by request for empty ones
/// (`lens`: the output holds lens.size() equal blocks); records it under `key`.
/// `description` names the case in Catch's message and in the FAILED line.
inline double check_against_reference(const std::vector<double>& got, const std::vector<double>& want,
                                      const std::vector<std::int32_t>& lens, double tolerance,
                                      const std::string& description, const std::string& key, ErrorTable& table) {
  const double err = relative_error(got, want);
  int nan = 0, nonzero_empty = 0;
  const std::size_t per_request = got.size() / lens.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) ++nan;
    if (lens[i / per_request] == 0 && got[i] != 0.0) ++nonzero_empty;
  }
  INFO(description << " rel_err=" << err << " tol=" << tolerance);
  CHECK(nan == 0);
  CHECK(nonzero_empty == 0);
  CHECK(err < tolerance);
  ++table.cases;
  if (nan || nonzero_empty || !(err < tolerance)) {
    ++table.failures;
    std::fprintf(stderr, "FAILED %s: rel_err %.3e nan %d nonzero_empty %d\n", description.c_str(), err, nan,
                 nonzero_empty);
  }
  table.worst[key] = std::max(table.worst[key], err);
  return err;
}

/// New lengths for a relaunch or a graph replay: an empty request stays empty, the
/// others draw from [min_len, longest[b]] (the pages already hold that many keys).
inline void draw_lengths(std::vector<std::int32_t>& lens, const std::vector<int>& longest, int min_len) {
  for (std::size_t b = 0; b < lens.size(); ++b)
    lens[b] = longest[b] == 0 ? 0 : min_len + static_cast<int>(rng()() % (longest[b] + 1 - min_len));
}

/// Relaunches a split problem `rounds` times on one stream, with new lengths each time
/// (`run_and_check(pr, stream)` launches and compares), then reads the first `counters`
/// words of its workspace: the split counters, every one back at zero by itself.
template <class Problem, class RunAndCheck>
void check_counters_reset(Problem& pr, const std::vector<int>& longest, int rounds, std::size_t counters,
                          RunAndCheck&& run_and_check) {
  REQUIRE(pr.dev.workspace != nullptr);
  CudaStream stream;
  for (int round = 0; round < rounds; ++round) {
    draw_lengths(pr.lens, longest, 1);
    pr.d_lens.upload(pr.lens);
    run_and_check(pr, stream.get());
  }
  std::vector<unsigned> values(counters);
  pr.d_ws.download(values.data(), values.size() * sizeof(unsigned));
  for (unsigned v : values) CHECK(v == 0u);
}

/// A split launch refuses a missing workspace (ArgumentError) and one 4 bytes short (the
/// message names workspace_bytes) before launching anything: `launch(params, stream)`.
template <class Params, class Launch>
void check_workspace_refusals(const Params& dev, Launch&& launch) {
  CudaStream stream;
  Params p = dev;
  p.workspace = nullptr;
  CHECK_THROWS_AS(launch(p, stream.get()), ArgumentError);
  p = dev;
  p.workspace_bytes -= 4;
  CHECK_THROWS_WITH(launch(p, stream.get()), Catch::Contains("workspace_bytes"));
}

}  // namespace xqajit::testing
