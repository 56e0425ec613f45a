// `xqajit prewarm`: compile a set of specs into the cache ahead of traffic, in
// parallel, so that no request waits for NVRTC.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli.hpp"
#include "cli_common.hpp"
#include "xqajit/engine.hpp"
#include "xqajit/spec_set.hpp"

namespace xqajit::cli {
namespace {

struct PrewarmArgs {
  int jobs = 0;
  bool skip_invalid = false;
  std::string spec_file;
  std::string preset;
  std::vector<std::string> fields;  // FIELD=VALUE[,VALUE...]
};

/// The specs named by --spec-file, --preset or FIELD=VALUE lists. FIELD=VALUE
/// arguments given with a file or a preset override those fields (for a preset,
/// arch= picks the archs it is built for).
SpecSet collect_specs(const PrewarmArgs& args, const Options& options) {
  if (!args.spec_file.empty() && !args.preset.empty())
    throw UsageError("give --spec-file or --preset, not both");
  if (args.spec_file.empty() && args.preset.empty() && args.fields.empty())
    throw UsageError("nothing to prewarm: give --spec-file FILE, --preset NAME (" +
                     fmt::format("{}", fmt::join(preset_names(), ", ")) + ") or FIELD=VALUE[,VALUE...]");
  FieldProduct overrides = parse_field_args(args.fields);
  ExpandOptions expand_options;
  expand_options.skip_invalid = args.skip_invalid;
  std::optional<Arch> gpu_arch;  // asked for only when some product names no arch (costs a cuInit)
  std::vector<FieldProduct> products;
  if (!args.preset.empty()) {
    std::vector<Arch> archs;
    if (auto it = overrides.find("arch"); it != overrides.end()) {
      for (const auto& a : it->second) archs.push_back(Arch::parse(a));
      overrides.erase(it);
    } else if ((gpu_arch = current_gpu_arch(options))) {
      archs.push_back(*gpu_arch);
    }
    products = with_overrides(preset(args.preset, archs), overrides);
    expand_options.source = "--preset " + args.preset;
  } else if (!args.spec_file.empty()) {
    products = with_overrides(read_spec_file(args.spec_file), overrides);
    expand_options.source = std::filesystem::path(args.spec_file).filename().string();
  } else {
    products = {overrides};
    expand_options.source = "arguments";
  }
  const bool need_default_arch =
      std::any_of(products.begin(), products.end(), [](const FieldProduct& p) { return p.count("arch") == 0; });
  if (need_default_arch && !gpu_arch) gpu_arch = current_gpu_arch(options);
  if (gpu_arch) expand_options.default_arch = &*gpu_arch;
  return expand(products, expand_options);
}

/// A result's spec name; a failed spec may have none (e.g. an arch NVRTC cannot target).
std::string spec_label(const PrewarmResult& r) {
  if (!r.name.empty()) return r.name;
  try {
    return canonical_name(r.spec);
  } catch (const std::exception&) {
    return fmt::format("{} {} kv={} d{} p{} g{} {}", to_string(r.spec.kind), to_string(r.spec.input),
                       to_string(r.spec.kv), r.spec.head_dim, r.spec.page_size, r.spec.group, r.spec.arch.str());
  }
}

std::string status_of(const PrewarmResult& r) { return r.ok ? to_string(r.source) : "failed"; }

/// Progress on stderr: a redrawn bar on a terminal, one plain line per spec otherwise.
class Progress {
 public:
  Progress(std::size_t total, bool quiet_lines)
      : total_(total), tty_(::isatty(STDERR_FILENO) != 0), quiet_lines_(quiet_lines) {}

  void done(const PrewarmResult& r) {
    ++finished_;
    if (!r.ok) ++failed_;
    else if (r.source == Source::compiled) ++compiled_;
    else ++cached_;
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(kWidth * finished_ / std::max<std::size_t>(total_, 1));
      fmt::print(stderr, "\r\033[K[{:=<{}}{:<{}}] {}/{}  compiled {}  cached {}  failed {}  {}", "",
                 filled, "", kWidth - filled, finished_, total_, compiled_, cached_, failed_,
                 spec_label(r));
      if (finished_ == total_) fmt::print(stderr, "\n");
    } else if (!quiet_lines_) {
      fmt::print(stderr, "[{}/{}] {:<8} {} ({:.2f} s)\n", finished_, total_, status_of(r), spec_label(r),
                 r.seconds);
    }
    std::fflush(stderr);
  }

