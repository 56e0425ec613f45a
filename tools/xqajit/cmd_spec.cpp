// `xqajit spec` (name + flags of a spec, no compiler needed) and
// `xqajit compile` (the cubin through the engine: memory, bundle, disk or NVRTC).

#include <fmt/format.h>

#include <memory>

#include "cli_common.hpp"
#include "xqajit/runtime/engine.hpp"

namespace xqajit::cli {
namespace {

nlohmann::json fields_json(const KernelSpec& spec) {
  nlohmann::json fields = nlohmann::json::object();
  for (const auto& [field, value] : spec_to_fields(spec)) fields[field] = value;
  return fields;
}

void run_spec(const GlobalFlags& flags, const std::vector<std::string>& args) {
  const KernelSpec spec = spec_from_args(args, make_options(flags));
  const std::string name = canonical_name(spec);
  const std::vector<std::string> spec_flags = xqajit::flags(spec);
  // Every kernel a launch of this spec may use (backend=auto GQA on sm_90a picks per
  // call): what prewarm and bundle pack compile for it.
  std::vector<std::string> kernels;
  for (const KernelSpec& k : launch_variants({spec})) kernels.push_back(canonical_name(k));
  if (flags.json) {
    print_json({{"name", name}, {"flags", spec_flags}, {"fields", fields_json(spec)}, {"kernels", kernels}});
    return;
  }
  // The name alone on the first line, so `xqajit spec ... | head -1` is the name.
  fmt::print("{}\n", name);
  fmt::print("  flags:  {}\n", fmt::join(spec_flags, " "));
  std::vector<std::string> pairs;
  const auto fields = spec_to_fields(spec);
  for (const std::string& field : spec_field_names()) {
    if (auto it = fields.find(field); it != fields.end()) pairs.push_back(field + "=" + it->second);
  }
  fmt::print("  fields: {}\n", fmt::join(pairs, " "));
  if (kernels.size() > 1)
    fmt::print("  launches may use (prewarm compiles each): {}\n", fmt::join(kernels, " "));
}

void run_compile(const GlobalFlags& flags, const std::vector<std::string>& args) {
  const Options options = make_options(flags);
  const KernelSpec spec = spec_from_args(args, options);
  Engine engine(options);
  const CubinRef ref = engine.cubin(spec);
  const std::size_t bytes = ref.cubin ? ref.cubin->size() : 0;
  if (flags.json) {
    print_json({{"name", ref.name},
                {"status", to_string(ref.source)},
                {"path", ref.path.string()},
                {"cubin_bytes", bytes},
                {"seconds", ref.seconds}});
    return;
  }
  fmt::print("{:<8} {}  ({} bytes, {:.3f} s)\n", to_string(ref.source), ref.name, bytes, ref.seconds);
  if (!ref.path.empty())
    fmt::print("  at {}\n", ref.path.string());
  else
    fmt::print("  in memory only (the disk cache is off or cannot be written)\n");
}

// Positional spec arguments; "--json" etc. after them fall through to the app.
void add_spec_arguments(CLI::App* cmd, std::vector<std::string>& args) {
  cmd->add_option("FIELD=VALUE|NAME", args, "The spec: FIELD=VALUE... or one canonical NAME")->required();
  cmd->footer("SPEC: " + spec_args_help());
}

}  // namespace

void add_spec_commands(CLI::App& app, GlobalFlags& flags, int& exit_code) {
  auto spec_args = std::make_shared<std::vector<std::string>>();
  CLI::App* spec = app.add_subcommand("spec", "Print a spec's canonical name and compiler flags");
  add_spec_arguments(spec, *spec_args);
  spec->callback([&flags, &exit_code, spec_args] {
    run_spec(flags, *spec_args);
    exit_code = 0;
  });

  auto compile_args = std::make_shared<std::vector<std::string>>();
  CLI::App* compile = app.add_subcommand(
      "compile", "Get a spec's cubin (memory, bundle, disk cache or NVRTC) and report where from");
  add_spec_arguments(compile, *compile_args);
  compile->callback([&flags, &exit_code, compile_args] {
    run_compile(flags, *compile_args);
    exit_code = 0;
  });
}

}  // namespace xqajit::cli
