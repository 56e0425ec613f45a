// xqajit: the command line over libxqajit. Parses, runs one subcommand, and maps
// exceptions to one actionable line on stderr and an exit code:
//   0 ok, 2 usage or spec error, 1 any other failure (compile, driver, I/O, ...).

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"
#include "cli_common.hpp"
#include "xqajit/error.hpp"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

void print_error(const std::string& message) { fmt::print(stderr, "xqajit: error: {}\n", message); }

// A compile error gets everything needed to reproduce it: the options and the full log.
void print_compile_error(const xqajit::CompileError& e) {
  print_error(e.what());
  fmt::print(stderr, "  spec:    {}\n  options: {}\n", e.spec_name(), fmt::join(e.options(), " "));
  const std::string what = e.what();
  if (!e.log().empty() && what.find(e.log()) == std::string::npos)
    fmt::print(stderr, "  NVRTC log:\n{}\n", e.log());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace xqajit::cli;
  CLI::App app{
      "xqajit: runtime JIT compiler and cache for decode-attention kernels.\n"
      "Kernels come from memory, bundles, the disk cache, a remote cache, or NVRTC, in that order."};
  // Global flags are accepted after the subcommand too (xqajit compile --json ...).
  app.fallthrough();
  app.require_subcommand(1);

  GlobalFlags flags;
  app.add_option("--cache-dir", flags.cache_dir,
                 "Cache root (default: XQAJIT_CACHE_DIR, else $XDG_CACHE_HOME/xqajit, else ~/.cache/xqajit)")
      ->type_name("DIR");
  app.add_flag("--json", flags.json, "Machine-readable output: one JSON document on stdout");
  app.add_flag("--no-compile", flags.no_compile,
               "Never run NVRTC: kernels must come from a bundle or the cache (XQAJIT_NO_COMPILE=1)");
  app.add_option("--bundle", flags.bundles, "A bundle file or folder of bundles, searched first (repeatable)")
      ->type_name("FILE")
      ->allow_extra_args(false);
  app.add_option("--remote-cache", flags.remote_cache,
                 "Shared cache tier on Redis: redis://[user:password@]host[:port][/db] (XQAJIT_REMOTE_CACHE)")
      ->type_name("URL");

  int exit_code = 0;
  add_spec_commands(app, flags, exit_code);
  add_cache_commands(app, flags, exit_code);
  add_prewarm_command(app, flags, exit_code);
  add_bundle_commands(app, flags, exit_code);
  add_remote_commands(app, flags, exit_code);
  add_tune_command(app, flags, exit_code);

  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback
    return exit_code;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty() && !app.remaining().empty()) {
      // CLI11 would only say "A subcommand is required"; name the word it did not know.
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
      print_error(fmt::format("unknown subcommand '{}'; subcommands: {}", app.remaining().front(),
                              fmt::join(names, ", ")));
      return kExitUsage;
    }
    app.exit(e);  // prints the parser's message and the --help hint
    return kExitUsage;
  } catch (const UsageError& e) {
    print_error(e.what());
    fmt::print(stderr, "Run with --help for more information.\n");
    return kExitUsage;
  } catch (const xqajit::SpecError& e) {
    print_error(e.what());
    return kExitUsage;
  } catch (const xqajit::CompileError& e) {
    print_compile_error(e);
    return kExitFailure;
  } catch (const std::exception& e) {
    // LibraryError, NotAvailableError, CudaError, BundleError, CacheError, I/O...
    print_error(e.what());
    return kExitFailure;
  }
}
