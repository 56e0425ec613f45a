// The xqajit CLI as a user runs it: exit codes, messages, JSON, and several
// processes racing for the same missing kernel.

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using xqajit::test::EnvChanges;
using xqajit::test::ProcessResult;
using Json = nlohmann::json;

namespace {

using ScratchDir = xqajit::test::TempDir;

// Every run gets a private cache root and none of the caller's xqajit settings.
EnvChanges clean_env(const fs::path& cache_dir, EnvChanges extra = {}) {
  EnvChanges env = {{"XQAJIT_CACHE_DIR", cache_dir.string()}, {"XQAJIT_BUNDLES", std::nullopt},
                    {"XQAJIT_NO_COMPILE", std::nullopt},      {"XQAJIT_DISK_CACHE", std::nullopt},
                    {"XQAJIT_CACHE_MAX_BYTES", std::nullopt}, {"XQAJIT_TEMPLATE_DIR", std::nullopt}};
  for (auto& [key, value] : extra) env[key] = value;
  return env;
}

std::vector<std::string> cli_args(std::vector<std::string> args) {
  args.insert(args.begin(), XQAJIT_CLI_PATH);
  return args;
}

ProcessResult run_cli(const ScratchDir& dir, std::vector<std::string> args, EnvChanges extra = {}) {
  return xqajit::test::run_process(cli_args(std::move(args)),
                                   clean_env(dir.path() / "cache", std::move(extra)));
}

// The child cannot see a GPU, whatever this host has.
const EnvChanges kNoGpu = {{"CUDA_VISIBLE_DEVICES", ""}, {"XQAJIT_LIBCUDA", "/nonexistent/libcuda.so.1"}};

Json parse_json(const ProcessResult& r) {
  INFO(r.describe());
  Json j;
  REQUIRE_NOTHROW(j = Json::parse(r.out));
  return j;
}

std::string name_of(const ScratchDir& dir, const std::vector<std::string>& fields) {
  std::vector<std::string> args = {"spec", "--json"};
  args.insert(args.end(), fields.begin(), fields.end());
  const ProcessResult r = run_cli(dir, args);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  return parse_json(r).at("name").get<std::string>();
}

const std::vector<std::string> kSpec = {"input=bf16", "kv=fp8", "group=8", "page_size=64", "arch=sm_90a"};
const char* const kSpecName = "gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t128_portable_sm90a";

}  // namespace

