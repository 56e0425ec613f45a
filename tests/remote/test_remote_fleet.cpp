// The remote tier across processes, through the CLI: each process has its own
// disk cache (a host of the fleet), one redis-server is the shared store.
// Includes the 32-process compile-once measurement, and (hidden, [.bench]) the
// latency figures of the README: remote hit vs disk hit vs compile.
#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>

#include "support/process.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/tiny_kernel.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/remote/remote_cache.hpp"

using namespace xqajit;
using xqajit::test::RedisServer;
using xqajit::test::run_cli_line;
using xqajit::test::TempDir;

namespace {

struct CliFleet {
  RedisServer redis;
  TempDir dir{"xqajit-fleet"};
  CliFleet() { xqajit::test::write_tiny_templates(dir / "templates"); }
  std::string env() const { return "XQAJIT_TEMPLATE_DIR=" + (dir / "templates").string(); }
  std::string host(int i) const {
    return fmt::format("--cache-dir {} --remote-cache {}", (dir / ("host" + std::to_string(i))).string(),
                       redis.url());
  }
};

nlohmann::json json_of(const test::ProcessResult& r) {
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("two processes, two disk caches, one Redis: miss, publish, remote hit, disk hit", "[remote][cli]") {
  CliFleet fleet;
  const std::string spec = "arch=sm_90a group=4";
  CHECK(json_of(run_cli_line(fleet.env(), fleet.host(0) + " compile --json " + spec))["status"] ==
        "compiled");
  CHECK(json_of(run_cli_line(fleet.env(), fleet.host(1) + " compile --json " + spec))["status"] == "remote");
  CHECK(json_of(run_cli_line(fleet.env(), fleet.host(1) + " compile --json " + spec))["status"] == "disk");

  // prewarm --remote-cache fills it (worker processes pass the flag on).
  const auto prewarm =
      run_cli_line(fleet.env(), fleet.host(2) + " prewarm --jobs 2 --json arch=sm_90a backend=portable group=1,2,4");
  const auto pw = json_of(prewarm);
  CHECK(pw["compiled"] == 2);
  CHECK(pw["cached"] == 1);  // group=4, from the remote
  const auto listed = json_of(run_cli_line(fleet.env(), fleet.host(3) + " remote list --json"));
  CHECK(listed["entries"].size() == 3);
  CHECK(json_of(run_cli_line(fleet.env(), fleet.host(3) + " --json remote clear"))["removed"] == 3);
  CHECK(json_of(run_cli_line(fleet.env(), fleet.host(3) + " remote list --json"))["entries"].empty());
}

TEST_CASE("32 processes with separate disk caches and one Redis compile a missing spec once",
          "[remote][cli]") {
  CliFleet fleet;
  constexpr int kProcesses = 32;
  std::vector<std::vector<std::string>> commands;
  for (int i = 0; i < kProcesses; ++i)
    commands.push_back({XQAJIT_CLI_PATH, "--cache-dir", (fleet.dir / ("host" + std::to_string(i))).string(),
                        "--remote-cache", fleet.redis.url(), "--json", "compile", "arch=sm_90a", "group=8"});
  const auto start = std::chrono::steady_clock::now();
  const auto results = test::run_processes_concurrently(
      commands, {{"XQAJIT_TEMPLATE_DIR", (fleet.dir / "templates").string()}, {"XQAJIT_LOG_LEVEL", "debug"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int compiled = 0, remote = 0, waited = 0;
  for (const auto& r : results) {
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    const std::string status = nlohmann::json::parse(r.out)["status"];
    compiled += status == "compiled";
    remote += status == "remote";
    waited += r.err.find("is being compiled by another process") != std::string::npos;
  }
  fmt::print(stderr,
             "[figure] {} processes, one missing spec: {} compile(s), {} remote hits ({} of them waited on "
             "the lease), {:.2f} s wall\n",
             kProcesses, compiled, remote, waited, seconds);
  CHECK(compiled == 1);
  CHECK(remote == kProcesses - 1);
}

TEST_CASE("doctor reports the remote, reachable or not, and exits 0", "[remote][cli]") {
  CliFleet fleet;
  const auto up = json_of(run_cli_line(fleet.env(), fleet.host(0) + " doctor --json"));
  CHECK(up["remote"]["reachable"] == true);
  CHECK(up["remote"]["entries"] == 0);
  CHECK(up["remote"]["latency_ms"].get<double>() < 1000);
  fleet.redis.kill();
  const auto down = json_of(run_cli_line(fleet.env(), fleet.host(0) + " doctor --json"));
  CHECK(down["remote"]["reachable"] == false);
  // compile carries on without it; remote list says why it cannot.
  CHECK(json_of(run_cli_line(fleet.env(), fleet.host(0) + " compile --json arch=sm_90a"))["status"] ==
        "compiled");
  const auto list = run_cli_line(fleet.env(), fleet.host(0) + " remote list");
  CHECK(list.exit_code == 1);
  CHECK_THAT(list.err, Catch::Contains("cannot connect"));
  const std::string no_lib = fleet.env() + " XQAJIT_LIBHIREDIS=" + (fleet.dir / "missing.so").string();
  const auto without = run_cli_line(no_lib, fleet.host(1) + " compile --json arch=sm_90a");
  CHECK(json_of(without)["status"] == "compiled");
  CHECK_THAT(without.err, Catch::Contains("remote cache (XQAJIT_REMOTE_CACHE) is off") &&
                              Catch::Contains("libhiredis-dev"));
  const auto list_without = run_cli_line(no_lib, fleet.host(1) + " remote list");
  CHECK(list_without.exit_code == 1);
  CHECK_THAT(list_without.err, Catch::Contains("could not load hiredis"));
  const auto none = run_cli_line(fleet.env(), "remote list");
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err, Catch::Contains("XQAJIT_REMOTE_CACHE"));
}

// The figures of the README's remote-cache section; hidden from CI (timings are
// not tests). Run: build/tests/test_remote_fleet "[.bench]"
TEST_CASE("remote hit vs disk hit vs compile", "[.bench]") {
  RedisServer redis;
  TempDir dir{"xqajit-bench"};
  auto options = [&](const std::string& host) {
    Options o;
    o.cache_dir = dir / host;
    o.log_level = "error";
    o.remote_cache = redis.url();
    return o;
  };
  // A real kernel from the embedded templates (not the tiny one): real cubin size.
  const KernelSpec spec = spec_from_fields({{"arch", "sm_90a"}, {"group", "8"}, {"input", "bf16"}});
  double compile_s, remote_s, disk_s, get_ms = 0;
  std::size_t bytes;
  {
    Engine e(options("a"));
    const CubinRef r = e.cubin(spec);
    compile_s = r.seconds, bytes = r.cubin->size();
  }
  {
    Engine e(options("b"));
    const CubinRef r = e.cubin(spec);
    REQUIRE(r.source == Source::remote);
    remote_s = r.seconds;
    constexpr int kReps = 50;
    const auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) REQUIRE(e.remote_cache()->get(r.name, "sm_90a"));
    get_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count() / kReps;
  }
  {
    Engine e(options("b"));
    const CubinRef r = e.cubin(spec);
    REQUIRE(r.source == Source::disk);
    disk_s = r.seconds;
  }
  fmt::print(
      stderr,
      "[figure] cubin {} bytes: compile {:.3f} s; remote hit {:.2f} ms (GET + checks {:.2f} ms, the rest "
      "is the write to the local disk cache); disk hit {:.2f} ms\n",
      bytes, compile_s, remote_s * 1e3, get_ms, disk_s * 1e3);
}
