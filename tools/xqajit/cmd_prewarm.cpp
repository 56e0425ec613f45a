// `xqajit prewarm`: compile a set of specs into the cache ahead of traffic, in
// parallel, so that no request waits for NVRTC.
//
// Parallelism comes from worker processes (hidden `xqajit prewarm-worker`), not
// threads: NVRTC 13.0 serialises compiles within one process (measured on a
// 16-core host: 192 specs take the same ~5 s over 1 or 16 threads, and ~1.1 s
// over 8 processes). The disk cache's per-entry lock keeps processes from
// compiling a spec twice. `--threads` keeps the in-process Engine::prewarm.

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli.hpp"
#include "cli_common.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/spec/spec_set.hpp"

namespace xqajit::cli {
namespace {

struct PrewarmArgs {
  int jobs = 0;
  bool threads = false;  // in-process threads instead of worker processes
  SpecSetArgs set;       // --spec-file, --preset, FIELD=VALUE, --max-specs, --skip-invalid
};

/// A result's spec name; a failed spec may have none (e.g. an arch NVRTC cannot target).
std::string spec_label(const PrewarmResult& r) {
  if (!r.name.empty()) return r.name;
  try {
    return canonical_name(r.spec);
  } catch (const std::exception&) {
    return fmt::format("{} {} kv={} d{} p{} g{} {}", to_string(r.spec.kind), to_string(r.spec.input),
                       to_string(r.spec.kv), r.spec.head_dim, r.spec.page_size, r.spec.group,
                       r.spec.arch.str());
  }
}

std::string status_of(const PrewarmResult& r) { return r.ok ? to_string(r.source) : "failed"; }

/// Progress on stderr: the shared bar on a terminal, one plain line per spec otherwise.
class Progress {
 public:
  Progress(std::size_t total, bool quiet_lines) : bar_(total), quiet_lines_(quiet_lines) {}

  void done(const PrewarmResult& r) {
    if (!r.ok)
      ++failed_;
    else if (r.source == Source::compiled)
      ++compiled_;
    else
      ++cached_;
    const std::string status =
        fmt::format("compiled {}  cached {}  failed {}  {}", compiled_, cached_, failed_, spec_label(r));
    bar_.step(status, quiet_lines_ ? std::string()
                                   : fmt::format("{:<8} {} ({:.2f} s)", status_of(r), spec_label(r), r.seconds));
  }

 private:
  ProgressBar bar_;
  std::size_t compiled_ = 0, cached_ = 0, failed_ = 0;
  bool quiet_lines_;
};

// ---- worker processes ----------------------------------------------------------

Source parse_source(const std::string& status) {
  if (status == "compiled") return Source::compiled;
  if (status == "disk") return Source::disk;
  if (status == "bundle") return Source::bundle;
  if (status == "remote") return Source::remote;
  return Source::memory;
}

/// One `xqajit prewarm-worker`: reads "INDEX NAME" lines on stdin, answers one
/// JSON line per spec on stdout, exits at end of input.
struct Worker {
  pid_t pid = -1;
  int to = -1, from = -1;  // its stdin, its stdout
  std::string buffer;      // stdout bytes not yet split into lines
  long pending = -1;       // the spec index it is working on
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

Worker spawn_worker(const GlobalFlags& flags) {
  // The child gets the global flags again; the environment is inherited.
  std::vector<std::string> args = {"xqajit"};
  if (!flags.cache_dir.empty()) args.insert(args.end(), {"--cache-dir", flags.cache_dir});
  if (flags.no_compile) args.push_back("--no-compile");
  for (const auto& b : flags.bundles) args.insert(args.end(), {"--bundle", b});
  if (!flags.remote_cache.empty()) args.insert(args.end(), {"--remote-cache", flags.remote_cache});
  args.push_back("prewarm-worker");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw xqajit::Error("prewarm: cannot create a pipe for a worker process");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]);
    throw xqajit::Error("prewarm: cannot create a pipe for a worker process");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);  // dup2 clears CLOEXEC
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  Worker w;
  const int rc = ::posix_spawn(&w.pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]), ::close(out[1]);
  w.to = in[1], w.from = out[0];
  if (rc != 0) {
    close_fd(w.to), close_fd(w.from);
    throw xqajit::Error(fmt::format("prewarm: cannot start a worker process: {}", std::strerror(rc)));
  }
  return w;
}

}  // namespace

