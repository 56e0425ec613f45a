// `xqajit tune`: time every candidate variant per shape bucket on this GPU and
// write the winners to <cache root>/tuning/<device>.json; `--show` prints them.
//
// Order of work: the spec set (shared with prewarm) -> every candidate variant
// compiled over worker processes (so timing never waits for NVRTC) -> per key
// a synthetic problem (tune_problem.hpp) timed by the library's tuner
// (tune_launch, src/tuning/tuner_gpu.cpp) -> the table saved after every key (a run
// cut short keeps what it measured).

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "cli_common.hpp"
#include "runtime/cuda_api.hpp"
#include "tuning/gpu_scratch.hpp"
#include "tune_problem.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/tuning/tuner.hpp"

namespace xqajit::cli {
namespace {

struct TuneArgs {
  bool show = false;
  SpecSetArgs set;
  std::string file;
  std::vector<int> batches{1, 8, 64};
  std::vector<std::int64_t> seq_lens{1024, 8192, 32768};
  TuneSettings settings;
  int jobs = 0;
};

std::string choice_label(const TunedChoice& c, Kind kind) {
  const std::string splits = c.num_splits ? fmt::format("s{}", c.num_splits) : "auto";
  if (kind == Kind::mla) return fmt::format("{}/{}", to_string(c.backend), splits);
  return fmt::format("{}/t{}{}/{}", to_string(c.backend), c.kv_tile, c.cta_rows ? fmt::format("/r{}", c.cta_rows) : "",
                     splits);
}

std::string key_label(const TuningKey& k) {
  const auto& s = k.spec;
  return fmt::format("{} {} kv={} d{} p{} g{} q{}{}{} {}  batch {:>4}  {} {:>6}", to_string(s.kind),
                     to_string(s.input), to_string(s.kv), s.head_dim, s.page_size, s.group, s.q_len,
                     s.sliding_window ? " sw" : "", s.sparse ? " sparse" : "", s.arch.str(), k.batch,
                     s.sparse ? "topk" : "seq", k.seq_len);
}

TunedChoice heuristic_of(const TuningEntry& e) {
  for (const auto& c : e.candidates)
    if (c.heuristic) return c.choice;
  return e.winner;
}

// The key's one-line summary (scripts/gpu_tune.sh reads the last field, "1.234x").
std::string summary_line(const TuningEntry& e) {
  double heur = 0, best = 0;
  for (const auto& c : e.candidates) {
    if (c.heuristic) heur = c.median_us;
    if (c.choice == e.winner && best == 0) best = c.median_us;
  }
  std::string retimed;
  double gain = e.gain();
  if (e.confirm_winner_us > 0)
    retimed = fmt::format("  re-timed A/B {:.2f} vs {:.2f} us{}", e.confirm_winner_us, e.confirm_heuristic_us,
                          e.reverted ? " (winner lost: heuristic kept)" : "");
  else if (heur > 0 && best > 0 && !(e.winner == heuristic_of(e)))
    gain = heur / best;  // a table from before the re-timing existed
  return fmt::format("{}  winner {:<20} {:9.2f} us  heuristic {:9.2f} us{}  gain {:.3f}x", key_label(e.key),
                     choice_label(e.winner, e.key.spec.kind), best, heur, retimed, gain);
}

void print_entry(const TuningEntry& e, bool candidates) {
  if (candidates) {
    std::vector<CandidateTime> sorted = e.candidates;
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.median_us < b.median_us; });
    for (const auto& c : sorted)
      fmt::print("    {:<22} {:9.2f} us{}{}\n", choice_label(c.choice, e.key.spec.kind), c.median_us,
                 c.heuristic ? "  heuristic" : "", c.choice == e.winner ? "  <- winner" : "");
  }
  fmt::print("{}\n", summary_line(e));
  std::fflush(stdout);
}

void run_show(const TuneArgs& args, const Options& options, bool json) {
  std::vector<std::filesystem::path> files;
  if (!args.file.empty()) files.push_back(args.file);
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(options.cache_dir / "tuning", ec))
    if (args.file.empty() && f.path().extension() == ".json") files.push_back(f.path());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : files) {
    const TuningTable t = load_tuning(f);
    if (json) {
      out.push_back({{"file", f.string()}, {"table", nlohmann::json::parse(t.to_json())}});
      continue;
    }
    fmt::print("{} ({} entries)\n", f.string(), t.entries().size());
    for (const auto& e : t.entries()) print_entry(e, false);
  }
  if (json) fmt::print("{}\n", out.dump(1));
}

// Knob-free specs of the set on this GPU's arch, once each.
std::vector<KernelSpec> tunable_specs(const SpecSet& set, const Arch& arch) {
  std::vector<KernelSpec> out;
  std::set<std::string> seen;
  for (KernelSpec s : set.specs) {
    s.kv_tile = 0, s.backend = Backend::automatic;
    if (s.arch != arch) {
      fmt::print(stderr, "tune: {} skipped: built for {}, this GPU runs {}\n", canonical_name(s),
                 s.arch.str(), arch.str());
      continue;
    }
    if (seen.insert(canonical_name(s)).second) out.push_back(s);
  }
  return out;
}

