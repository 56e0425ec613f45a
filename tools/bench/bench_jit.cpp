// How long a request waits for a kernel, per tier: cold NVRTC compile, disk
// hit (new process-like engine), memory hit. Not a test: prints a table.
//
//   xqajit_bench_jit [--arch sm_90a] [--specs N]
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "xqajit/runtime/engine.hpp"
#include "xqajit/spec/spec.hpp"

using namespace xqajit;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "sm_90a";
  int max_specs = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--arch")) arch = argv[i + 1];
    else if (!std::strcmp(argv[i], "--specs")) max_specs = std::stoi(argv[i + 1]);
  }
  const std::vector<std::map<std::string, std::string>> all = {
      {{"input", "bf16"}, {"group", "4"}, {"page_size", "64"}},
      {{"input", "bf16"}, {"kv", "fp8"}, {"group", "8"}, {"page_size", "16"}},
      {{"input", "fp16"}, {"head_dim", "256"}, {"group", "2"}, {"page_size", "32"}},
      {{"input", "fp16"}, {"head_dim", "64"}, {"group", "16"}, {"page_size", "128"}},
      {{"input", "bf16"}, {"kv", "fp8"}, {"output", "fp8"}, {"group", "8"}, {"q_len", "4"}},
  };
  const auto root = std::filesystem::temp_directory_path() / fmt::format("xqajit-bench-jit-{}", ::getpid());
  Options options = Options::from_env();
  options.cache_dir = root;
  options.bundles.clear();
  options.no_compile = false;

  fmt::print("{:<58} {:>10} {:>10} {:>12}\n", "spec", "cold s", "disk s", "memory ns");
  for (int i = 0; i < max_specs && i < static_cast<int>(all.size()); ++i) {
    auto fields = all[i];
    fields["arch"] = arch;
    const KernelSpec spec = spec_from_fields(fields);
    double cold = 0, disk = 0, mem_ns = 0;
    {
      Engine engine(options);
      const auto t0 = Clock::now();
      engine.cubin(spec);
      cold = seconds(t0, Clock::now());
      constexpr int kIters = 20000;
      const auto t1 = Clock::now();
      for (int k = 0; k < kIters; ++k) engine.cubin(spec);
      mem_ns = seconds(t1, Clock::now()) * 1e9 / kIters;
    }
    {
      Engine engine(options);  // a fresh engine sees only the disk
      const auto t0 = Clock::now();
      engine.cubin(spec);
      disk = seconds(t0, Clock::now());
    }
    fmt::print("{:<58} {:>10.3f} {:>10.4f} {:>12.0f}\n", canonical_name(spec), cold, disk, mem_ns);
  }
  std::filesystem::remove_all(root);
  return 0;
}
