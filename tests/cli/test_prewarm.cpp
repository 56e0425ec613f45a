// Prewarm, through Engine::prewarm (threads) and through `xqajit prewarm`
// (worker processes): several workers over a fresh cache compile each spec
// once; a second run compiles nothing; a failing spec does not stop the others
// and is named with its error.
// Each NVRTC compile takes ~1-3 s here, so the spec sets stay small.

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <thread>

#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/spec/spec_set.hpp"

namespace fs = std::filesystem;
using namespace xqajit;

namespace {

using xqajit::test::TempDir;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}


using CliResult = xqajit::test::ProcessResult;

CliResult run_cli(const TempDir&, const std::string& env, const std::string& args) {
  return xqajit::test::run_cli_line(env + " XQAJIT_LOG_LEVEL=warn", args);
}

/// A copy of the kernel templates whose GQA kernel does not compile.
fs::path broken_templates(const TempDir& dir) {
  const fs::path copy = dir.path() / "broken_templates";
  fs::copy(fs::path(XQAJIT_SOURCE_DIR) / "kernel_templates", copy, fs::copy_options::recursive);
  std::ofstream(copy / "gqa_decode.cu", std::ios::app) << "\n#error deliberately broken for test_prewarm\n";
  return copy;
}

Options options_for(const TempDir& dir) {
  Options options = Options::from_env();
  options.cache_dir = dir.path() / "cache";
  options.bundles.clear();
  options.no_compile = false;
  return options;
}

}  // namespace

TEST_CASE("Engine::prewarm over several workers compiles each spec once", "[prewarm]") {
  TempDir dir;
  // Three distinct specs, one of them listed twice: two workers may race on it.
  std::vector<KernelSpec> specs =
      expand(
          parse_spec_json(R"([{"input": ["fp16", "bf16"], "head_dim": 64, "page_size": 16, "arch": "sm_90a"},
                                 {"input": "bf16", "kv": "fp8", "head_dim": 64, "page_size": 32, "arch": "sm_90a",
                                  "backend": "portable"}])"))
          .specs;
  REQUIRE(specs.size() == 3);
  specs.push_back(specs[0]);

  // on_done must be serialised: count callers inside it at once (Catch2's
  // assertions are not thread-safe, so check after the run).
  std::atomic<int> inside{0}, overlaps{0};
  std::vector<std::string> seen;
  {
    Engine engine(options_for(dir));
    const auto results = engine.prewarm(specs, 3, [&](const PrewarmResult& r) {
      if (inside.fetch_add(1) != 0) ++overlaps;
      seen.push_back(r.name);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      inside.fetch_sub(1);
    });
    CHECK(overlaps == 0);
    REQUIRE(results.size() == 4);
    CHECK(seen.size() == 4);
    for (std::size_t i = 0; i < results.size(); ++i) {
      INFO(results[i].name << ": " << results[i].error);
      CHECK(results[i].ok);
      CHECK(results[i].name == canonical_name(specs[i]));
    }
    CHECK(engine.stats().compiles == 3);
    CHECK(engine.stats().failures == 0);
    int compiled = 0;
    for (const auto& r : results) compiled += r.source == Source::compiled;
    CHECK(compiled == 3);  // the duplicate came from memory (or from the winner's disk entry)
  }
  {
    // A fresh engine (a new process, in effect) finds everything on disk.
    Engine engine(options_for(dir));
    const auto results = engine.prewarm(specs, 2);
    for (const auto& r : results) {
      CHECK(r.ok);
      CHECK(r.source != Source::compiled);
    }
    CHECK(engine.stats().compiles == 0);
  }
}

TEST_CASE("Engine::prewarm compiles every backend an auto spec's launch may pick", "[prewarm]") {
  TempDir dir;
  Engine engine(options_for(dir));
  // bf16 / fp8 cache on sm_90a: decode_plan picks per shape, so both kernels.
  const KernelSpec spec = spec_from_fields({{"input", "bf16"}, {"kv", "fp8"}, {"head_dim", "128"}, {"group", "4"},
                                            {"page_size", "64"}, {"arch", "sm_90a"}});
  const auto results = engine.prewarm({spec}, 2);
  REQUIRE(results.size() == 2);
  CHECK(results[0].name == "gqa_bf16_kvfp8_obf16_d128_p64_g4_q1_sw0_t128_portable_sm90a");
  CHECK(results[1].name == "gqa_bf16_kvfp8_obf16_d128_p64_g4_q1_sw0_t128_hopper_sm90a");
  for (const auto& r : results) {
    INFO(r.name << ": " << r.error);
    CHECK(r.ok);
  }
}

TEST_CASE("Engine::prewarm reports a failing spec without stopping the others", "[prewarm]") {
  TempDir dir;
  KernelSpec bad;  // invalid: a head dim no kernel has
  bad.head_dim = 100;
  bad.arch = Arch::parse("sm_90a");
  KernelSpec good;
  good.head_dim = 64;
  good.page_size = 16;
  good.arch = Arch::parse("sm_90a");
  Engine engine(options_for(dir));
  const auto results = engine.prewarm({bad, good}, 2);
  REQUIRE(results.size() == 2);
  CHECK_FALSE(results[0].ok);
  CHECK_THAT(results[0].error, Catch::Contains("head_dim"));
  CHECK(results[1].ok);
}

