// The remote (Redis) tier inside one process: engines with separate disk caches
// stand for separate hosts; a real redis-server on a loopback port is the fleet's
// store. Bad values, a killed server, a slow server, a password, the lease.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "remote/redis_client.hpp"
#include "remote/remote_value.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/tiny_kernel.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/remote/remote_cache.hpp"

using namespace xqajit;
using xqajit::test::RedisServer;
using xqajit::test::TempDir;
using xqajit::test::tiny_spec;

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

struct Fleet {
  RedisServer redis;
  TempDir dir{"xqajit-remote"};
  int hosts = 0;

  explicit Fleet(std::vector<std::string> redis_args = {}) : redis(std::move(redis_args)) {
    xqajit::test::write_tiny_templates(dir / "templates");
  }

  /// Options of a new "host": its own disk cache, the shared Redis.
  Options host(const std::string& password = {}) {
    Options o;
    o.cache_dir = dir / ("host" + std::to_string(hosts++));
    o.template_dir = dir / "templates";
    o.log_level = "error";
    o.remote_cache = redis.url(password);
    o.remote_retry_ms = 50;
    return o;
  }

  /// A direct connection, to plant or inspect values.
  detail::RedisConnection raw(const std::string& password = {}) {
    return detail::RedisConnection::open(parse_remote_url(redis.url(password)), 1000, 5000);
  }
};

/// Options of a host with no Redis (the tiny templates written in `dir`): a remote tier
/// that cannot start at `url` must leave the engine working.
Options host_without_redis(const TempDir& dir, const std::string& url) {
  xqajit::test::write_tiny_templates(dir / "templates");
  Options o;
  o.cache_dir = dir / "cache";
  o.template_dir = dir / "templates";
  o.log_level = "off";
  o.remote_cache = url;
  return o;
}

}  // namespace

TEST_CASE("a compile is published; another host gets it from the remote, then from its disk", "[remote]") {
  Fleet fleet;
  const KernelSpec spec = tiny_spec(4);
  Engine first(fleet.host());
  REQUIRE(first.remote_cache());
  const CubinRef compiled = first.cubin(spec);
  CHECK(compiled.source == Source::compiled);
  CHECK(first.remote_cache()->stats().publishes == 1);
  CHECK(first.remote_cache()->stats().misses == 1);

  const Options second_host = fleet.host();
  {
    Engine second(second_host);
    const CubinRef fetched = second.cubin(spec);
    CHECK(fetched.source == Source::remote);
    CHECK(*fetched.cubin == *compiled.cubin);
    CHECK(std::filesystem::exists(fetched.path / "kernel.cubin"));  // written to the local disk
    CHECK(second.stats().remote_hits == 1);
    CHECK(second.stats().compiles == 0);
  }
  Engine again(second_host);  // the next process on that host
  CHECK(again.cubin(spec).source == Source::disk);
  CHECK(again.remote_cache()->stats().hits == 0);

  auto conn = fleet.raw();
  CHECK(conn.command({"EXISTS", first.remote_cache()->key_of(canonical_name(spec))}).integer == 1);
  const auto listed = first.remote_cache()->list();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].name == canonical_name(spec));
  CHECK(first.remote_cache()->probe().entries == 1);
  CHECK(first.remote_cache()->clear() == 1);
  CHECK(first.remote_cache()->list().empty());
}