TEST_CASE("spec --json prints the golden name, the flags and the fields", "[cli]") {
  ScratchDir dir;
  const ProcessResult r = run_cli(dir, {"spec", "--json", "input=bf16", "kv=fp8", "group=8", "arch=sm_90a"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  const Json j = parse_json(r);
  CHECK(j.at("name") == kSpecName);
  const auto flags = j.at("flags").get<std::vector<std::string>>();
  CHECK(std::count(flags.begin(), flags.end(), "-DHEAD_ELEMS=128") == 1);
  CHECK(std::count(flags.begin(), flags.end(), "-DCACHE_ELEM_ENUM=2") == 1);
  CHECK(std::count(flags.begin(), flags.end(), "-DHEAD_GRP_SIZE=8") == 1);
  CHECK(j.at("fields").at("kv") == "fp8");
  CHECK(j.at("fields").at("output") == "bf16");  // defaults to the input type
  CHECK(j.at("fields").at("arch") == "sm_90a");
  // backend=auto: the launch picks hopper for this fp8 cache on sm_90a, so both kernels.
  CHECK(j.at("kernels") == Json::array({kSpecName, "gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t128_hopper_sm90a"}));
  const ProcessResult pinned = run_cli(dir, {"spec", "--json", kSpecName});
  REQUIRE(pinned.exit_code == 0);
  CHECK(parse_json(pinned).at("kernels") == Json::array({kSpecName}));  // a name pins one kernel
}

TEST_CASE("spec names are pinned for a few specs of each family", "[cli]") {
  ScratchDir dir;
  CHECK(name_of(dir, {"head_dim=64", "page_size=16", "group=4", "arch=sm_80"}) ==
        "gqa_fp16_kvfp16_ofp16_d64_p16_g4_q1_sw0_t64_portable_sm80");
  CHECK(name_of(dir, {"input=fp16", "q_len=4", "sliding_window=1", "group=2", "arch=sm_120a"}) ==
        "gqa_fp16_kvfp16_ofp16_d128_p64_g2_q4_sw1_t64_portable_sm120a");
  CHECK(name_of(dir, {"kind=mla", "input=bf16", "head_dim=576", "group=128", "arch=sm_90a"}) ==
        "mla_bf16_kvbf16_obf16_d576_p64_g128_q1_sw0_t64_hopper_sm90a");
  CHECK(name_of(dir, {"kind=mla", "input=fp8", "output=bf16", "head_dim=576", "group=16", "arch=sm_90a",
                      "backend=hopper"}) == "mla_fp8_kvfp8_obf16_d576_p64_g16_q1_sw0_t64_hopper_sm90a");
  CHECK(name_of(dir, {"kind=mla", "input=fp8", "group=16", "arch=sm_90a", "backend=portable"}) ==
        "mla_fp8_kvfp8_obf16_d576_p64_g16_q1_sw0_t32_portable_sm90");
  CHECK(name_of(dir, {"kind=mla", "input=fp8", "group=16", "arch=sm_90a"}) ==  // auto: hopper on sm_90a
        "mla_fp8_kvfp8_obf16_d576_p64_g16_q1_sw0_t64_hopper_sm90a");
}

TEST_CASE("a NAME argument round-trips through spec", "[cli]") {
  ScratchDir dir;
  const ProcessResult r = run_cli(dir, {"--json", "spec", kSpecName});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK(parse_json(r).at("name") == kSpecName);
  // Text mode puts the name alone on the first line.
  const ProcessResult text = run_cli(dir, {"spec", kSpecName});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.substr(0, text.out.find('\n')) == kSpecName);
}

TEST_CASE("the order of fields never changes the name", "[cli]") {
  ScratchDir dir;
  std::vector<std::string> fields = {"arch=sm_90a", "group=8", "input=bf16", "kv=fp8"};
  std::set<std::string> names;
  do {
    names.insert(name_of(dir, fields));
  } while (std::next_permutation(fields.begin(), fields.end()));
  CHECK(names == std::set<std::string>{kSpecName});
}

TEST_CASE("spec errors exit 2 and name what is wrong", "[cli]") {
  ScratchDir dir;
  auto expect_usage_error = [&](std::vector<std::string> args, const std::string& mention,
                                EnvChanges env = {}) {
    const ProcessResult r = run_cli(dir, std::move(args), std::move(env));
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find(mention) != std::string::npos);
  };
  SECTION("a bad value names the field, the value and what is allowed") {
    expect_usage_error({"spec", "head_dim=100", "arch=sm_90a"}, "head_dim=100");
    expect_usage_error({"spec", "head_dim=100", "arch=sm_90a"}, "256");
    expect_usage_error({"compile", "input=fp32", "arch=sm_90a"}, "input=fp32");
    expect_usage_error({"spec", "input=fp16", "kv=fp16", "output=fp8", "arch=sm_90a"}, "output");
  }
  SECTION("an unknown field is named") { expect_usage_error({"spec", "heads=8", "arch=sm_90a"}, "heads"); }
  SECTION("without a GPU, a missing arch is an error naming arch") {
    expect_usage_error({"spec", "input=bf16"}, "arch", kNoGpu);
    expect_usage_error({"compile", "input=bf16"}, "arch", kNoGpu);
  }
  SECTION("an arch the tables do not know") { expect_usage_error({"spec", "arch=sm_91x"}, "arch"); }
  SECTION("a malformed name") {
    expect_usage_error({"spec", "gqa_bf16_nonsense"}, "gqa_bf16_nonsense");
    expect_usage_error({"compile", "gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t64_portable_sm90q"}, "90q");
  }
  SECTION("malformed arguments") {
    expect_usage_error({"spec", "input=bf16", "garbage"}, "garbage");
    expect_usage_error({"spec", "input=bf16", "input=fp16", "arch=sm_90a"}, "input");
    expect_usage_error({"spec"}, "required");
    expect_usage_error({}, "subcommand");
    expect_usage_error({"frobnicate"}, "frobnicate");
    expect_usage_error({"gc"}, "--max-bytes");
    expect_usage_error({"gc", "--max-bytes", "lots"}, "lots");
  }
}

