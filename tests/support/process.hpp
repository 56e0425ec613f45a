#pragma once
// Runs programs the way a user would (fork + exec), capturing stdout, stderr and
// the exit code, for tests of the CLI and of cross-process behaviour.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace xqajit::test {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number when killed by a signal
  std::string out;     // stdout
  std::string err;     // stderr
  /// "exit 2; stderr: ..." for assertion messages.
  std::string describe() const;
};

/// Environment changes for a child: a value sets the variable, nullopt unsets it.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

/// Runs argv[0] (searched in PATH when it has no '/') with argv, waits, and
/// returns what it printed. Throws std::runtime_error if it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv, const EnvChanges& env = {});

/// Starts every command, then releases them at once (each child waits on a
/// shared gate before exec, so they really overlap), and waits for all.
/// Results are in the order of `commands`.
std::vector<ProcessResult> run_processes_concurrently(const std::vector<std::vector<std::string>>& commands,
                                                      const EnvChanges& env = {});

/// The xqajit CLI built with these tests (XQAJIT_CLI_PATH), run like a shell
/// line: `env` ("K=V K2=V2") and `args` are split on spaces, which the tests'
/// temp paths never contain. Logs the command and its output for failing checks.
ProcessResult run_cli_line(const std::string& env, const std::string& args);

}  // namespace xqajit::test
