// `xqajit remote list | clear`: the remote (Redis) cache's values for this
// toolchain fingerprint; and doctor's probe of the remote.

#include <fmt/format.h>

#include <memory>

#include "cli_common.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/remote/remote_cache.hpp"

namespace xqajit::cli {
namespace {

struct RemoteHandle {
  Options options;
  std::unique_ptr<RemoteCache> remote;
};

// The remote of this toolchain's fingerprint. Unlike the engine, which turns a
// broken remote off and carries on, these commands exist for the remote: every
// problem (no URL, a bad URL, no hiredis) is an error here.
RemoteHandle open_remote(const GlobalFlags& flags) {
  RemoteHandle h;
  h.options = make_options(flags);
  if (h.options.remote_cache.empty())
    throw UsageError("no remote cache configured: set XQAJIT_REMOTE_CACHE or pass --remote-cache URL");
  Options local = h.options;
  local.remote_cache.clear();  // the fingerprint only; the remote is opened below, with its errors
  const std::string fingerprint = Engine(local).fingerprint();
  h.remote = std::make_unique<RemoteCache>(h.options, fingerprint);
  return h;
}

void run_list(const GlobalFlags& flags) {
  RemoteHandle h = open_remote(flags);
  const std::vector<RemoteEntry> entries = h.remote->list();
  std::uint64_t total = 0;
  for (const auto& e : entries) total += e.bytes;
  if (flags.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& e : entries) rows.push_back({{"name", e.name}, {"bytes", e.bytes}});
    print_json({{"remote", h.remote->url().display()},
                {"fingerprint", h.remote->fingerprint()},
                {"total_bytes", total},
                {"entries", rows}});
    return;
  }
  fmt::print("remote:      {}\nfingerprint: {}\n", h.remote->url().display(), h.remote->fingerprint());
  for (const auto& e : entries) fmt::print("  {:>10}  {}\n", e.bytes, e.name);
  fmt::print("{} entr{}, {}\n", entries.size(), entries.size() == 1 ? "y" : "ies", human_bytes(total));
}

void run_clear(const GlobalFlags& flags) {
  RemoteHandle h = open_remote(flags);
  const std::size_t removed = h.remote->clear();
  if (flags.json) {
    print_json({{"remote", h.remote->url().display()},
                {"fingerprint", h.remote->fingerprint()},
                {"removed", removed}});
    return;
  }
  fmt::print("removed {} entries of {} from {}\n", removed, h.remote->fingerprint(),
             h.remote->url().display());
}

}  // namespace

nlohmann::json probe_remote(const Options& options, const std::string& fingerprint) {
  nlohmann::json out = {{"configured", !options.remote_cache.empty()}};
  if (options.remote_cache.empty()) return out;
  out["signed"] = !options.remote_cache_key.empty();
  try {
    RemoteCache remote(options, fingerprint);
    out["url"] = remote.url().display();
    const RemoteProbe p = remote.probe();
    out["reachable"] = true;
    out["latency_ms"] = p.latency_ms;
    out["entries"] = p.entries;
    out["server_version"] = p.server_version;
  } catch (const std::exception& e) {
    out["reachable"] = false;
    out["error"] = e.what();
  }
  return out;
}

void print_remote_text(const nlohmann::json& r) {
  fmt::print("remote cache\n");
  if (!r["configured"]) {
    fmt::print("  none (set XQAJIT_REMOTE_CACHE or pass --remote-cache redis://host:port)\n");
    return;
  }
  if (r.contains("url")) fmt::print("  url         {}\n", r["url"].get<std::string>());
  if (!r["reachable"]) {
    fmt::print("  NOT REACHABLE: {}\n", r.value("error", "unknown reason"));
    return;
  }
  fmt::print("  reachable   yes, Redis {}, PING {:.2f} ms\n", r["server_version"].get<std::string>(),
             r["latency_ms"].get<double>());
  fmt::print("  entries     {} for this fingerprint\n", r["entries"].get<std::size_t>());
  fmt::print("  signed      {}\n", r["signed"] ? "yes (XQAJIT_REMOTE_CACHE_KEY)"
                                               : "no (set XQAJIT_REMOTE_CACHE_KEY to sign and check values)");
}

void add_remote_commands(CLI::App& app, GlobalFlags& flags, int& exit_code) {
  CLI::App* remote = app.add_subcommand("remote", "The remote (Redis) cache of this toolchain fingerprint");
  remote->require_subcommand(1);
  remote->add_subcommand("list", "List the remote's entries for this fingerprint")
      ->callback([&flags, &exit_code] {
        run_list(flags);
        exit_code = 0;
      });
  remote->add_subcommand("clear", "Remove the remote's entries for this fingerprint")
      ->callback([&flags, &exit_code] {
        run_clear(flags);
        exit_code = 0;
      });
  remote->footer("The remote comes from --remote-cache URL or XQAJIT_REMOTE_CACHE.");
}

}  // namespace xqajit::cli