TEST_CASE("bad values are refused, deleted, and rebuilt", "[remote]") {
  Fleet fleet;
  const KernelSpec spec = tiny_spec(2);
  const std::string name = canonical_name(spec);
  Options publisher = fleet.host();
  publisher.remote_cache_key = "fleet key";
  std::string key;
  {
    Engine engine(publisher);
    engine.cubin(spec);
    key = engine.remote_cache()->key_of(name);
  }
  auto conn = fleet.raw();
  const std::string good = conn.command({"GET", key}).str;
  REQUIRE(good.size() > 200);
  std::string flipped = good;
  flipped[good.size() - 100] ^= 0x40;
  std::string truncated = good.substr(0, good.size() / 2);
  std::string wrong_fingerprint = good;
  wrong_fingerprint[90] ^= 0x01;  // first byte of the fingerprint string
  struct Case {
    const char* what;
    std::string value;
    std::string key;
  };
  const std::vector<Case> cases = {
      {"flipped byte", flipped, ""},
      {"truncated", truncated, ""},
      {"wrong fingerprint", wrong_fingerprint, ""},
      {"unsigned while a key is set", std::string(), "fleet key"},
      {"signed with another key", std::string(), "fleet key"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.what) {
      std::string value = c.value;
      Options reader = fleet.host();
      reader.remote_cache_key = c.key;
      if (value.empty()) {
        // The real cubin under the right fingerprint, unsigned or signed with the wrong key.
        const std::vector<char> real = *Engine(fleet.host()).cubin(spec).cubin;  // a remote hit
        Engine probe(reader);
        const std::string sign_with = std::string(c.what).find("another") != std::string::npos ? "other" : "";
        value = detail::encode_remote_value({probe.fingerprint(), name, "sm_90a"}, real, sign_with);
      }
      REQUIRE(conn.command({"SET", key, value}).is_ok());
      Engine engine(reader);
      const CubinRef ref = engine.cubin(spec);
      CHECK(ref.source == Source::compiled);
      CHECK(engine.remote_cache()->stats().refused == 1);
      // The bad value is gone, replaced by this host's good publish.
      const std::string now = conn.command({"GET", key}).str;
      CHECK(now != value);
      CHECK(detail::decode_remote_value(now, {engine.fingerprint(), name, "sm_90a"}, c.key).cubin);
    }
  }
}

TEST_CASE("a killed Redis never fails the engine; publishes resume after a restart", "[remote]") {
  Fleet fleet;
  Options o = fleet.host();
  Engine engine(o);
  std::vector<KernelSpec> specs = {tiny_spec(1), tiny_spec(2), tiny_spec(3), tiny_spec(5)};
  int done = 0;
  const auto results = engine.prewarm(specs, 1, [&](const PrewarmResult&) {
    if (++done == 1) fleet.redis.kill();  // mid-prewarm
  });
  for (const auto& r : results) CHECK(r.ok);
  CHECK(engine.stats().compiles == 4);
  CHECK(engine.remote_cache()->stats().publishes == 1);
  CHECK(engine.remote_cache()->stats().unavailable >= 1);

  fleet.redis.restart();  // empty: no persistence
  std::this_thread::sleep_for(
      std::chrono::milliseconds(200));  // past the backoff (50 ms, doubled a few times)
  CHECK(engine.cubin(tiny_spec(6)).source == Source::compiled);
  CHECK(engine.remote_cache()->stats().publishes == 2);
  auto conn = fleet.raw();
  CHECK(conn.command({"EXISTS", engine.remote_cache()->key_of(canonical_name(tiny_spec(6)))}).integer == 1);
}

TEST_CASE("a dead Redis costs nothing per miss once the process backs off", "[remote]") {
  Fleet fleet;
  Options o = fleet.host();
  o.remote_retry_ms = 60000;
  fleet.redis.kill();
  Engine engine(o);
  CHECK(engine.cubin(tiny_spec(1)).source == Source::compiled);
  CHECK(engine.cubin(tiny_spec(2)).source == Source::compiled);
  const RemoteStats s = engine.remote_cache()->stats();
  CHECK(s.unavailable >= 1);
  CHECK(s.hits == 0);
  CHECK(s.publishes == 0);
}

