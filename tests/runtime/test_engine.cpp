// The engine's tiers (memory -> disk -> NVRTC), compile-once under concurrency,
// failure paths. Uses a tiny template set (XQAJIT_TEMPLATE_DIR-style) so each
// NVRTC compile takes a fraction of a second.
#include <catch2/catch.hpp>

#include <thread>

#include "support/temp_dir.hpp"
#include "xqajit/cache/cache.hpp"
#include "xqajit/compile/compiler.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"

using namespace xqajit;
using xqajit::test::TempDir;
using xqajit::test::write_file;

namespace {

// A real kernel (it reads the spec flags and includes a header by path) that
// compiles in well under a second.
const char* kTinyKernel = R"(
#include "common/tiny.cuh"
extern "C" __global__ void xqajit_gqa_decode(int* out) { out[0] = tiny_value(); }
)";
const char* kTinyHeader = R"(
#pragma once
__device__ inline int tiny_value() { return HEAD_ELEMS * HEAD_GRP_SIZE + TOKENS_PER_PAGE; }
)";

struct Fixture {
  TempDir dir{"xqajit-engine"};
  Options options;
  Fixture() {
    write_file(dir / "templates/gqa_decode.cu", kTinyKernel);
    write_file(dir / "templates/common/tiny.cuh", kTinyHeader);
    options.cache_dir = dir / "cache";
    options.template_dir = dir / "templates";
    options.log_level = "error";
  }
};

KernelSpec spec_with_group(int group) {
  return spec_from_fields({{"arch", "sm_90a"}, {"group", std::to_string(group)}, {"backend", "portable"}});
}

}  // namespace

TEST_CASE_METHOD(Fixture, "tiers: compiled, then memory, then disk in a new engine", "[engine]") {
  const KernelSpec spec = spec_with_group(4);
  {
    Engine engine(options);
    const CubinRef first = engine.cubin(spec);
    CHECK(first.source == Source::compiled);
    CHECK(first.name == canonical_name(spec));
    REQUIRE(first.cubin);
    CHECK(first.cubin->size() > 100);
    CHECK(std::filesystem::exists(first.path / "kernel.cubin"));
    const CubinRef second = engine.cubin(spec);
    CHECK(second.source == Source::memory);
    CHECK(*second.cubin == *first.cubin);
    const EngineStats st = engine.stats();
    CHECK(st.compiles == 1);
    CHECK(st.memory_hits == 1);
    CHECK(st.compile_seconds > 0);
  }
  Engine fresh(options);
  const CubinRef third = fresh.cubin(spec);
  CHECK(third.source == Source::disk);
  CHECK(fresh.stats().disk_hits == 1);
  CHECK(fresh.stats().compiles == 0);
}

TEST_CASE_METHOD(Fixture, "a corrupt cache entry is rebuilt", "[engine]") {
  const KernelSpec spec = spec_with_group(2);
  std::filesystem::path entry;
  {
    Engine engine(options);
    entry = engine.cubin(spec).path;
  }
  {  // flip one byte of the cubin
    std::fstream f(entry / "kernel.cubin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64);
    f.put('\x5a' ^ static_cast<char>(f.peek()));
  }
  Engine engine(options);
  const CubinRef ref = engine.cubin(spec);
  CHECK(ref.source == Source::compiled);
  Engine again(options);
  CHECK(again.cubin(spec).source == Source::disk);
}

TEST_CASE_METHOD(Fixture, "many threads asking for one missing spec compile it once", "[engine]") {
  Engine engine(options);
  const KernelSpec spec = spec_with_group(8);
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const std::vector<char>>> got(8);
  for (int i = 0; i < 8; ++i) threads.emplace_back([&, i] { got[i] = engine.cubin(spec).cubin; });
  for (auto& t : threads) t.join();
  CHECK(engine.stats().compiles == 1);
  CHECK(engine.stats().memory_hits == 7);
  for (auto& g : got) CHECK(*g == *got[0]);
}

TEST_CASE_METHOD(Fixture, "prewarm over several workers; a second prewarm compiles nothing", "[engine]") {
  std::vector<KernelSpec> specs = {spec_with_group(1), spec_with_group(2), spec_with_group(4)};
  specs.push_back(specs[0]);  // a duplicate is served from memory
  int calls = 0;
  {
    Engine engine(options);
    auto results = engine.prewarm(specs, 2, [&](const PrewarmResult&) { ++calls; });
    REQUIRE(results.size() == 4);
    for (auto& r : results) CHECK(r.ok);
    CHECK(engine.stats().compiles == 3);
    CHECK(calls == 4);
  }
  Engine engine(options);
  for (auto& r : engine.prewarm(specs, 2)) {
    CHECK(r.ok);
    CHECK(r.source != Source::compiled);
  }
}

TEST_CASE_METHOD(Fixture, "prewarm reports a failing spec and carries on", "[engine]") {
  write_file(dir / "templates/common/tiny.cuh",
             "#pragma once\n#if HEAD_GRP_SIZE == 3\n#error group three is broken on purpose\n#endif\n"
             "__device__ inline int tiny_value() { return 1; }\n");
  Engine engine(options);
  auto results = engine.prewarm({spec_with_group(3), spec_with_group(5)}, 2);
  REQUIRE(results.size() == 2);
  CHECK_FALSE(results[0].ok);
  CHECK(results[0].error.find("group three is broken on purpose") != std::string::npos);
  CHECK(results[1].ok);
}

TEST_CASE_METHOD(Fixture, "a compile error carries spec name, options and the NVRTC log", "[engine]") {
  write_file(dir / "templates/gqa_decode.cu",
             "extern \"C\" __global__ void xqajit_gqa_decode(int* o) { o[0] = undeclared_thing; }\n");
  Engine engine(options);
  const KernelSpec spec = spec_with_group(1);
  try {
    engine.cubin(spec);
    FAIL("expected CompileError");
  } catch (const CompileError& e) {
    CHECK(e.spec_name() == canonical_name(spec));
    CHECK(e.log().find("undeclared_thing") != std::string::npos);
    CHECK(std::find(e.options().begin(), e.options().end(), "-arch=sm_90a") != e.options().end());
    CHECK(std::find(e.options().begin(), e.options().end(), "-DHEAD_GRP_SIZE=1") != e.options().end());
    CHECK(std::string(e.what()).find("undeclared_thing") != std::string::npos);
  }
  CHECK(engine.stats().failures == 1);
  // Nothing half-made was published.
  Engine again(options);
  CHECK_THROWS_AS(again.cubin(spec), CompileError);
}

TEST_CASE_METHOD(Fixture, "templates enter the fingerprint", "[engine]") {
  std::string before;
  {
    Engine engine(options);
    before = engine.fingerprint();
    engine.cubin(spec_with_group(1));
  }
  write_file(dir / "templates/common/tiny.cuh", std::string(kTinyHeader) + "// edited\n");
  Engine engine(options);
  CHECK(engine.fingerprint() != before);
  CHECK(engine.cubin(spec_with_group(1)).source == Source::compiled);
}

TEST_CASE_METHOD(Fixture, "no-compile mode names the spec and how to bundle it", "[engine]") {
  options.no_compile = true;
  Engine engine(options);
  try {
    engine.cubin(spec_with_group(16));
    FAIL("expected NotAvailableError");
  } catch (const NotAvailableError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(canonical_name(spec_with_group(16))) != std::string::npos);
    CHECK(msg.find("bundle pack") != std::string::npos);
  }
}

