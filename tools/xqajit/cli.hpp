#pragma once
// Shared pieces of the xqajit CLI. Each cmd_*.cpp adds its subcommands to the
// app; main.cpp parses, runs, and maps exceptions to messages and exit codes.

#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

#include "xqajit/runtime/options.hpp"

namespace xqajit::cli {

/// Flags every subcommand understands.
struct GlobalFlags {
  std::string cache_dir;             // --cache-dir
  bool json = false;                 // --json
  bool no_compile = false;           // --no-compile
  std::vector<std::string> bundles;  // --bundle FILE (repeatable), added to XQAJIT_BUNDLES
  std::string remote_cache;          // --remote-cache URL (XQAJIT_REMOTE_CACHE)
};

/// Options::from_env() with the global flags applied on top.
Options make_options(const GlobalFlags& flags);

/// Each registers its subcommands; the callback stores the process exit code.
void add_spec_commands(CLI::App& app, GlobalFlags& flags, int& exit_code);     // spec, compile
void add_cache_commands(CLI::App& app, GlobalFlags& flags, int& exit_code);    // list, clear, gc, doctor
void add_prewarm_command(CLI::App& app, GlobalFlags& flags, int& exit_code);   // prewarm
void add_bundle_commands(CLI::App& app, GlobalFlags& flags, int& exit_code);   // bundle pack/list/verify/unpack
void add_remote_commands(CLI::App& app, GlobalFlags& flags, int& exit_code);   // remote list/clear
void add_tune_command(CLI::App& app, GlobalFlags& flags, int& exit_code);      // tune

}  // namespace xqajit::cli
