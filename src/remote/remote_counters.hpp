#pragma once
/// RemoteCache's counters, shared by remote_cache.cpp and remote_lease.cpp.

#include <atomic>
#include <cstdint>

#include "xqajit/remote/remote_cache.hpp"

namespace xqajit {

struct RemoteCache::Counters {
  std::atomic<std::uint64_t> hits{0}, misses{0}, refused{0}, publishes{0}, lease_waits{0}, unavailable{0};
  RemoteStats snapshot() const {
    RemoteStats s;
    s.hits = hits, s.misses = misses, s.refused = refused, s.publishes = publishes;
    s.lease_waits = lease_waits, s.unavailable = unavailable;
    return s;
  }
};

}  // namespace xqajit
