#pragma once
/// libhiredis, loaded with dlopen on first use, so that a host without it still
/// runs everything except the remote cache tier.
///
/// We declare the few pieces of hiredis's ABI we use instead of including
/// <hiredis/hiredis.h>, so the library builds without the -dev package. Two
/// layouts exist: hiredis 1.0 added fields to redisReply (dval, vtype) and put
/// a function table at the head of redisContext. We tell them apart by a symbol
/// only 1.x exports (redisConnectWithOptions) and read fields accordingly.

#include <sys/time.h>

#include <cstddef>
#include <string>

#include "util/dynlib.hpp"

namespace xqajit::detail {

/// Reply types shared by every hiredis version (REDIS_REPLY_*).
enum class RedisReplyType { string = 1, array = 2, integer = 3, nil = 4, status = 5, error = 6 };

struct HiredisApi {
  DynLib lib;
  void* (*redisConnectWithTimeout)(const char* ip, int port, const struct timeval tv) = nullptr;
  int (*redisSetTimeout)(void* context, const struct timeval tv) = nullptr;
  void* (*redisCommandArgv)(void* context, int argc, const char** argv, const size_t* argvlen) = nullptr;
  void (*freeReplyObject)(void* reply) = nullptr;
  void (*redisFree)(void* context) = nullptr;
  bool v1_layout = false;  // hiredis >= 1.0

  // Field access for the layout in use. `reply` is a redisReply*, `context` a redisContext*.
  int reply_type(const void* reply) const;
  long long reply_integer(const void* reply) const;
  std::string reply_string(const void* reply) const;  // string, status and error replies
  std::size_t reply_elements(const void* reply) const;
  const void* reply_element(const void* reply, std::size_t i) const;
  int context_err(const void* context) const;
  std::string context_errstr(const void* context) const;
};

/// The loaded hiredis (once per process and path; thread-safe): `explicit_path`
/// alone when given, else the sonames. Throws LibraryError naming what was tried
/// and what to install.
const HiredisApi& hiredis_api(const std::string& explicit_path = {});

}  // namespace xqajit::detail