// Every candidate variant compiled (or found) over worker processes first.
void prewarm_candidates(const GlobalFlags& flags, const Options& options,
                        const std::vector<KernelSpec>& specs, int jobs) {
  std::vector<KernelSpec> variants;
  std::set<std::string> seen;
  for (const auto& s : specs)
    for (const auto& c : tuning_candidates(s)) {
      const KernelSpec v = candidate_spec(s, c);
      if (seen.insert(canonical_name(v)).second) variants.push_back(v);
    }
  const int workers = static_cast<int>(std::min<std::size_t>(
      variants.size(), jobs > 0 ? jobs : std::max(1u, std::thread::hardware_concurrency())));
  if (variants.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  ProgressBar bar(variants.size());
  std::size_t failed = 0;
  auto on_done = [&](const PrewarmResult& r) {
    failed += !r.ok;
    bar.step(fmt::format("compiling candidates: {}", r.name), "");
  };
  if (options.disk_cache && workers > 1)
    prewarm_in_processes(flags, variants, workers, on_done);
  else
    Engine(options).prewarm(variants, workers, on_done);
  fmt::print(
      stderr, "tune: {} candidate kernels ready in {:.1f} s ({} failed: those candidates are skipped)\n",
      variants.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), failed);
}

int run_tune(const TuneArgs& args, const GlobalFlags& flags) {
  const Options options = make_options(flags);
  if (args.show) return run_show(args, options, flags.json), 0;

  // Refuses an exploding set before touching the driver.
  const SpecSet set = collect_spec_set(args.set, options, "tune");
  const auto t0 = std::chrono::steady_clock::now();
  Driver& driver = Driver::instance(options.libcuda_path);
  const DeviceInfo& info = driver.device(0);
  const std::vector<KernelSpec> specs = tunable_specs(set, info.best_arch());
  if (specs.empty()) throw UsageError("no spec of the set runs on this GPU (" + info.best_arch().str() + ")");
  prewarm_candidates(flags, options, specs, args.jobs);

  Engine engine(options);
  const auto& api = detail::cuda_api(options.libcuda_path);
  detail::ContextScope context(api, nullptr, 0);
  const detail::OwnedStream owned(api, CU_STREAM_DEFAULT);
  const CUstream stream = owned.get();

  const std::size_t keys = specs.size() * args.batches.size() * args.seq_lens.size();
  const auto file =
      args.file.empty() ? tuning_file(options.cache_dir, info.name) : std::filesystem::path(args.file);
  ProgressBar bar(keys);
  TuneSettings settings = args.settings;
  std::size_t timed = 0;
  std::string status;
  settings.on_candidate = [&](const TunedChoice&, double) {
    if (bar.tty()) bar.note(fmt::format("{}  candidate {}", status, ++timed));
  };
  TuningTable table;
  std::size_t skipped = 0;
  std::uint64_t seed = 20261123;
  for (const auto& spec : specs)
    for (int b : args.batches)
      for (std::int64_t sl : args.seq_lens) {
        const TuningKey key{{}, spec, batch_bucket(b), seq_bucket(sl)};
        status = key_label(key), timed = 0;
        bar.note(status);
        std::optional<TuningEntry> entry;
        try {
          const TuneProblem problem(api, stream, spec, key.batch, key.seq_len,
                                    static_cast<std::size_t>(info.total_memory * 0.8), seed++);
          entry = problem.is_mla() ? tune_launch(engine, problem.mla(), stream, settings)
                                   : tune_launch(engine, problem.gqa(), stream, settings);
        } catch (const std::exception& e) {
          ++skipped;
          bar.step(status, fmt::format("{}: skipped: {}", status, e.what()));
          if (bar.tty()) fmt::print(stderr, "\n{}: skipped: {}\n", status, e.what());
          continue;
        }
        if (!entry) {
          bar.step(status, status + ": one candidate, nothing to tune");
          continue;
        }
        table.put(*entry);
        save_tuning(file, table);  // after every key: a run cut short keeps its rows
        if (!flags.json) {
          if (bar.tty()) fmt::print(stderr, "\r\033[K");
          print_entry(*entry, true);
        }
        bar.step(status, summary_line(*entry));
      }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (flags.json) {
    nlohmann::json doc = nlohmann::json::parse(table.to_json());
    doc["file"] = file.string();
    doc["seconds"] = secs;
    doc["skipped"] = skipped;
    fmt::print("{}\n", doc.dump(1));
  } else {
    fmt::print("{} keys tuned in {:.1f} s ({} skipped); written to {}\n", table.entries().size(), secs,
               skipped, file.string());
  }
  return 0;
}

}  // namespace

void add_tune_command(CLI::App& app, GlobalFlags& flags, int& exit_code) {
  auto args = std::make_shared<TuneArgs>();
  args->set.skip_invalid = true;  // a product's invalid corners are not worth a failure here
  CLI::App* cmd =
      app.add_subcommand("tune", "Time every variant per shape bucket on this GPU; write the tuning table");
  cmd->add_flag("--show", args->show, "Print the tuning tables in the cache root (or --file) and exit");
  cmd->add_option("--file", args->file,
                  "The tuning table to write/show (default <cache>/tuning/<device>.json)");
  cmd->add_option("--batch", args->batches, "Batch sizes (comma-separated)")->delimiter(',');
  cmd->add_option(
         "--seq-len", args->seq_lens,
         "Longest sequence lengths (comma-separated); sparse MLA specs: topk, the index lists' length")
      ->delimiter(',');
  cmd->add_option("--warmup", args->settings.warmup, "Untimed plain launches per candidate");
  cmd->add_option("--iters", args->settings.iters,
                  "Timed replays of each candidate's graph of launches (median us per launch)");
  cmd->add_option("--confirm", args->settings.confirm_rounds,
                  "A/B rounds of the interleaved re-timing of winner vs heuristic");
  cmd->add_option("-j,--jobs", args->jobs, "Worker processes compiling candidates (default: the cores)");
  add_spec_set_options(cmd, args->set);
  cmd->callback([args, &flags, &exit_code] { exit_code = run_tune(*args, flags); });
}

}  // namespace xqajit::cli
