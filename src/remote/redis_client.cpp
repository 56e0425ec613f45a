#include "remote/redis_client.hpp"

#include <fmt/format.h>

#include <memory>
#include <utility>

#include "xqajit/error.hpp"

namespace xqajit::detail {
namespace {

timeval millis(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

RedisReply convert(const HiredisApi& api, const void* reply) {
  RedisReply out;
  out.type = static_cast<RedisReplyType>(api.reply_type(reply));
  switch (out.type) {
    case RedisReplyType::string:
    case RedisReplyType::status:
    case RedisReplyType::error:
      out.str = api.reply_string(reply);
      break;
    case RedisReplyType::integer:
      out.integer = api.reply_integer(reply);
      break;
    case RedisReplyType::array:
      for (std::size_t i = 0; i < api.reply_elements(reply); ++i)
        out.elements.push_back(convert(api, api.reply_element(reply, i)));
      break;
    case RedisReplyType::nil:
      break;
    default:
      out.type = RedisReplyType::error, out.str = "unexpected reply type (RESP3?)";
  }
  return out;
}

struct ReplyFree {
  const HiredisApi* api;
  void operator()(void* reply) const { api->freeReplyObject(reply); }
};

}  // namespace

RedisConnection RedisConnection::open(const HiredisApi& api, const RemoteUrl& url, int connect_timeout_ms,
                                      int timeout_ms) {
  void* context = api.redisConnectWithTimeout(url.host.c_str(), url.port, millis(connect_timeout_ms));
  if (!context) throw RemoteError(fmt::format("cannot connect to {}: out of memory", url.display()));
  RedisConnection conn(&api, context, url.display());  // owns the context from here on
  if (api.context_err(context))
    throw RemoteError(fmt::format("cannot connect to {} within {} ms: {}", conn.where_, connect_timeout_ms,
                                  api.context_errstr(context)));
  api.redisSetTimeout(context, millis(timeout_ms));
  if (!url.password.empty()) {
    const RedisReply auth = url.user.empty() ? conn.command({"AUTH", url.password})
                                             : conn.command({"AUTH", url.user, url.password});
    if (!auth.is_ok()) throw RemoteError(fmt::format("{} refused the password: {}", conn.where_, auth.str));
  }
  if (url.db != 0) {
    const std::string db = std::to_string(url.db);
    const RedisReply select = conn.command({"SELECT", db});
    if (!select.is_ok())
      throw RemoteError(fmt::format("{} refused SELECT {}: {}", conn.where_, db, select.str));
  }
  return conn;
}

RedisConnection::RedisConnection(RedisConnection&& other) noexcept
    : api_(other.api_), context_(std::exchange(other.context_, nullptr)), where_(std::move(other.where_)) {}

RedisConnection& RedisConnection::operator=(RedisConnection&& other) noexcept {
  if (this != &other) {
    if (context_) api_->redisFree(context_);
    api_ = other.api_;
    context_ = std::exchange(other.context_, nullptr);
    where_ = std::move(other.where_);
  }
  return *this;
}

RedisConnection::~RedisConnection() {
  if (context_) api_->redisFree(context_);
}

RedisReply RedisConnection::command(const std::vector<std::string_view>& args) {
  if (!context_ || api_->context_err(context_))
    throw RemoteError(fmt::format("the connection to {} is broken", where_));
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (std::string_view a : args) argv.push_back(a.data()), lengths.push_back(a.size());
  void* reply = api_->redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lengths.data());
  if (!reply) {
    // hiredis sets err and errstr (a timeout reads "Resource temporarily unavailable").
    throw RemoteError(fmt::format("{} failed on {}: {}", args.size() ? std::string(args[0]) : "command",
                                  where_, api_->context_errstr(context_)));
  }
  const std::unique_ptr<void, ReplyFree> owned(reply, ReplyFree{api_});
  return convert(*api_, owned.get());
}

}  // namespace xqajit::detail