TEST_CASE_METHOD(Fixture, "memory-only engine and an unwritable cache still compile", "[engine]") {
  SECTION("disk cache off") {
    options.disk_cache = false;
    Engine engine(options);
    CHECK(engine.disk_cache() == nullptr);
    CHECK(engine.cubin(spec_with_group(1)).source == Source::compiled);
    CHECK(engine.cubin(spec_with_group(1)).source == Source::memory);
  }
  SECTION("cache root under a regular file") {
    write_file(dir / "not-a-dir", "x");
    options.cache_dir = dir / "not-a-dir" / "cache";
    Engine engine(options);
    REQUIRE(engine.disk_cache() != nullptr);
    CHECK_FALSE(engine.disk_cache()->writable());
    CHECK(engine.cubin(spec_with_group(1)).source == Source::compiled);
  }
}

TEST_CASE_METHOD(Fixture, "a kind without a template is a clear compile error", "[engine]") {
  Engine engine(options);
  const KernelSpec mla = spec_from_fields({{"kind", "mla"}, {"group", "128"}, {"arch", "sm_90a"}});
  try {
    engine.cubin(mla);
    FAIL("expected CompileError");
  } catch (const CompileError& e) {
    CHECK(std::string(e.what()).find("mla_decode_hopper.cu") != std::string::npos);  // the resolved backend's file
  }
}

TEST_CASE("a missing NVRTC says which library, where it looked and what still works", "[engine]") {
  TempDir dir{"xqajit-nonvrtc"};
  Options options;
  options.cache_dir = dir / "cache";
  options.libnvrtc_path = (dir / "no-such-libnvrtc.so").string();
  options.log_level = "off";
  Engine engine(options);
  CHECK_FALSE(engine.compiler().available());
  try {
    engine.cubin(spec_with_group(1));
    FAIL("expected LibraryError");
  } catch (const LibraryError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("NVRTC") != std::string::npos);
    CHECK(msg.find("no-such-libnvrtc.so") != std::string::npos);
    CHECK(msg.find("bundles") != std::string::npos);
  }
}

TEST_CASE_METHOD(Fixture, "a template folder whose path needs JSON escaping still publishes", "[engine]") {
  const auto odd = dir / "templates \"quoted\" \\ dir";
  write_file(odd / "gqa_decode.cu", kTinyKernel);
  write_file(odd / "common/tiny.cuh", kTinyHeader);
  options.template_dir = odd;
  {
    Engine engine(options);
    const CubinRef ref = engine.cubin(spec_with_group(2));
    CHECK(ref.source == Source::compiled);
    CHECK(std::filesystem::exists(ref.path / "manifest.json"));
  }
  Engine again(options);
  CHECK(again.cubin(spec_with_group(2)).source == Source::disk);
}
