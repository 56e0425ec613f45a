#pragma once
/// Connections to the remote cache, shared by the threads of one process, and
/// the policy that keeps an unreachable remote out of the way: after a failure
/// no connection is attempted until a backoff (remote_retry_ms, doubling up to
/// 30 s) has passed, and the process warns once.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "remote/redis_client.hpp"
#include "xqajit/error.hpp"

namespace xqajit::detail {

class RemotePool {
 public:
  RemotePool(const HiredisApi& api, RemoteUrl url, int connect_timeout_ms, int timeout_ms, int retry_ms);
  const RemoteUrl& url() const { return url_; }

  /// Runs fn(RedisConnection&) on a pooled connection. nullopt when the remote is
  /// unreachable, waiting out its backoff, or failed during fn (warned once).
  template <typename Fn>
  auto run(Fn&& fn) -> std::optional<std::invoke_result_t<Fn, RedisConnection&>> {
    std::unique_ptr<RedisConnection> conn = acquire(/*for_cli=*/false);
    if (!conn) return std::nullopt;
    try {
      auto result = fn(*conn);
      release(std::move(conn));
      return result;
    } catch (const RemoteError& e) {
      failed(e.what());
      return std::nullopt;
    }
  }

  /// Like run, but ignores the backoff and throws RemoteError: for the CLI.
  template <typename Fn>
  auto run_or_throw(Fn&& fn) {
    std::unique_ptr<RedisConnection> conn = acquire(/*for_cli=*/true);
    auto result = fn(*conn);
    release(std::move(conn));
    return result;
  }

  /// Logs `message` as a warning the first time `topic` comes up in this process.
  void warn_once(const std::string& topic, const std::string& message);

 private:
  std::unique_ptr<RedisConnection> acquire(bool for_cli);
  void release(std::unique_ptr<RedisConnection> conn);
  void failed(const std::string& why);

  const HiredisApi& api_;
  const RemoteUrl url_;
  const int connect_timeout_ms_, timeout_ms_, retry_ms_;
  std::mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
  bool down_ = false;
  int backoff_ms_ = 0;
  std::chrono::steady_clock::time_point retry_at_{};
  std::set<std::string> warned_;
};

}  // namespace xqajit::detail
