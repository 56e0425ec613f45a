#pragma once
// Helpers shared by the CLI's subcommands: FIELD=VALUE parsing, the default arch
// from the current GPU, output in text or JSON, and the usage error type.

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/spec/spec.hpp"
#include "xqajit/spec/spec_set.hpp"

namespace xqajit::cli {

/// A mistake in how the command was called (not in the spec): exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The best arch of CUDA device 0, when libcuda loads and a device is visible.
/// Never throws: any trouble means "no GPU to default to".
std::optional<Arch> current_gpu_arch(const Options& options);

/// A spec from the command line: a single canonical NAME, or FIELD=VALUE
/// arguments in any order (arch defaults to the current GPU's). Throws
/// SpecError for bad values and UsageError for malformed arguments.
KernelSpec spec_from_args(const std::vector<std::string>& args, const Options& options);

/// The "FIELD=VALUE... | NAME" help text of commands that take a spec.
std::string spec_args_help();

/// Prints `value` as one line of JSON on stdout.
void print_json(const nlohmann::json& value);

/// doctor's view of the remote tier: configured, reachable, latency, entries of
/// this fingerprint, or the error. Never throws.
nlohmann::json probe_remote(const Options& options, const std::string& fingerprint);
/// doctor's text lines for probe_remote's result.
void print_remote_text(const nlohmann::json& remote);

/// Human-readable byte count: "1.5 MiB".
std::string human_bytes(std::uint64_t bytes);

/// Spec sets are products: refuses (UsageError) a set of more than `max_specs`
/// specs, naming the count and the fields that multiply it (--max-specs raises it).
void refuse_large_spec_set(std::size_t count, std::size_t max_specs, const std::vector<FieldProduct>& products);
constexpr std::size_t kDefaultMaxSpecs = 4096;

/// The spec-set arguments `prewarm` and `tune` share: --spec-file, --preset,
/// --max-specs and FIELD=VALUE[,VALUE...] (a product, or overrides for a file
/// or preset; for a preset, arch= picks the archs it is built for).
struct SpecSetArgs {
  std::string spec_file, preset;
  std::vector<std::string> fields;
  bool skip_invalid = false;
  std::size_t max_specs = kDefaultMaxSpecs;
};
/// Registers the shared options on `cmd` (not --skip-invalid: each command decides).
void add_spec_set_options(CLI::App* cmd, SpecSetArgs& args);
/// Expands the set (arch defaults to the current GPU's) and refuses an
/// exploding one. `verb` names the command in messages ("prewarm", "tune").
SpecSet collect_spec_set(const SpecSetArgs& args, const Options& options, const std::string& verb);

/// Progress on stderr: a redrawn bar on a terminal, plain lines otherwise.
class ProgressBar {
 public:
  explicit ProgressBar(std::size_t total);
  /// One more item done: `status` follows the bar on a terminal; `line` is
  /// printed otherwise (nothing when empty).
  void step(const std::string& status, const std::string& line);
  /// Redraws the bar with a new status without counting an item (terminals only).
  void note(const std::string& status);
  bool tty() const { return tty_; }

 private:
  void draw(const std::string& status);
  std::size_t total_, done_ = 0;
  bool tty_;
};

/// Compiles (or finds) `specs` over `processes` `xqajit prewarm-worker`
/// processes; Engine::prewarm's contract (cmd_prewarm.cpp).
std::vector<PrewarmResult> prewarm_in_processes(const GlobalFlags& flags, const std::vector<KernelSpec>& specs,
                                                int processes,
                                                const std::function<void(const PrewarmResult&)>& on_done);

}  // namespace xqajit::cli