TEST_CASE("global flags work before and after the subcommand", "[cli]") {
  ScratchDir dir;
  const ProcessResult before =
      run_cli(dir, {"--json", "spec", "input=bf16", "kv=fp8", "group=8", "arch=sm_90a"});
  const ProcessResult after =
      run_cli(dir, {"spec", "input=bf16", "kv=fp8", "group=8", "arch=sm_90a", "--json"});
  INFO(before.describe() << "\n" << after.describe());
  REQUIRE(before.exit_code == 0);
  REQUIRE(after.exit_code == 0);
  CHECK(before.out == after.out);
  CHECK(parse_json(after).at("name") == kSpecName);
}

TEST_CASE("doctor exits 0 and reports what is missing", "[cli]") {
  ScratchDir dir;
  SECTION("on this host") {
    const ProcessResult r = run_cli(dir, {"doctor", "--json"});
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    const Json j = parse_json(r);
    for (const char* key : {"driver", "nvrtc", "templates", "cache", "bundles", "summary"})
      CHECK(j.contains(key));
    CHECK(j.at("cache").at("root") == (dir.path() / "cache").string());
  }
  SECTION("with no driver and no NVRTC") {
    EnvChanges env = kNoGpu;
    env["XQAJIT_LIBNVRTC"] = "/nonexistent/libnvrtc.so";
    const ProcessResult r = run_cli(dir, {"doctor"}, env);
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("driver (libcuda)\n  NOT AVAILABLE") != std::string::npos);
    CHECK(r.out.find("launch kernels: no") != std::string::npos);
    const ProcessResult j = run_cli(dir, {"doctor", "--json"}, env);
    REQUIRE(j.exit_code == 0);
    CHECK(parse_json(j).at("driver").at("found") == false);
  }
}

