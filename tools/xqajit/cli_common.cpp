// make_options() and the helpers the subcommands share (see cli_common.hpp).

#include "cli_common.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "xqajit/runtime/driver.hpp"
#include "xqajit/error.hpp"

namespace xqajit::cli {

Options make_options(const GlobalFlags& flags) {
  Options options = Options::from_env();
  if (!flags.cache_dir.empty()) options.cache_dir = flags.cache_dir;
  if (flags.no_compile) options.no_compile = true;
  if (!flags.remote_cache.empty()) options.remote_cache = flags.remote_cache;
  // --bundle adds to XQAJIT_BUNDLES, ahead of it: what the command line names wins.
  std::vector<std::filesystem::path> bundles(flags.bundles.begin(), flags.bundles.end());
  bundles.insert(bundles.end(), options.bundles.begin(), options.bundles.end());
  options.bundles = std::move(bundles);
  return options;
}

std::optional<Arch> current_gpu_arch(const Options& options) {
  try {
    if (!Driver::available(options.libcuda_path)) return std::nullopt;
    Driver& driver = Driver::instance(options.libcuda_path);
    if (driver.device_count() <= 0) return std::nullopt;
    return driver.device(0).best_arch();
  } catch (const std::exception&) {
    return std::nullopt;  // a broken driver install is doctor's business, not spec's
  }
}

KernelSpec spec_from_args(const std::vector<std::string>& args, const Options& options) {
  if (args.empty()) throw UsageError("expected a spec: " + spec_args_help());
  if (args.size() == 1 && looks_like_name(args[0])) return parse_name(args[0]);

  std::map<std::string, std::string> fields;
  for (const std::string& arg : args) {
    const auto eq = arg.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UsageError(
          fmt::format("'{}' is not FIELD=VALUE (a canonical NAME must be the only argument); fields: {}", arg,
                      fmt::join(spec_field_names(), ", ")));
    }
    const std::string field = arg.substr(0, eq);
    if (!fields.emplace(field, arg.substr(eq + 1)).second)
      throw UsageError(fmt::format("field '{}' is given twice", field));
  }
  // Resolve the GPU only when needed: it costs a cuInit.
  std::optional<Arch> gpu_arch;
  if (fields.count("arch") == 0) gpu_arch = current_gpu_arch(options);
  return spec_from_fields(fields, gpu_arch ? &*gpu_arch : nullptr);
}

std::string spec_args_help() {
  return fmt::format(
      "a canonical NAME (e.g. gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t128_portable_sm90a) or FIELD=VALUE "
      "arguments in any order; fields: {}. Defaults: kind=gqa, kv=input, output=input, q_len=1, "
      "sliding_window=0, arch=the current GPU's (required without a GPU)",
      fmt::join(spec_field_names(), ", "));
}

void print_json(const nlohmann::json& value) {
  const std::string text = value.dump();
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string human_bytes(std::uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

void refuse_large_spec_set(std::size_t count, std::size_t max_specs, const std::vector<FieldProduct>& products) {
  if (count <= max_specs) return;
  std::map<std::string, std::size_t> widest;
  for (const auto& p : products)
    for (const auto& [field, values] : p)
      if (values.size() > 1) widest[field] = std::max(widest[field], values.size());
  std::vector<std::string> parts;
  for (const auto& [field, n] : widest) parts.push_back(fmt::format("{} x{}", field, n));
  throw UsageError(fmt::format("the spec set expands to {} specs, more than {} (fields that multiply it: {}); "
                               "narrow it or raise --max-specs",
                               count, max_specs, parts.empty() ? std::string("none") : fmt::format("{}", fmt::join(parts, ", "))));
}

void add_spec_set_options(CLI::App* cmd, SpecSetArgs& args) {
  cmd->add_option("--max-specs", args.max_specs, "Refuse a spec set larger than this (default 4096)");
  cmd->add_option(
         "--spec-file", args.spec_file,
         "JSON list of objects with the CLI's field names; any value may be a list (cartesian product)")
      ->type_name("FILE");
  cmd->add_option("--preset", args.preset,
                  fmt::format("A built-in set: {} (archs from arch=..., else the current GPU)",
                              fmt::join(preset_names(), ", ")))
      ->type_name("NAME");
  cmd->add_option("fields", args.fields, "FIELD=VALUE[,VALUE...]: a product, or overrides for a file or preset")
      ->type_name("FIELD=VALUE");
}

SpecSet collect_spec_set(const SpecSetArgs& args, const Options& options, const std::string& verb) {
  if (!args.spec_file.empty() && !args.preset.empty()) throw UsageError("give --spec-file or --preset, not both");
  if (args.spec_file.empty() && args.preset.empty() && args.fields.empty())
    throw UsageError(fmt::format("nothing to {}: give --spec-file FILE, --preset NAME ({}) or FIELD=VALUE[,VALUE...]",
                                 verb, fmt::join(preset_names(), ", ")));
  FieldProduct overrides = parse_field_args(args.fields);
  ExpandOptions expand_options;
  expand_options.skip_invalid = args.skip_invalid;
  std::optional<Arch> gpu_arch;  // asked for only when needed (costs a cuInit)
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
  const bool need_default_arch = std::any_of(products.begin(), products.end(),
                                             [](const FieldProduct& p) { return p.count("arch") == 0; });
  if (need_default_arch && !gpu_arch) gpu_arch = current_gpu_arch(options);
  if (gpu_arch) expand_options.default_arch = &*gpu_arch;
  SpecSet set = expand(products, expand_options);
  refuse_large_spec_set(set.specs.size(), args.max_specs, products);
  return set;
}

ProgressBar::ProgressBar(std::size_t total) : total_(total), tty_(::isatty(STDERR_FILENO) != 0) {}

void ProgressBar::draw(const std::string& status) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done_ / std::max<std::size_t>(total_, 1));
  fmt::print(stderr, "\r\033[K[{:=<{}}{:<{}}] {}/{}  {}", "", filled, "", kWidth - filled, done_, total_, status);
  std::fflush(stderr);
}

void ProgressBar::step(const std::string& status, const std::string& line) {
  ++done_;
  if (tty_) {
    draw(status);
    if (done_ == total_) fmt::print(stderr, "\n");
  } else if (!line.empty()) {
    fmt::print(stderr, "[{}/{}] {}\n", done_, total_, line);
  }
  std::fflush(stderr);
}

void ProgressBar::note(const std::string& status) {
  if (tty_) draw(status);
}

}  // namespace xqajit::cli
