#include "remote/hiredis_api.hpp"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "xqajit/error.hpp"

namespace xqajit::detail {
namespace {

// redisReply, as hiredis 0.13/0.14 and 1.x lay it out.
struct ReplyV0 {
  int type;
  long long integer;
  std::size_t len;
  char* str;
  std::size_t elements;
  void** element;
};
struct ReplyV1 {
  int type;
  long long integer;
  double dval;
  std::size_t len;
  char* str;
  char vtype[4];
  std::size_t elements;
  void** element;
};
// The head of redisContext: 1.x starts with a pointer to its function table.
struct ContextHeadV0 {
  int err;
  char errstr[128];
};
struct ContextHeadV1 {
  const void* funcs;
  int err;
  char errstr[128];
};

template <typename Fn>
void bind(const DynLib& lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(lib.symbol(name));
  if (!fn) throw LibraryError(fmt::format("{} lacks the symbol {}; it is not hiredis", lib.path(), name));
}

std::unique_ptr<HiredisApi> load(const std::string& explicit_path) {
  auto api = std::make_unique<HiredisApi>();
  api->lib = DynLib::open_first(
      "hiredis (the Redis C client, needed only by the remote cache tier)",
      explicit_path.empty()
          ? std::vector<std::string>{"libhiredis.so.1.1.0", "libhiredis.so.1.0.0", "libhiredis.so.0.14",
                                     "libhiredis.so.0.13", "libhiredis.so"}
          : std::vector<std::string>{explicit_path},
      "The remote cache (XQAJIT_REMOTE_CACHE) is off; every other tier works. Install the client "
      "library (Debian: apt-get install libhiredis-dev, or its runtime package libhiredis0.14 / "
      "libhiredis1.1.0) to use it.");
  const DynLib& l = api->lib;
  bind(l, api->redisConnectWithTimeout, "redisConnectWithTimeout");
  bind(l, api->redisSetTimeout, "redisSetTimeout");
  bind(l, api->redisCommandArgv, "redisCommandArgv");
  bind(l, api->freeReplyObject, "freeReplyObject");
  bind(l, api->redisFree, "redisFree");
  api->v1_layout = l.symbol("redisConnectWithOptions") != nullptr;
  return api;
}

template <typename V0, typename V1, typename Fn>
auto with_layout(bool v1, const void* p, Fn fn) {
  return v1 ? fn(*static_cast<const V1*>(p)) : fn(*static_cast<const V0*>(p));
}

}  // namespace

int HiredisApi::reply_type(const void* r) const {
  return with_layout<ReplyV0, ReplyV1>(v1_layout, r, [](const auto& x) { return x.type; });
}
long long HiredisApi::reply_integer(const void* r) const {
  return with_layout<ReplyV0, ReplyV1>(v1_layout, r, [](const auto& x) { return x.integer; });
}
std::string HiredisApi::reply_string(const void* r) const {
  return with_layout<ReplyV0, ReplyV1>(
      v1_layout, r, [](const auto& x) { return x.str ? std::string(x.str, x.len) : std::string(); });
}
std::size_t HiredisApi::reply_elements(const void* r) const {
  return with_layout<ReplyV0, ReplyV1>(v1_layout, r, [](const auto& x) { return x.elements; });
}
const void* HiredisApi::reply_element(const void* r, std::size_t i) const {
  return with_layout<ReplyV0, ReplyV1>(v1_layout, r,
                                       [i](const auto& x) -> const void* { return x.element[i]; });
}
int HiredisApi::context_err(const void* c) const {
  return with_layout<ContextHeadV0, ContextHeadV1>(v1_layout, c, [](const auto& x) { return x.err; });
}
std::string HiredisApi::context_errstr(const void* c) const {
  return with_layout<ContextHeadV0, ContextHeadV1>(
      v1_layout, c, [](const auto& x) { return std::string(x.errstr, strnlen(x.errstr, sizeof x.errstr)); });
}

const HiredisApi& hiredis_api(const std::string& explicit_path) {
  // Loaded once per path; a failure is remembered too (a library does not appear
  // while the process runs), so every caller gets the same message cheaply.
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<HiredisApi>> loaded;
  static std::map<std::string, std::string> failures;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = failures.find(explicit_path); it != failures.end()) throw LibraryError(it->second);
  auto& slot = loaded[explicit_path];
  if (!slot) {
    try {
      slot = load(explicit_path);
    } catch (const LibraryError& e) {
      failures[explicit_path] = e.what();
      throw;
    }
  }
  return *slot;
}

}  // namespace xqajit::detail