TEST_CASE("compile: NVRTC first, then the disk cache; list, gc and clear see the entry", "[cli][nvrtc]") {
  ScratchDir dir;
  const std::string cache = (dir.path() / "mine").string();
  std::vector<std::string> args = {"--cache-dir", cache, "compile", "--json"};
  args.insert(args.end(), kSpec.begin(), kSpec.end());

  const ProcessResult first = run_cli(dir, args);
  INFO(first.describe());
  REQUIRE(first.exit_code == 0);
  const Json a = parse_json(first);
  CHECK(a.at("name") == kSpecName);
  CHECK(a.at("status") == "compiled");
  CHECK(a.at("cubin_bytes").get<long>() > 0);
  CHECK(a.at("seconds").get<double>() > 0);
  const fs::path entry = a.at("path").get<std::string>();
  CHECK(entry.string().rfind(cache, 0) == 0);  // under --cache-dir, not XQAJIT_CACHE_DIR
  CHECK(fs::exists(entry));

  const ProcessResult second = run_cli(dir, args);
  INFO(second.describe());
  REQUIRE(second.exit_code == 0);
  const Json b = parse_json(second);
  CHECK(b.at("status") == "disk");
  CHECK(b.at("path") == a.at("path"));
  CHECK(b.at("cubin_bytes") == a.at("cubin_bytes"));

  const ProcessResult list = run_cli(dir, {"--cache-dir", cache, "list", "--json"});
  INFO(list.describe());
  REQUIRE(list.exit_code == 0);
  const Json l = parse_json(list);
  REQUIRE(l.at("entries").size() == 1);
  CHECK(l.at("entries")[0].at("name") == kSpecName);
  CHECK(l.at("entries")[0].at("current") == true);
  CHECK(l.at("entries")[0].at("bytes").get<long>() >= a.at("cubin_bytes").get<long>());

  const ProcessResult gc_keep = run_cli(dir, {"--cache-dir", cache, "gc", "--max-bytes", "1G", "--json"});
  REQUIRE(gc_keep.exit_code == 0);
  CHECK(parse_json(gc_keep).at("freed_bytes") == 0);
  const ProcessResult gc_all = run_cli(dir, {"--cache-dir", cache, "gc", "--max-bytes", "0", "--json"});
  INFO(gc_all.describe());
  REQUIRE(gc_all.exit_code == 0);
  CHECK(parse_json(gc_all).at("freed_bytes").get<long>() > 0);
  CHECK(parse_json(gc_all).at("bytes") == 0);

  REQUIRE(run_cli(dir, args).exit_code == 0);  // compiled again
  const ProcessResult clear = run_cli(dir, {"--cache-dir", cache, "clear", "--json"});
  REQUIRE(clear.exit_code == 0);
  CHECK(parse_json(clear).at("removed") == 1);
  CHECK(parse_json(run_cli(dir, {"--cache-dir", cache, "list", "--json"})).at("entries").empty());
}

TEST_CASE("compile failures exit 1 with the reason, the options and the NVRTC log", "[cli][nvrtc]") {
  ScratchDir dir;
  std::vector<std::string> args = {"compile"};
  args.insert(args.end(), kSpec.begin(), kSpec.end());

  SECTION("a template that does not compile") {
    const fs::path templates = dir.path() / "templates";
    fs::create_directories(templates);
    std::ofstream(templates / "gqa_decode.cu") << "#error xqajit test: deliberately broken template\n";
    const ProcessResult r = run_cli(dir, args, {{"XQAJIT_TEMPLATE_DIR", templates.string()}});
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(kSpecName) != std::string::npos);
    CHECK(r.err.find("-arch=sm_90a") != std::string::npos);
    CHECK(r.err.find("deliberately broken template") != std::string::npos);
  }
  SECTION("compiling forbidden and the kernel in no cache") {
    const ProcessResult r = run_cli(dir, [&] {
      auto a = args;
      a.insert(a.begin(), "--no-compile");
      return a;
    }());
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(kSpecName) != std::string::npos);
  }
  SECTION("no NVRTC library") {
    const ProcessResult r = run_cli(dir, args, {{"XQAJIT_LIBNVRTC", "/nonexistent/libnvrtc.so"}});
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("nvrtc") != std::string::npos);
  }
}

TEST_CASE("six processes racing for one missing kernel compile it once", "[cli][nvrtc][concurrency]") {
  ScratchDir dir;
  const std::string cache = (dir.path() / "shared").string();
  std::vector<std::string> args = {"--cache-dir", cache, "compile", "--json"};
  args.insert(args.end(), kSpec.begin(), kSpec.end());
  const std::vector<std::vector<std::string>> commands(6, cli_args(args));

  const std::vector<ProcessResult> results =
      xqajit::test::run_processes_concurrently(commands, clean_env(dir.path() / "unused"));
  int compiled = 0, from_disk = 0;
  std::set<std::string> paths;
  for (const ProcessResult& r : results) {
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    const Json j = parse_json(r);
    CHECK(j.at("name") == kSpecName);
    compiled += j.at("status") == "compiled";
    from_disk += j.at("status") == "disk";
    paths.insert(j.at("path").get<std::string>());
  }
  CHECK(compiled == 1);
  CHECK(from_disk == 5);
  CHECK(paths.size() == 1);
}
