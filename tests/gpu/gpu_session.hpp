#pragma once
// What every GPU test binary shares: one engine, one random generator (the
// seed is printed, and XQAJIT_TEST_SEED fixes it to replay a failure; pick()
// draws from it), and device 0's properties.

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>

#include "xqajit/runtime/driver.hpp"
#include "xqajit/runtime/engine.hpp"

namespace xqajit::testing {

inline Engine& engine() {
  static Engine e;
  return e;
}

inline std::mt19937& rng() {
  static std::mt19937 r = [] {
    const char* fixed = std::getenv("XQAJIT_TEST_SEED");
    const unsigned seed = fixed ? static_cast<unsigned>(std::stoul(fixed)) : std::random_device{}();
    std::fprintf(stderr, "seed %u (XQAJIT_TEST_SEED=%u replays it)\n", seed, seed);
    return std::mt19937(seed);
  }();
  return r;
}

inline const DeviceInfo& device() {
  static DeviceInfo info = Driver::instance().device(0);
  return info;
}

/// Whether device 0 converts fp8 (e4m3): sm_89 and later.
inline bool device_has_fp8() { return device().cc_major * 10 + device().cc_minor >= 89; }

/// One of `choices`, drawn from rng() (repeat a value to weight it).
inline int pick(std::initializer_list<int> choices) { return *(choices.begin() + rng()() % choices.size()); }

}  // namespace xqajit::testing
