// `cmake --install` gives a package another project can use with
// find_package(xqajit) + target_link_libraries(app xqajit::xqajit), and a CLI
// that runs from the install prefix.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using xqajit::test::ProcessResult;
using xqajit::test::run_process;

namespace {

ProcessResult run_checked(const std::vector<std::string>& argv) {
  const ProcessResult r = run_process(argv);
  INFO("command: " << argv.at(0) << " ... " << argv.back() << "\n" << r.describe());
  REQUIRE(r.exit_code == 0);
  return r;
}

std::string cache_value(const fs::path& build_dir, const std::string& key) {
  std::ifstream cache(build_dir / "CMakeCache.txt");
  for (std::string line; std::getline(cache, line);)
    if (line.rfind(key + ":", 0) == 0) return line.substr(line.find('=') + 1);
  return {};
}

}  // namespace

TEST_CASE("the installed package builds and runs a consumer project", "[install]") {
  xqajit::test::TempDir tmp("xqajit-install-test");
  const fs::path prefix = tmp / "prefix";
  const fs::path build = tmp / "consumer-build";

  run_checked({"cmake", "--install", XQAJIT_BINARY_DIR, "--prefix", prefix.string()});
  CHECK(fs::exists(prefix / "include/xqajit/spec.hpp"));
  CHECK(fs::exists(prefix / "include/xqajit/engine.hpp"));
  CHECK(fs::exists(prefix / "bin/xqajit"));

  run_checked({"cmake", "-S", std::string(XQAJIT_SOURCE_DIR) + "/tests/install_consumer", "-B",
               build.string(), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
               "-DCMAKE_PREFIX_PATH=" + prefix.string(),
               // Only the prefix may satisfy find_package, never a registry or the build tree.
               "-DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON"});
  const std::string found_at = cache_value(build, "xqajit_DIR");
  INFO("xqajit_DIR=" << found_at);
  CHECK(fs::weakly_canonical(found_at).string().rfind(fs::weakly_canonical(prefix).string(), 0) == 0);
  run_checked({"cmake", "--build", build.string()});

  const std::string app = (build / "app").string();
  SECTION("a valid spec prints its canonical name") {
    const ProcessResult r = run_checked({app, "input=bf16", "kv=fp8", "group=8", "arch=sm_90a"});
    CHECK(r.out == "gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t128_portable_sm90a\n");
  }
  SECTION("an invalid spec reaches the consumer as a SpecError") {
    const ProcessResult r = run_process({app, "head_dim=100", "arch=sm_90a"});
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("head_dim=100") != std::string::npos);
  }
  SECTION("the installed CLI runs from the prefix") {
    const ProcessResult r = run_checked(
        {(prefix / "bin/xqajit").string(), "spec", "input=bf16", "kv=fp8", "group=8", "arch=sm_90a"});
    CHECK(r.out.rfind("gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t128_portable_sm90a\n", 0) == 0);
  }
}
