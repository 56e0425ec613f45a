// Fleet-wide compile-once. Before compiling a spec, a process takes a short
// lease on it in Redis (SET NX PX); the others wait for the published value. The
// lease expires by itself if its holder dies, so a waiter then takes it; it is
// renewed while the compile runs, and released after the publish — only if it
// is still ours (compare-and-delete), so a late holder never frees another's.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "util/log.hpp"
#include "remote/remote_counters.hpp"
#include "remote/remote_pool.hpp"
#include "xqajit/remote/remote_cache.hpp"

namespace xqajit {
namespace {

constexpr char kRenewIfOurs[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return "
    "0";
constexpr char kReleaseIfOurs[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
constexpr int kMaxPollMs = 100;

// Who holds a lease, for `redis-cli GET` and the logs: host, pid, and a random
// part so that two leases of one process never compare equal.
std::string lease_token() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  return fmt::format("{}:{}:{:08x}{:08x}", host, ::getpid(), rd(), rd());
}

}  // namespace

struct RemoteLease::State {
  std::shared_ptr<detail::RemotePool> pool;
  std::string key, token;
  int lease_ms = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread renewer;

  void renew_until_stopped() {
    std::unique_lock<std::mutex> lock(mu);
    const auto period = std::chrono::milliseconds(std::max(lease_ms / 3, 10));
    while (!cv.wait_for(lock, period, [this] { return stop; })) {
      lock.unlock();
      const std::string ms = std::to_string(lease_ms);
      auto r = pool->run([&](detail::RedisConnection& c) {
        return c.command({"EVAL", kRenewIfOurs, "1", key, token, ms});
      });
      if (r && r->integer == 0) detail::logger()->debug("lost the remote lease {} (expired)", key);
      lock.lock();
    }
  }

  ~State() {
    {
      std::lock_guard<std::mutex> g(mu);
      stop = true;
    }
    cv.notify_all();
    if (renewer.joinable()) renewer.join();
    pool->run([&](detail::RedisConnection& c) {
      return c.command({"EVAL", kReleaseIfOurs, "1", key, token});
    });
  }
};

RemoteLease::RemoteLease() = default;
RemoteLease::RemoteLease(RemoteLease&&) noexcept = default;
RemoteLease& RemoteLease::operator=(RemoteLease&&) noexcept = default;
RemoteLease::~RemoteLease() = default;

RemoteLease RemoteCache::try_lease(const std::string& name, bool* busy) {
  *busy = false;
  RemoteLease lease;
  const std::string key = key_of(name) + ":lease";
  const std::string token = lease_token();
  const std::string ttl = std::to_string(lease_ms_);
  auto reply = pool_->run([&](detail::RedisConnection& c) {
    return c.command({"SET", key, token, "NX", "PX", ttl});
  });
  if (!reply) return lease;
  if (reply->is_nil()) {
    *busy = true;
    return lease;
  }
  if (!reply->is_ok()) {
    pool_->warn_once("lease-error", fmt::format("remote cache {} refused the compile lease {}: {}; compiling "
                                                "without fleet-wide exclusion",
                                                url().display(), key, reply->str));
    return lease;
  }
  lease.state_ = std::make_unique<RemoteLease::State>();
  RemoteLease::State& s = *lease.state_;
  s.pool = pool_;
  s.key = key;
  s.token = token;
  s.lease_ms = lease_ms_;
  s.renewer = std::thread([&s] { s.renew_until_stopped(); });
  return lease;
}

FetchOrLease RemoteCache::fetch_or_lease(const std::string& name, const std::string& arch) {
  FetchOrLease out;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(wait_ms_);
  int poll_ms = 5;
  for (bool waited = false;; waited = true) {
    if ((out.cubin = fetch(name, arch, /*count_miss=*/false))) return out;  // get() counted the miss
    bool busy = false;
    out.lease = try_lease(name, &busy);
    if (out.lease.held()) {
      // The previous holder may have published and released between our read and
      // our SET NX; it publishes before it releases, so one more read settles it.
      if ((out.cubin = fetch(name, arch, /*count_miss=*/false))) out.lease = RemoteLease();
      return out;
    }
    if (!busy) return out;
    if (!waited) {
      ++counters_->lease_waits;
      detail::logger()->debug("{} is being compiled by another process; waiting for it", name);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      pool_->warn_once("wait:" + name, fmt::format("waited {} ms (XQAJIT_REMOTE_WAIT_MS) for another process "
                                                   "to publish {}; compiling it here",
                                                   wait_ms_, name));
      return out;
    }
    std::this_thread::sleep_for(
        std::min(std::chrono::milliseconds(poll_ms),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                     std::chrono::milliseconds(1)));
    poll_ms = std::min(poll_ms * 2, kMaxPollMs);
  }
}

}  // namespace xqajit