TEST_CASE("xqajit prewarm: products, JSON summary, second run compiles nothing", "[prewarm][cli]") {
  TempDir dir;
  const std::string cache = "--cache-dir " + (dir.path() / "cache").string();
  const std::string args =
      cache + " prewarm --jobs 2 --json input=fp16,bf16 head_dim=64 page_size=16 group=2 arch=sm_90a";

  const CliResult first = run_cli(dir, "", args);
  REQUIRE(first.exit_code == 0);
  const auto doc = nlohmann::json::parse(first.out);
  CHECK(doc.at("compiled") == 2);
  CHECK(doc.at("cached") == 0);
  CHECK(doc.at("failed") == 0);
  REQUIRE(doc.at("results").size() == 2);
  for (const auto& r : doc["results"]) {
    CHECK(r.at("status") == "compiled");
    CHECK(r.at("seconds").get<double>() > 0);
    CHECK_FALSE(r.contains("error"));
  }

  CHECK(doc.at("workers") == "processes");

  const CliResult second = run_cli(dir, "", args);
  REQUIRE(second.exit_code == 0);
  const auto again = nlohmann::json::parse(second.out);
  CHECK(again.at("compiled") == 0);
  CHECK(again.at("cached") == 2);

  // --threads: the same contract through Engine::prewarm in one process.
  const CliResult threads = run_cli(dir, "", args + " --threads");
  REQUIRE(threads.exit_code == 0);
  CHECK(nlohmann::json::parse(threads.out).at("workers") == "threads");
  CHECK(nlohmann::json::parse(threads.out).at("cached") == 2);

  // Plain text (not a terminal): one line per spec on stderr, a summary on stdout.
  const CliResult text = run_cli(
      dir, "", cache + " prewarm --jobs 1 input=fp16,bf16 head_dim=64 page_size=16 group=2 arch=sm_90a");
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("0 compiled, 2 already cached, 0 failed"));
  CHECK_THAT(text.err, Catch::Contains("[2/2]"));
}

TEST_CASE("xqajit prewarm: spec files, --skip-invalid and usage errors", "[prewarm][cli]") {
  TempDir dir;
  const std::string cache = "--cache-dir " + (dir.path() / "cache").string();
  const fs::path file = dir.path() / "specs.json";
  // fp8 on sm_80 is invalid; with --skip-invalid it is reported and skipped.
  std::ofstream(file)
      << R"([{"input": "bf16", "kv": ["bf16", "fp8"], "head_dim": 64, "page_size": 16, "arch": "sm_80"}])";

  const CliResult strict = run_cli(dir, "", cache + " prewarm --spec-file " + file.string());
  CHECK(strict.exit_code == 2);
  CHECK_THAT(strict.err, Catch::Contains("specs.json[0].arch") && Catch::Contains("--skip-invalid"));

  const CliResult lenient =
      run_cli(dir, "", cache + " prewarm --json --skip-invalid --spec-file " + file.string());
  REQUIRE(lenient.exit_code == 0);
  const auto doc = nlohmann::json::parse(lenient.out);
  CHECK(doc.at("results").size() == 1);
  CHECK(doc.at("skipped").size() == 1);
  CHECK_THAT(lenient.err, Catch::Contains("skipped (invalid)"));

  CHECK(run_cli(dir, "", cache + " prewarm").exit_code == 2);  // nothing named
  CHECK(run_cli(dir, "", cache + " prewarm --preset nonesuch arch=sm_90a").exit_code == 2);
  CHECK(run_cli(dir, "", cache + " prewarm --spec-file " + file.string() + " --preset smoke").exit_code == 2);
  CHECK(run_cli(dir, "", cache + " prewarm head_dims=64 arch=sm_90a").exit_code == 2);
  CHECK(run_cli(dir, "", cache + " prewarm --spec-file " + (dir.path() / "missing.json").string()).exit_code == 2);
}

TEST_CASE("xqajit prewarm: a failing compile names its spec and the compiler's message", "[prewarm][cli]") {
  TempDir dir;
  const std::string env = "XQAJIT_TEMPLATE_DIR=" + broken_templates(dir).string();
  const CliResult r =
      run_cli(dir, env,
              "--cache-dir " + (dir.path() / "cache").string() +
                  " prewarm --jobs 2 --json input=fp16,bf16 head_dim=64 page_size=16 arch=sm_90a");
  CHECK(r.exit_code == 1);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc.at("failed") == 2);
  for (const auto& item : doc.at("results")) {
    CHECK(item.at("status") == "failed");
    CHECK_THAT(item.at("error").get<std::string>(), Catch::Contains("deliberately broken"));
  }
  CHECK_THAT(r.err, Catch::Contains("prewarm failed for gqa_fp16_kvfp16_ofp16_d64_p16_g1_q1_sw0_t64_portable_sm90a") &&
                        Catch::Contains("deliberately broken"));
}