/// Engine::prewarm's contract, over worker processes: every spec gets a result,
/// on_done is called once per spec (from this thread), a dead worker fails only
/// the spec it was on.
std::vector<PrewarmResult> prewarm_in_processes(const GlobalFlags& flags,
                                                const std::vector<KernelSpec>& specs, int processes,
                                                const std::function<void(const PrewarmResult&)>& on_done) {
  std::vector<PrewarmResult> results(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i)
    results[i].spec = specs[i], results[i].name = canonical_name(specs[i]);
  std::vector<bool> finished(specs.size(), false);
  auto finish = [&](std::size_t i) {
    finished[i] = true;
    if (on_done) on_done(results[i]);
  };
  std::size_t next = 0;
  auto feed = [&](Worker& w) {
    w.pending = -1;
    if (next >= specs.size()) return close_fd(w.to);  // end of input: the worker exits
    const std::string line = fmt::format("{} {}\n", next, results[next].name);
    w.pending = static_cast<long>(next++);
    // A short write means the worker died; its stdout's EOF reports that.
    (void)!::write(w.to, line.data(), line.size());
  };

  const auto old_sigpipe = std::signal(SIGPIPE, SIG_IGN);  // a dead worker must not kill us
  std::vector<Worker> workers;
  for (int i = 0; i < processes && static_cast<std::size_t>(i) < specs.size(); ++i)
    workers.push_back(spawn_worker(flags));
  for (auto& w : workers) feed(w);

  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Worker*> owners;
    for (auto& w : workers)
      if (w.from >= 0) fds.push_back({w.from, POLLIN, 0}), owners.push_back(&w);
    if (fds.empty()) break;
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Worker& w = *owners[k];
      char chunk[4096];
      const ssize_t n = ::read(w.from, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // the worker exited
        close_fd(w.from), close_fd(w.to);
        int status = 0;
        ::waitpid(w.pid, &status, 0);
        if (w.pending >= 0) {
          PrewarmResult& r = results[static_cast<std::size_t>(w.pending)];
          r.error = WIFSIGNALED(status) ? fmt::format("worker process died of signal {}", WTERMSIG(status))
                                        : fmt::format("worker process exited with {}", WEXITSTATUS(status));
          finish(static_cast<std::size_t>(w.pending));
        }
        continue;
      }
      w.buffer.append(chunk, static_cast<std::size_t>(n));
      for (std::size_t eol; (eol = w.buffer.find('\n')) != std::string::npos;) {
        const std::string line = w.buffer.substr(0, eol);
        w.buffer.erase(0, eol + 1);
        const auto doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!doc.is_object() || !doc.contains("index")) continue;  // not ours: ignore
        const auto i = doc["index"].get<std::size_t>();
        if (i >= results.size() || finished[i]) continue;
        PrewarmResult& r = results[i];
        const std::string status = doc.value("status", "failed");
        r.ok = status != "failed";
        r.source = parse_source(status);
        r.seconds = doc.value("seconds", 0.0);
        r.error = doc.value("error", "");
        finish(i);
        feed(w);
      }
    }
  }
  std::signal(SIGPIPE, old_sigpipe);
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (!finished[i]) results[i].error = "not run: every worker process exited", finish(i);
  return results;
}

namespace {

int run_worker(const GlobalFlags& flags) {
  Engine engine(make_options(flags));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream fields(line);
    std::size_t index = 0;
    std::string name;
    if (!(fields >> index >> name)) continue;
    nlohmann::json out = {{"index", index}};
    const auto start = std::chrono::steady_clock::now();
    try {
      out["status"] = to_string(engine.cubin(parse_name(name)).source);
    } catch (const std::exception& e) {
      out["status"] = "failed";
      out["error"] = e.what();
    }
    out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    print_json(out);  // one line, flushed
  }
  return 0;
}

