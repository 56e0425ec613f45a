// The remote cache tier: reads, publishes and the CLI's listing. Nothing here
// throws into the engine: every remote failure is a miss or a skipped publish.
// The compile lease is in remote_lease.cpp.

#include "xqajit/remote/remote_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "util/log.hpp"
#include "remote/remote_counters.hpp"
#include "remote/remote_pool.hpp"
#include "remote/remote_value.hpp"
#include "xqajit/error.hpp"

namespace xqajit {
namespace {

constexpr char kLeaseSuffix[] = ":lease";

// Deletes a refused value only if it is still the same bytes: a good value
// published since our read must survive.
constexpr char kDeleteIfSame[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

int parse_port(const std::string& text, const std::string& url) {
  char* end = nullptr;
  const long port = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || port <= 0 || port > 65535)
    throw Error(fmt::format("remote cache URL {}: port '{}' is not a number from 1 to 65535", url, text));
  return static_cast<int>(port);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string RemoteUrl::display() const {
  std::string auth;
  if (!user.empty() || !password.empty())
    auth = (user.empty() ? "" : user) + (password.empty() ? "@" : ":***@");
  const bool v6 = host.find(':') != std::string::npos;
  return fmt::format("redis://{}{}{}{}:{}/{}", auth, v6 ? "[" : "", host, v6 ? "]" : "", port, db);
}

RemoteUrl parse_remote_url(const std::string& url) {
  const std::string form = "redis://[user:password@]host[:port][/db]";
  if (url.rfind("rediss://", 0) == 0)
    throw Error(
        fmt::format("remote cache URL {}: rediss:// (TLS) is not supported: xqajit loads plain "
                    "hiredis, which has no TLS. Use redis:// on a trusted network or a TLS tunnel "
                    "(stunnel, spiped), and set XQAJIT_REMOTE_CACHE_KEY so values are signed",
                    url));
  if (url.rfind("redis://", 0) != 0)
    throw Error(fmt::format("remote cache URL '{}' does not start with redis://; expected {}", url, form));
  RemoteUrl out;
  std::string rest = url.substr(8);
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest.resize(slash);
    if (!db.empty()) {
      char* end = nullptr;
      const long n = std::strtol(db.c_str(), &end, 10);
      if (*end != '\0' || n < 0 || n > 1 << 20)
        throw Error(fmt::format("remote cache URL {}: database '{}' is not a number", url, db));
      out.db = static_cast<int>(n);
    }
  }
  if (const auto at = rest.rfind('@'); at != std::string::npos) {
    const std::string auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = auth.find(':');
    out.user = auth.substr(0, colon);
    if (colon != std::string::npos) out.password = auth.substr(colon + 1);
    if (colon == std::string::npos) std::swap(out.user, out.password);  // redis://password@host
  }
  if (!rest.empty() && rest.front() == '[') {  // [ipv6]:port
    const auto close = rest.find(']');
    if (close == std::string::npos) throw Error(fmt::format("remote cache URL {}: unclosed '['", url));
    out.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':')
        throw Error(fmt::format("remote cache URL {}: expected ':' after ']'", url));
      out.port = parse_port(rest.substr(close + 2), url);
    }
  } else if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    out.host = rest.substr(0, colon);
    out.port = parse_port(rest.substr(colon + 1), url);
  } else {
    out.host = rest;
  }
  if (out.host.empty())
    throw Error(fmt::format("remote cache URL '{}' names no host; expected {}", url, form));
  if (out.user == "default") out.user.clear();
  return out;
}

RemoteCache::RemoteCache(const Options& options, std::string fingerprint)
    : fingerprint_(std::move(fingerprint)),
      key_(options.remote_cache_key),
      wait_ms_(options.remote_wait_ms),
      lease_ms_(std::max(options.remote_lease_ms, 30)),
      counters_(std::make_unique<Counters>()) {
  RemoteUrl url = parse_remote_url(options.remote_cache);
  // A missing library is reported now, not at the first miss.
  const detail::HiredisApi& api = detail::hiredis_api(options.libhiredis_path);
  pool_ = std::make_shared<detail::RemotePool>(api, std::move(url), options.remote_connect_timeout_ms,
                                               options.remote_timeout_ms, options.remote_retry_ms);
}

RemoteCache::~RemoteCache() = default;

const RemoteUrl& RemoteCache::url() const { return pool_->url(); }

std::string RemoteCache::key_of(const std::string& name) const {
  return "xqajit:" + fingerprint_ + ":" + name;
}

std::optional<std::vector<char>> RemoteCache::get(const std::string& name, const std::string& arch) {
  return fetch(name, arch, /*count_miss=*/true);
}