 private:
  std::size_t total_, finished_ = 0, compiled_ = 0, cached_ = 0, failed_ = 0;
  bool tty_, quiet_lines_;
};

int run_prewarm(const GlobalFlags& flags, const PrewarmArgs& args) {
  const Options options = make_options(flags);
  const SpecSet set = collect_specs(args, options);
  for (const auto& message : set.skipped) fmt::print(stderr, "skipped (invalid): {}\n", message);
  if (set.specs.empty()) throw UsageError("no valid specs to prewarm");

  const int workers = args.jobs > 0 ? args.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Engine engine(options);
  Progress progress(set.specs.size(), flags.json);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<PrewarmResult> results =
      engine.prewarm(set.specs, workers, [&progress](const PrewarmResult& r) { progress.done(r); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::size_t compiled = 0, cached = 0, failed = 0;
  double compile_seconds = 0, slowest = 0;
  std::string slowest_name;
  for (const auto& r : results) {
    if (!r.ok) {
      ++failed;
      continue;
    }
    if (r.source != Source::compiled) {
      ++cached;
      continue;
    }
    ++compiled;
    compile_seconds += r.seconds;
    if (r.seconds > slowest) slowest = r.seconds, slowest_name = r.name;
  }

  if (flags.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json item = {{"name", spec_label(r)}, {"status", status_of(r)}, {"seconds", r.seconds}};
      if (!r.ok) item["error"] = r.error;
      list.push_back(std::move(item));
    }
    print_json({{"results", list}, {"compiled", compiled}, {"cached", cached}, {"failed", failed},
                {"skipped", set.skipped}, {"jobs", workers}, {"seconds", seconds}});
  } else {
    fmt::print("prewarm: {} specs in {:.2f} s over {} worker{}: {} compiled, {} already cached, {} failed\n",
               results.size(), seconds, workers, workers == 1 ? "" : "s", compiled, cached, failed);
    if (compiled > 0)
      fmt::print("  per compiled spec: {:.2f} s mean, {:.2f} s slowest ({}); {:.1f} specs/minute\n",
                 compile_seconds / compiled, slowest, slowest_name, 60.0 * compiled / std::max(seconds, 1e-9));
    if (!set.skipped.empty()) fmt::print("  {} invalid combinations skipped\n", set.skipped.size());
  }
  for (const auto& r : results)
    if (!r.ok) fmt::print(stderr, "xqajit: prewarm failed for {}: {}\n", spec_label(r), r.error);
  return failed > 0 ? 1 : 0;
}

}  // namespace

void add_prewarm_command(CLI::App& app, GlobalFlags& flags, int& exit_code) {
  auto args = std::make_shared<PrewarmArgs>();
  CLI::App* cmd = app.add_subcommand(
      "prewarm", "Compile every spec of a set that is not cached yet, in parallel (no GPU needed)");
  cmd->add_option("-j,--jobs", args->jobs, "Worker threads (default: the number of cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--skip-invalid", args->skip_invalid,
                "Report and skip invalid combinations of a product instead of failing");
  cmd->add_option("--spec-file", args->spec_file,
                  "JSON list of objects with the CLI's field names; any value may be a list (cartesian product)")
      ->type_name("FILE");
  cmd->add_option("--preset", args->preset,
                  fmt::format("A built-in set: {} (archs from arch=..., else the current GPU)",
                              fmt::join(preset_names(), ", ")))
      ->type_name("NAME");
  cmd->add_option("fields", args->fields, "FIELD=VALUE[,VALUE...]: a product, or overrides for a file or preset")
      ->type_name("FIELD=VALUE");
  cmd->footer(
      "Examples:\n"
      "  xqajit prewarm --preset serving-gqa arch=sm_90a,sm_120a\n"
      "  xqajit prewarm --jobs 4 input=fp16,bf16 head_dim=64,128 group=1,8 arch=sm_90a\n"
      "  xqajit prewarm --spec-file specs.json --skip-invalid --json");
  cmd->callback([&flags, &exit_code, args] { exit_code = run_prewarm(flags, *args); });
}

}  // namespace xqajit::cli