int run_prewarm(const GlobalFlags& flags, const PrewarmArgs& args) {
  const Options options = make_options(flags);
  SpecSet set = collect_spec_set(args.set, options, "prewarm");
  for (const auto& message : set.skipped) fmt::print(stderr, "skipped (invalid): {}\n", message);
  if (set.specs.empty()) throw UsageError("no valid specs to prewarm");
  // Every kernel a launch may use: each backend an auto spec's plan picks from
  // (GQA on sm_90a runs both), and the variants the tuning table chose for them,
  // so no launch -- tuned or not -- compiles.
  Engine engine(options);
  set.specs = launch_variants(set.specs);
  const std::size_t requested = set.specs.size();
  set.specs = engine.prewarm_specs(set.specs);
  const std::size_t tuned_variants = set.specs.size() - requested;

  const int workers = static_cast<int>(std::min<std::size_t>(
      set.specs.size(), args.jobs > 0 ? args.jobs : std::max(1u, std::thread::hardware_concurrency())));
  // Worker processes need the disk cache to hand their cubins on; without it,
  // or for one worker, stay in this process.
  const bool use_processes = !args.threads && workers > 1 && set.specs.size() > 1 && options.disk_cache;
  Progress progress(set.specs.size(), flags.json);
  auto on_done = [&progress](const PrewarmResult& r) { progress.done(r); };
  const auto start = std::chrono::steady_clock::now();
  std::vector<PrewarmResult> results;
  if (use_processes) {
    results = prewarm_in_processes(flags, set.specs, workers, on_done);
  } else {
    results = engine.prewarm(set.specs, workers, on_done);  // adds nothing more: variants are in
  }
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
    print_json({{"results", list},
                {"compiled", compiled},
                {"cached", cached},
                {"failed", failed},
                {"skipped", set.skipped},
                {"tuned_variants", tuned_variants},
                {"jobs", workers},
                {"workers", use_processes ? "processes" : "threads"},
                {"seconds", seconds}});
  } else {
    const char* unit = use_processes ? (workers == 1 ? "worker process" : "worker processes")
                                     : (workers == 1 ? "thread" : "threads");
    fmt::print("prewarm: {} specs in {:.2f} s over {} {}: {} compiled, {} already cached, {} failed\n",
               results.size(), seconds, workers, unit, compiled, cached, failed);
    if (compiled > 0)
      fmt::print("  per compiled spec: {:.2f} s mean, {:.2f} s slowest ({}); {:.1f} specs/minute\n",
                 compile_seconds / compiled, slowest, slowest_name,
                 60.0 * compiled / std::max(seconds, 1e-9));
    if (!set.skipped.empty()) fmt::print("  {} invalid combinations skipped\n", set.skipped.size());
    if (tuned_variants > 0)
      fmt::print("  {} of them tuned variants (kv_tile, backend) the tuning table chose\n", tuned_variants);
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
  cmd->add_flag("--threads", args->threads,
                "Use threads in this process instead of worker processes (NVRTC serialises threads)");
  cmd->add_flag("--skip-invalid", args->set.skip_invalid,
                "Report and skip invalid combinations of a product instead of failing");
  add_spec_set_options(cmd, args->set);
  cmd->footer(
      "Examples:\n"
      "  xqajit prewarm --preset serving-gqa arch=sm_90a,sm_120a\n"
      "  xqajit prewarm --jobs 4 input=fp16,bf16 head_dim=64,128 group=1,8 arch=sm_90a\n"
      "  xqajit prewarm --spec-file specs.json --skip-invalid --json");
  cmd->callback([&flags, &exit_code, args] { exit_code = run_prewarm(flags, *args); });

  // Internal: one worker process of `prewarm` (reads "INDEX NAME" lines on stdin).
  CLI::App* worker = app.add_subcommand("prewarm-worker", "");
  worker->group("");  // hidden from --help
  worker->callback([&flags, &exit_code] { exit_code = run_worker(flags); });
}

}  // namespace xqajit::cli
