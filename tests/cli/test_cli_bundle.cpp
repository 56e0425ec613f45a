// The bundle commands of the CLI: `xqajit bundle pack` of an auto spec packs every backend its
// launch may pick; pack -> list -> verify -> unpack round trips, and an engine serves from
// the bundle. The format itself: tests/cache/test_bundle.cpp.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "xqajit/cache/bundle.hpp"

namespace fs = std::filesystem;
using xqajit::BundleReader;

namespace {

using xqajit::test::read_file;
using xqajit::test::TempDir;
using xqajit::test::write_file;
using CliResult = xqajit::test::ProcessResult;

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

CliResult run_cli(const TempDir&, const std::string& env, const std::string& args) {
  return xqajit::test::run_cli_line(env + " XQAJIT_LOG_LEVEL=warn", args);
}

}  // namespace

TEST_CASE("CLI: packing an auto spec packs every backend its launch may pick", "[bundle][cli]") {
  TempDir dir;
  // An fp8 cache on sm_90a: decode_plan runs the hopper backend, other archs portable.
  const fs::path specs = dir.path() / "specs.json";
  write_file(specs, R"([{"input": "bf16", "kv": "fp8", "head_dim": 64, "page_size": 16, "arch": "sm_90a"}])");
  const std::string out = (dir.path() / "auto.xqab").string();
  const CliResult pack = run_cli(dir, "", "--cache-dir " + (dir.path() / "cache").string() +
                                              " bundle pack --out " + out + " --spec-file " + specs.string());
  INFO(pack.err);
  REQUIRE(pack.exit_code == 0);
  const auto doc = nlohmann::json::parse(run_cli(dir, "", "bundle list --json " + out).out);
  std::set<std::string> names;
  for (const auto& e : doc.at("entries")) names.insert(e.at("name").get<std::string>());
  CHECK(names == std::set<std::string>{"gqa_bf16_kvfp8_obf16_d64_p16_g1_q1_sw0_t128_portable_sm90a",
                                       "gqa_bf16_kvfp8_obf16_d64_p16_g1_q1_sw0_t64_hopper_sm90a"});
}

TEST_CASE("CLI: pack -> list -> verify -> unpack, and the engine serving from a bundle", "[bundle][cli]") {
  TempDir dir;
  const std::string name = "gqa_fp16_kvfp16_ofp16_d64_p16_g1_q1_sw0_t64_portable_sm90a";
  const std::string cache_a = (dir.path() / "cache-a").string(), cache_b = (dir.path() / "cache-b").string();
  const std::string one = (dir.path() / "one.xqab").string(), all = (dir.path() / "all.xqab").string();

  // Packing a named spec compiles it into cache A first.
  REQUIRE(run_cli(dir, "", "--cache-dir " + cache_a + " bundle pack --out " + one + " " + name).exit_code == 0);
  // Packing "everything of this toolchain" finds it there.
  REQUIRE(run_cli(dir, "", "--cache-dir " + cache_a + " bundle pack --out " + all).exit_code == 0);

  const CliResult list = run_cli(dir, "", "bundle list --json " + all);
  REQUIRE(list.exit_code == 0);
  const auto doc = nlohmann::json::parse(list.out);
  REQUIRE(doc.at("entries").size() == 1);
  const auto& entry = doc["entries"][0];
  CHECK(entry.at("name") == name);
  CHECK(entry.at("arch") == "sm_90a");
  CHECK(entry.at("size").get<std::uint64_t>() > 0);
  CHECK(run_cli(dir, "", "bundle list " + one).out.find(name) != std::string::npos);
  CHECK(read_file(one) == read_file(all));  // same entries, same bytes: the writer is deterministic

  CHECK(run_cli(dir, "", "bundle verify " + all).exit_code == 0);

  // Unpack into a fresh cache B, under the entry's own fingerprint.
  REQUIRE(run_cli(dir, "", "--cache-dir " + cache_b + " bundle unpack " + all).exit_code == 0);
  const fs::path cubin =
      fs::path(cache_b) / entry.at("fingerprint").get<std::string>() / name / "kernel.cubin";
  REQUIRE(fs::exists(cubin));
  const auto reader = BundleReader::open(all);
  CHECK(bytes_of(read_file(cubin)) == reader.read(reader.entries().at(0)));

  // With NVRTC hidden and compiling forbidden, kernels come from cache B ...
  const std::string no_nvrtc = "XQAJIT_LIBNVRTC=/nonexistent/libnvrtc.so XQAJIT_NO_COMPILE=1";
  const CliResult from_disk = run_cli(dir, no_nvrtc, "--cache-dir " + cache_b + " compile --json " + name);
  REQUIRE(from_disk.exit_code == 0);
  CHECK(nlohmann::json::parse(from_disk.out).at("status") == "disk");

  // ... or from a bundle, into an empty cache.
  const std::string empty_cache = "--cache-dir " + (dir.path() / "cache-empty").string();
  const CliResult from_bundle =
      run_cli(dir, no_nvrtc + " XQAJIT_BUNDLES=" + all, empty_cache + " compile --json " + name);
  REQUIRE(from_bundle.exit_code == 0);
  const auto served = nlohmann::json::parse(from_bundle.out);
  CHECK(served.at("status") == "bundle");
  CHECK(served.at("path") == all);

  // A spec in no bundle fails, naming the spec and how to add it to a bundle.
  const std::string missing = "gqa_bf16_kvbf16_obf16_d128_p32_g4_q1_sw0_t64_portable_sm90a";
  const CliResult refused =
      run_cli(dir, no_nvrtc + " XQAJIT_BUNDLES=" + all, empty_cache + " compile " + missing);
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.err, Catch::Contains(missing) && Catch::Contains("bundle pack"));

  // A corrupt bundle: verify exits non-zero naming the entry; the engine skips it.
  std::string bytes = read_file(all);
  bytes[reader.entries().at(0).offset + 100] ^= 0x10;
  const std::string bad = (dir.path() / "bad.xqab").string();
  write_file(bad, bytes);
  const CliResult verify_bad = run_cli(dir, "", "bundle verify " + bad);
  CHECK(verify_bad.exit_code == 1);
  CHECK_THAT(verify_bad.err, Catch::Contains(bad) && Catch::Contains(name) && Catch::Contains("checksum"));
  const CliResult verify_json = run_cli(dir, "", "bundle verify --json " + bad);
  CHECK(verify_json.exit_code == 1);
  CHECK(nlohmann::json::parse(verify_json.out).at("ok") == false);
  const CliResult skip_bad =
      run_cli(dir, no_nvrtc + " XQAJIT_BUNDLES=" + bad + ":" + all, empty_cache + " compile --json " + name);
  REQUIRE(skip_bad.exit_code == 0);
  CHECK(nlohmann::json::parse(skip_bad.out).at("path") == all);
  CHECK_THAT(skip_bad.err, Catch::Contains("checksum"));  // the warning about the bad one

  CHECK(run_cli(dir, "", "--cache-dir " + (dir.path() / "c").string() + " bundle unpack " + bad).exit_code == 1);
  CHECK(run_cli(dir, "", "bundle list " + (dir.path() / "missing.xqab").string()).exit_code == 1);
  CHECK(run_cli(dir, "", "bundle pack").exit_code == 2);  // --out is required
}
