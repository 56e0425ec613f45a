#include "remote/remote_pool.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "util/log.hpp"

namespace xqajit::detail {
namespace {
constexpr int kMaxBackoffMs = 30000;
constexpr std::size_t kMaxIdle = 8;  // more threads than this rarely miss at once
}  // namespace

RemotePool::RemotePool(const HiredisApi& api, RemoteUrl url, int connect_timeout_ms, int timeout_ms,
                       int retry_ms)
    : api_(api),
      url_(std::move(url)),
      connect_timeout_ms_(connect_timeout_ms),
      timeout_ms_(timeout_ms),
      retry_ms_(std::max(retry_ms, 1)) {}

void RemotePool::warn_once(const std::string& topic, const std::string& message) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!warned_.insert(topic).second) {
      logger()->debug("{}", message);
      return;
    }
  }
  logger()->warn("{}", message);
}

std::unique_ptr<RedisConnection> RemotePool::acquire(bool for_cli) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
    // While backing off, fail at once: a request must not pay a connect timeout
    // for every miss during an outage.
    if (!for_cli && down_ && std::chrono::steady_clock::now() < retry_at_) return nullptr;
  }
  try {
    auto conn = std::make_unique<RedisConnection>(
        RedisConnection::open(api_, url_, connect_timeout_ms_, timeout_ms_));
    bool recovered = false;
    {
      std::lock_guard<std::mutex> g(mu_);
      recovered = std::exchange(down_, false);
      backoff_ms_ = 0;
    }
    if (recovered) logger()->info("remote cache {} is reachable again", url_.display());
    return conn;
  } catch (const RemoteError& e) {
    if (for_cli) throw;
    failed(e.what());
    return nullptr;
  }
}

void RemotePool::release(std::unique_ptr<RedisConnection> conn) {
  std::lock_guard<std::mutex> g(mu_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(conn));
}

void RemotePool::failed(const std::string& why) {
  int backoff = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    idle_.clear();  // after a restart or a timeout, the others are as likely broken
    backoff_ms_ = down_ ? std::min(backoff_ms_ * 2, kMaxBackoffMs) : retry_ms_;
    down_ = true;
    retry_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(backoff_ms_);
    backoff = backoff_ms_;
  }
  warn_once("unavailable", fmt::format("remote cache unavailable: {}. Carrying on with the local tiers "
                                       "(one warning per process); retrying in {} ms, then with backoff",
                                       why, backoff));
}

}  // namespace xqajit::detail
