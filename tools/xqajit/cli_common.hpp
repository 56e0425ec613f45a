#pragma once
// Helpers shared by the CLI's subcommands: FIELD=VALUE parsing, the default arch
// from the current GPU, output in text or JSON, and the usage error type.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "xqajit/spec.hpp"
#include "xqajit/spec_set.hpp"

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

}  // namespace xqajit::cli
