#pragma once
/// One blocking Redis connection over hiredis (move-only RAII) and its replies,
/// copied out of hiredis's reply objects so nothing of hiredis outlives a call.

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "remote/hiredis_api.hpp"
#include "xqajit/remote/remote_cache.hpp"

namespace xqajit::detail {

struct RedisReply {
  RedisReplyType type = RedisReplyType::nil;
  std::string str;  // string, status or error text
  long long integer = 0;
  std::vector<RedisReply> elements;

  bool is_error() const { return type == RedisReplyType::error; }
  bool is_nil() const { return type == RedisReplyType::nil; }
  bool is_ok() const { return type == RedisReplyType::status && str == "OK"; }
};

class RedisConnection {
 public:
  /// Connects within connect_timeout_ms, sets the per-command timeout, then AUTH
  /// and SELECT as the URL says. Throws RemoteError (unreachable, refused
  /// password) or LibraryError (no hiredis).
  static RedisConnection open(const HiredisApi& api, const RemoteUrl& url, int connect_timeout_ms,
                              int timeout_ms);
  static RedisConnection open(const RemoteUrl& url, int connect_timeout_ms, int timeout_ms) {
    return open(hiredis_api(), url, connect_timeout_ms, timeout_ms);
  }

  RedisConnection(RedisConnection&& other) noexcept;
  RedisConnection& operator=(RedisConnection&& other) noexcept;
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;
  ~RedisConnection();

  /// Runs one command (binary-safe arguments). An error reply is returned, not
  /// thrown; a connection failure (I/O error, timeout) throws RemoteError and
  /// leaves this connection unusable.
  RedisReply command(const std::vector<std::string_view>& args);
  RedisReply command(std::initializer_list<std::string_view> args) {
    return command(std::vector<std::string_view>(args));
  }

 private:
  RedisConnection(const HiredisApi* api, void* context, std::string where)
      : api_(api), context_(context), where_(std::move(where)) {}
  const HiredisApi* api_ = nullptr;
  void* context_ = nullptr;  // redisContext*
  std::string where_;        // the URL for messages (password masked)
};

}  // namespace xqajit::detail