TEST_CASE("a slow Redis does not slow a memory or disk hit, and a miss pays one timeout", "[remote]") {
  Fleet fleet;
  Options o = fleet.host();
  o.remote_timeout_ms = 200;
  o.remote_retry_ms = 60000;
  const KernelSpec spec = tiny_spec(8);
  Engine warm(o);
  warm.cubin(spec);  // compiled, on disk and in memory
  Engine fresh(o);   // another process on this host, started before the slowdown
  std::thread sleeper([&] {
    auto conn = fleet.raw();
    conn.command({"DEBUG", "SLEEP", "3"});  // the server answers nothing for 3 s
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t = std::chrono::steady_clock::now();
  CHECK(warm.cubin(spec).source == Source::memory);
  CHECK(fresh.cubin(spec).source == Source::disk);
  CHECK(ms_since(t) < 150);  // neither asks the remote: no 200 ms timeout, no 3 s sleep
  // A miss waits one command timeout, then compiles; the process then backs off,
  // so further misses and reads do not wait at all (20 x 200 ms without it).
  CHECK(fresh.cubin(tiny_spec(9)).source == Source::compiled);
  CHECK(fresh.remote_cache()->stats().unavailable >= 1);
  t = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) CHECK_FALSE(fresh.remote_cache()->get(canonical_name(spec), "sm_90a"));
  CHECK(ms_since(t) < 150);
  sleeper.join();
}

TEST_CASE("authentication with a password", "[remote]") {
  Fleet fleet({"--requirepass", "s3cret"});
  const KernelSpec spec = tiny_spec(4);
  {  // wrong password: a warning, local tiers only, no exception
    Engine engine(fleet.host("wrong"));
    CHECK(engine.cubin(spec).source == Source::compiled);
    CHECK(engine.remote_cache()->stats().publishes == 0);
    CHECK_THROWS_AS(engine.remote_cache()->list(), RemoteError);
  }
  {  // no password at all: NOAUTH on every command
    Engine engine(fleet.host());
    CHECK(engine.cubin(spec).source == Source::compiled);
    CHECK(engine.remote_cache()->stats().publishes == 0);
  }
  Engine writer(fleet.host("s3cret"));
  CHECK(writer.cubin(spec).source == Source::compiled);
  CHECK(writer.remote_cache()->stats().publishes == 1);
  Engine reader(fleet.host("s3cret"));
  CHECK(reader.cubin(spec).source == Source::remote);
}

TEST_CASE("a lease held by a dead process expires; a waiter compiles past the wait bound",
          "[remote][lease]") {
  Fleet fleet;
  const KernelSpec spec = tiny_spec(2);
  auto conn = fleet.raw();
  Options o = fleet.host();
  Engine engine(o);
  const std::string lease = engine.remote_cache()->key_of(canonical_name(spec)) + ":lease";
  // A holder that died 300 ms before its lease runs out.
  REQUIRE(conn.command({"SET", lease, "dead-host:1:0", "PX", "300"}).is_ok());
  auto t = std::chrono::steady_clock::now();
  CHECK(engine.cubin(spec).source == Source::compiled);
  CHECK(ms_since(t) >= 250);
  CHECK(engine.remote_cache()->stats().lease_waits == 1);
  CHECK(conn.command({"EXISTS", lease}).integer == 0);  // released after the publish

  // A live holder that never publishes: wait XQAJIT_REMOTE_WAIT_MS, then compile here.
  Options impatient = fleet.host();
  impatient.remote_wait_ms = 300;
  Engine other(impatient);
  const std::string lease3 = other.remote_cache()->key_of(canonical_name(tiny_spec(3))) + ":lease";
  REQUIRE(conn.command({"SET", lease3, "stuck-host:1:0", "PX", "60000"}).is_ok());
  t = std::chrono::steady_clock::now();
  CHECK(other.cubin(tiny_spec(3)).source == Source::compiled);
  CHECK(ms_since(t) >= 300);
  CHECK(ms_since(t) < 10000);
  CHECK(conn.command({"GET", lease3}).str == "stuck-host:1:0");  // never freed someone else's lease
}

TEST_CASE("the lease is renewed while a compile outlasts it", "[remote][lease]") {
  Fleet fleet;
  Options o = fleet.host();
  o.remote_lease_ms = 60;  // far shorter than a compile: only renewal keeps it
  Engine engine(o);
  const std::string lease = engine.remote_cache()->key_of(canonical_name(tiny_spec(7))) + ":lease";
  std::atomic<bool> seen{false}, stop{false};
  std::thread watcher([&] {
    auto conn = fleet.raw();
    while (!stop)
      if (conn.command({"EXISTS", lease}).integer == 1) seen = true;
  });
  engine.cubin(tiny_spec(7));
  stop = true;
  watcher.join();
  CHECK(seen);
  auto conn = fleet.raw();
  CHECK(conn.command({"EXISTS", lease}).integer == 0);
}

TEST_CASE("a bad remote URL turns the tier off, not the engine", "[remote]") {
  TempDir dir;
  Engine engine(host_without_redis(dir, "rediss://somewhere:6379"));
  CHECK(engine.remote_cache() == nullptr);
  CHECK(engine.cubin(tiny_spec(1)).source == Source::compiled);
}

TEST_CASE("a missing hiredis says so and turns the tier off, not the engine", "[remote]") {
  TempDir dir;
  Options o = host_without_redis(dir, "redis://127.0.0.1:6379");
  o.libhiredis_path = (dir / "no-such-libhiredis.so").string();
  CHECK_THROWS_WITH(RemoteCache(o, "v1-x"), Catch::Contains("hiredis") && Catch::Contains("libhiredis-dev"));
  Engine engine(o);
  CHECK(engine.remote_cache() == nullptr);
  CHECK(engine.cubin(tiny_spec(1)).source == Source::compiled);
}
