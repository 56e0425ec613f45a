#pragma once
// A real redis-server on a free loopback port for the remote-cache tests,
// started and stopped by this object (RAII). No persistence (--save '',
// --appendonly no), bound to 127.0.0.1 only. Throws, so the test FAILS, when
// redis-server is missing: scripts/setup.sh installs it, and a remote tier
// that was never exercised must not pass as tested.

#include <sys/types.h>

#include <string>
#include <vector>

#include "support/temp_dir.hpp"

namespace xqajit::test {

class RedisServer {
 public:
  /// Starts redis-server with `extra_args` (e.g. {"--requirepass", "pw"}) and
  /// waits until it answers.
  explicit RedisServer(std::vector<std::string> extra_args = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  /// redis://[:password@]127.0.0.1:<port>
  std::string url(const std::string& password = {}) const;

  /// SIGKILL: the way a crashed or OOM-killed server goes.
  void kill();
  /// Starts it again on the same port (empty: nothing survives a kill).
  void restart();
  bool running() const { return pid_ > 0; }

 private:
  void start();
  void wait_until_ready();

  TempDir dir_{"xqajit-redis"};
  std::vector<std::string> extra_args_;
  int port_ = 0;
  pid_t pid_ = -1;
};

/// The redis-server executable, or "" when it is not installed.
std::string find_redis_server();

}  // namespace xqajit::test
