#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace xqajit::test {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A child's output goes to temp files (removed afterwards) rather than pipes, so
// a chatty child can never block on a full pipe while we wait for another one.
struct Capture {
  std::string out_path, err_path;
  int out_fd = -1, err_fd = -1;

  Capture() {
    out_fd = make_temp(out_path, "out");
    err_fd = make_temp(err_path, "err");
  }
  ~Capture() {
    close_fds();
    ::unlink(out_path.c_str());
    ::unlink(err_path.c_str());
  }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  void close_fds() {
    if (out_fd >= 0) ::close(out_fd);
    if (err_fd >= 0) ::close(err_fd);
    out_fd = err_fd = -1;
  }

 private:
  static int make_temp(std::string& path, const char* what) {
    std::string pattern = (std::filesystem::temp_directory_path() / "xqajit-proc-XXXXXX").string() + what;
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    const int fd = ::mkostemps(buffer.data(), static_cast<int>(std::strlen(what)), O_CLOEXEC);
    if (fd < 0)
      throw std::runtime_error("cannot create a temp file for a child's output: " +
                               std::string(std::strerror(errno)));
    path = buffer.data();
    return fd;
  }
};

// Everything exec needs, built before fork: the child may only make async-signal-safe calls.
struct ExecImage {
  std::vector<std::string> args, env;
  std::vector<char*> argv, envp;

  ExecImage(const std::vector<std::string>& command, const EnvChanges& changes) : args(command) {
    if (args.empty()) throw std::runtime_error("run_process: empty command");
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string key = entry.substr(0, entry.find('='));
      if (changes.count(key) == 0) env.push_back(entry);
    }
    for (const auto& [key, value] : changes)
      if (value) env.push_back(key + "=" + *value);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

// Forks a child that waits until `gate_fd` reaches EOF (or -1: no gate), then execs.
pid_t start_child(const ExecImage& image, const Capture& capture, int gate_fd, int gate_write_fd) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    if (gate_write_fd >= 0) ::close(gate_write_fd);
    if (gate_fd >= 0) {
      char byte;
      for (;;) {
        const ssize_t n = ::read(gate_fd, &byte, 1);
        if (n > 0 || (n < 0 && errno == EINTR)) continue;
        break;  // EOF: the parent released the gate
      }
      ::close(gate_fd);
    }
    ::dup2(capture.out_fd, STDOUT_FILENO);
    ::dup2(capture.err_fd, STDERR_FILENO);
    ::execvpe(image.argv[0], image.argv.data(), image.envp.data());
    const char msg[] = "run_process: exec failed\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed: " + std::string(std::strerror(errno)));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string ProcessResult::describe() const {
  std::ostringstream text;
  text << "exit " << exit_code << "\n--- stdout ---\n" << out << "\n--- stderr ---\n" << err;
  return text.str();
}

ProcessResult run_process(const std::vector<std::string>& argv, const EnvChanges& env) {
  return run_processes_concurrently({argv}, env).at(0);
}

std::vector<ProcessResult> run_processes_concurrently(const std::vector<std::vector<std::string>>& commands,
                                                      const EnvChanges& env) {
  std::vector<ExecImage> images;
  std::vector<std::unique_ptr<Capture>> captures;
  for (const auto& command : commands) {
    images.emplace_back(command, env);
    captures.push_back(std::make_unique<Capture>());
  }
  int gate[2];
  if (::pipe2(gate, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe failed: " + std::string(std::strerror(errno)));

  std::vector<pid_t> pids;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    try {
      pids.push_back(start_child(images[i], *captures[i], gate[0], gate[1]));
    } catch (...) {
      ::close(gate[1]);  // release the children already started, then reap them
      for (pid_t pid : pids) wait_exit_code(pid);
      ::close(gate[0]);
      throw;
    }
  }
  ::close(gate[0]);
  ::close(gate[1]);  // EOF on the gate: every child execs now

  std::vector<ProcessResult> results(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    results[i].exit_code = wait_exit_code(pids[i]);
    captures[i]->close_fds();
    results[i].out = read_file(captures[i]->out_path);
    results[i].err = read_file(captures[i]->err_path);
  }
  return results;
}

namespace {

std::vector<std::string> split_spaces(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

ProcessResult run_cli_line(const std::string& env, const std::string& args) {
  EnvChanges changes;
  for (const auto& assignment : split_spaces(env)) {
    const auto eq = assignment.find('=');
    if (eq == std::string::npos) throw std::runtime_error("run_cli_line: not K=V: " + assignment);
    changes[assignment.substr(0, eq)] = assignment.substr(eq + 1);
  }
  std::vector<std::string> argv = {XQAJIT_CLI_PATH};
  for (auto& a : split_spaces(args)) argv.push_back(std::move(a));
  ProcessResult r = run_process(argv, changes);
  UNSCOPED_INFO("$ " << env << " xqajit " << args << "\n" << r.describe() << "\nstdout: " << r.out);
  return r;
}

}  // namespace xqajit::test
