// The paths a kernel takes to a launch, on a real GPU:
//   [smoke]   a decode through the default engine matches the float64 reference
//             (scripts/run.sh runs this on a GPU host);
//   [bundle]  a kernel served from a bundle, in a process where NVRTC cannot be
//             loaded and compiling is forbidden, launches and matches;
//   [capture] a kernel that is not loaded yet is refused on a capturing stream;
//   [tune]    Engine::tune is refused while capturing, then tunes on the caller's
//             buffers, publishes and saves the winner; the tuned launch matches.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <fstream>
#include <random>

#include "gpu/decode_problem.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "xqajit/cache/bundle.hpp"
#include "xqajit/compile/compiler.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/tuning/tuner.hpp"
#include "xqajit/tuning/tuning.hpp"
#include <filesystem>

using namespace xqajit;
using namespace xqajit::testing;

namespace {

const DeviceInfo& device() {
  static const DeviceInfo info = Driver::instance().device(0);
  return info;
}

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

DecodeCase bf16_fp8_case() {
  DecodeCase c;  // bf16 Q and output, 2 KV heads
  c.kv = DType::fp8;
  c.group = 4;
  c.kv_scale = 0.5f;
  c.seq_lens = {1, 300, 0, 1000};
  return c;
}

/// Poisons the output, launches, and compares with the reference.
void launch_and_check(Engine& engine, DecodeProblem& pr) {
  CudaStream stream;
  pr.d_out.fill(0xff);
  decode(engine, pr.dev, stream.get());
  XQAJIT_CUDART_CHECK(cudaGetLastError());
  XQAJIT_CUDART_CHECK(cudaStreamSynchronize(stream.get()));
  const std::vector<double> got = pr.output();
  const std::vector<double> want = reference_decode(pr.host);
  for (double x : got) REQUIRE_FALSE(std::isnan(x));
  const double err = relative_error(got, want);
  INFO("relative error " << err);
  CHECK(err < 0.02);
}

/// Whether `call(stream)` is refused with NotAvailableError ("... capturing ...") while
/// `stream` captures a graph; the capture is ended and dropped either way.
template <class Call>
bool refused_while_capturing(cudaStream_t stream, Call&& call) {
  try {
    CapturedGraph graph(stream, call);
  } catch (const NotAvailableError& e) {
    return std::string(e.what()).find("capturing") != std::string::npos;
  }
  return false;
}

/// An engine's options with its disk cache in `dir` (nothing shared with other tests).
Options cache_in(const xqajit::test::TempDir& dir) {
  Options options;
  options.cache_dir = dir / "cache";
  return options;
}

bool nvrtc_is_mapped() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("libnvrtc") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("smoke: a decode through the engine matches the CPU reference", "[gpu][smoke]") {
  for (DecodeCase c : {bf16_fp8_case(), DecodeCase{}}) {
    DecodeProblem pr(c, rng(), device());
    launch_and_check(default_engine(), pr);
  }
}

TEST_CASE("a bundled kernel launches with NVRTC hidden and compiling forbidden", "[gpu][bundle]") {
  xqajit::test::TempDir dir("xqajit-gpu-bundle");
  // Build host: prewarm the spec (every backend its launch may pick) and pack it.
  Options build;
  build.cache_dir = dir / "build-cache";
  Engine builder(build);
  DecodeProblem probe(bf16_fp8_case(), rng(), device());
  const KernelSpec spec = decode_spec(probe.dev, device().best_arch());
  BundleWriter writer;
  for (const PrewarmResult& r : builder.prewarm({spec})) {
    REQUIRE(r.ok);
    const CubinRef ref = builder.cubin(r.spec);
    writer.add({ref.name, normalized(r.spec).arch.str(), ref.fingerprint, 0, 0, {}}, *ref.cubin);
  }
  const auto bundle = dir / "kernels.xqab";
  writer.write(bundle);

  // Production host: a fresh process that cannot load NVRTC at all.
  const auto result = xqajit::test::run_process(
      {"/proc/self/exe", "[.bundle_child]"},
      {{"XQAJIT_BUNDLES", bundle.string()},
       {"XQAJIT_NO_COMPILE", "1"},
       {"XQAJIT_LIBNVRTC", (dir / "hidden" / "libnvrtc.so.13").string()},
       {"XQAJIT_CACHE_DIR", (dir / "empty-cache").string()}});
  INFO(result.describe() << "\nstdout:\n" << result.out);
  CHECK(result.exit_code == 0);
  CHECK(result.out.find("All tests passed") != std::string::npos);
}

// Run only by the test above, in a child process (hidden tag).
TEST_CASE("bundle child: serve from the bundle and launch", "[.bundle_child]") {
  Engine engine;  // XQAJIT_BUNDLES, XQAJIT_NO_COMPILE, XQAJIT_LIBNVRTC from the parent
  REQUIRE(engine.options().no_compile);
  CHECK_FALSE(engine.compiler().available());
  DecodeProblem pr(bf16_fp8_case(), rng(), device());
  launch_and_check(engine, pr);
  CHECK(engine.stats().bundle_hits == 1);
  CHECK(engine.stats().compiles == 0);
  CHECK_FALSE(nvrtc_is_mapped());
  // A spec that is in no bundle fails with a message that says how to add it.
  DecodeCase other = bf16_fp8_case();
  other.group = 2;
  DecodeProblem missing(other, rng(), device());
  CudaStream stream;
  CHECK_THROWS_WITH(decode(engine, missing.dev, stream.get()), Catch::Contains("bundle pack"));
}

TEST_CASE("a kernel not loaded yet is refused while the stream captures a graph", "[gpu][capture]") {
  xqajit::test::TempDir dir("xqajit-gpu-capture");
  Engine engine(cache_in(dir));
  DecodeCase c;
  c.group = 2;
  DecodeProblem pr(c, rng(), device());
  CudaStream stream;
  CHECK(refused_while_capturing(stream.get(), [&](cudaStream_t s) { decode(engine, pr.dev, s); }));
  CHECK(engine.stats().compiles == 0);  // nothing was compiled during capture
  // Once warm, the same launch works (and is what a capture would record).
  launch_and_check(engine, pr);
}

TEST_CASE("Engine::tune: refused while capturing; tunes on the caller's buffers and publishes", "[gpu][tune]") {
  xqajit::test::TempDir dir("xqajit-gpu-tune");
  const Options options = cache_in(dir);
  Engine engine(options);
  DecodeCase c;
  c.group = 4, c.head_dim = 64, c.seq_lens = {3000, 4096, 17};
  c.backend = Backend::automatic;  // the tuner picks it
  DecodeProblem pr(c, rng(), device());
  CudaStream stream;
  CHECK(refused_while_capturing(stream.get(), [&](cudaStream_t s) { engine.tune(pr.dev, s); }));
  CHECK(engine.stats().compiles == 0);

  const auto entry = engine.tune(pr.dev, stream.get());
  REQUIRE(entry);
  CHECK(entry->candidates.size() >= 2);
  for (const auto& cand : entry->candidates) CHECK(cand.median_us > 0);
  WARN(fmt::format("tuned {} (gain {:.3f}x over the heuristic, {} candidates)", to_string(entry->winner),
                   entry->gain(), entry->candidates.size()));
  CHECK(std::filesystem::exists(tuning_file(options.cache_dir, device().name)));
  CHECK(decode_plan(pr.dev, device()).source == ChoiceSource::tuned);
  // A problem sized after tuning (its workspace fits the tuned plan) runs the tuned variant correctly.
  DecodeProblem tuned(c, rng(), device());
  launch_and_check(engine, tuned);
  set_active_tuning(nullptr);
}

TEST_CASE("a second GPU works exactly like the first", "[gpu][multi]") {
  int count = 0;
  XQAJIT_CUDART_CHECK(cudaGetDeviceCount(&count));
  if (count < 2) {
    WARN("SKIPPED: this host has " << count << " GPU; the multi-GPU case needs 2 and did NOT run");
    return;
  }
  xqajit::test::TempDir dir("xqajit-gpu-multi");
  Engine engine(cache_in(dir));
  // A config whose dynamic shared memory exceeds 48 KB, so a launch on device 1
  // fails unless the attribute was raised there too (not only on device 0).
  DecodeCase c = bf16_fp8_case();
  c.seq_lens = {4000, 1, 2500};
  for (int dev : {0, 1, 0}) {
    XQAJIT_CUDART_CHECK(cudaSetDevice(dev));
    const DeviceInfo& info = Driver::instance().device(dev);
    DecodeProblem pr(c, rng(), info);
    REQUIRE(decode_plan(pr.dev, info).smem_bytes > 48 * 1024);
    INFO("device " << dev);
    launch_and_check(engine, pr);
  }
  XQAJIT_CUDART_CHECK(cudaSetDevice(0));
  CHECK(engine.stats().compiles == 1);  // one cubin, loaded per device
}