std::optional<std::vector<char>> RemoteCache::fetch(const std::string& name, const std::string& arch,
                                                    bool count_miss) {
  const std::string key = key_of(name);
  auto reply = pool_->run([&](detail::RedisConnection& c) { return c.command({"GET", key}); });
  if (!reply) {
    ++counters_->unavailable;
    return std::nullopt;
  }
  if (reply->is_nil()) {
    if (count_miss) ++counters_->misses;
    return std::nullopt;
  }
  if (reply->is_error() || reply->type != detail::RedisReplyType::string) {
    pool_->warn_once("get-error", fmt::format("remote cache {}: GET {} answered '{}'; treating it as a miss",
                                              url().display(), key, reply->str));
    ++counters_->misses;
    return std::nullopt;
  }
  detail::DecodedRemoteValue decoded =
      detail::decode_remote_value(reply->str, {fingerprint_, name, arch}, key_);
  if (!decoded.cubin) {
    ++counters_->refused;
    pool_->warn_once("refused:" + key, fmt::format("remote cache {}: refused the value of {}: {}. It was "
                                                   "deleted; the kernel is built or fetched again",
                                                   url().display(), key, decoded.problem));
    pool_->run([&](detail::RedisConnection& c) {
      return c.command({"EVAL", kDeleteIfSame, "1", key, reply->str});
    });
    return std::nullopt;
  }
  ++counters_->hits;
  return std::move(decoded.cubin);
}

bool RemoteCache::put(const std::string& name, const std::string& arch, const std::vector<char>& cubin) {
  const std::string key = key_of(name);
  const std::string value = detail::encode_remote_value({fingerprint_, name, arch}, cubin, key_);
  auto reply = pool_->run([&](detail::RedisConnection& c) { return c.command({"SET", key, value}); });
  if (!reply) {
    ++counters_->unavailable;
    return false;
  }
  if (!reply->is_ok()) {
    // OOM (maxmemory reached), READONLY (a replica), NOAUTH/NOPERM (ACLs)...
    pool_->warn_once("put-error",
                     fmt::format("remote cache {} refused to store {}: {}. Carrying on: the kernel "
                                 "stays in the local tiers",
                                 url().display(), key, reply->str));
    return false;
  }
  ++counters_->publishes;
  return true;
}

namespace {

// Every value key of `prefix` (lease keys left out), by SCAN: never blocks the
// server the way KEYS would on a large store.
std::vector<std::string> scan_values(detail::RedisConnection& c, const std::string& prefix) {
  std::vector<std::string> keys;
  std::string cursor = "0";
  const std::string pattern = prefix + "*";
  do {
    const detail::RedisReply r = c.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (r.is_error() || r.elements.size() != 2) throw RemoteError("SCAN failed: " + r.str);
    cursor = r.elements[0].str;
    for (const auto& k : r.elements[1].elements)
      if (!ends_with(k.str, kLeaseSuffix)) keys.push_back(k.str);
  } while (cursor != "0");
  return keys;
}

}  // namespace

RemoteProbe RemoteCache::probe() {
  return pool_->run_or_throw([&](detail::RedisConnection& c) {
    RemoteProbe p;
    const auto start = std::chrono::steady_clock::now();
    const detail::RedisReply pong = c.command({"PING"});
    p.latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (pong.is_error())
      throw RemoteError(fmt::format("{} answered PING with {}", url().display(), pong.str));
    const detail::RedisReply info = c.command({"INFO", "server"});
    if (const auto at = info.str.find("redis_version:"); at != std::string::npos)
      p.server_version = info.str.substr(at + 14, info.str.find_first_of("\r\n", at) - at - 14);
    p.entries = scan_values(c, key_of("")).size();
    return p;
  });
}

std::vector<RemoteEntry> RemoteCache::list() {
  return pool_->run_or_throw([&](detail::RedisConnection& c) {
    const std::string prefix = key_of("");
    std::vector<RemoteEntry> out;
    for (const std::string& key : scan_values(c, prefix)) {
      const detail::RedisReply len = c.command({"STRLEN", key});
      out.push_back({key.substr(prefix.size()), static_cast<std::uint64_t>(std::max(0LL, len.integer))});
    }
    std::sort(out.begin(), out.end(),
              [](const RemoteEntry& a, const RemoteEntry& b) { return a.name < b.name; });
    return out;
  });
}

std::size_t RemoteCache::clear() {
  return pool_->run_or_throw([&](detail::RedisConnection& c) {
    std::size_t removed = 0;
    for (const std::string& key : scan_values(c, key_of(""))) {
      const detail::RedisReply r = c.command({"DEL", key});
      if (r.is_error()) throw RemoteError(fmt::format("{} refused DEL {}: {}", url().display(), key, r.str));
      removed += static_cast<std::size_t>(r.integer);
    }
    return removed;
  });
}

RemoteStats RemoteCache::stats() const { return counters_->snapshot(); }

}  // namespace xqajit
