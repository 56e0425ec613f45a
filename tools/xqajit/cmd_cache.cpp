// `xqajit list | clear | gc` (the on-disk cache) and `xqajit doctor` (what this
// host has: driver, GPUs, NVRTC, templates, cache, bundles, remote — and what works).

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>
#include <optional>

#include "cli_common.hpp"
#include "util/iso_time.hpp"
#include "xqajit/cache/bundle.hpp"
#include "xqajit/cache/cache.hpp"
#include "xqajit/compile/compiler.hpp"
#include "xqajit/runtime/driver.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/compile/templates.hpp"

namespace xqajit::cli {
namespace {

namespace fs = std::filesystem;

// C++17 has no clock_cast: shift by the offset between the two clocks' "now".
std::string iso_time(fs::file_time_type t) {
  const auto system =
      std::chrono::system_clock::now() +
      std::chrono::duration_cast<std::chrono::system_clock::duration>(t - fs::file_time_type::clock::now());
  return detail::utc_iso8601(std::chrono::system_clock::to_time_t(system));
}

// The engine's cache, or (when XQAJIT_DISK_CACHE=0 turned it off) one on the
// same root, so list/clear/gc still manage what is on disk.
struct CacheHandle {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<DiskCache> own;
  DiskCache* cache = nullptr;

  explicit CacheHandle(const Options& options) : engine(std::make_unique<Engine>(options)) {
    cache = engine->disk_cache();
    if (cache == nullptr) {
      own = std::make_unique<DiskCache>(options.cache_dir, engine->fingerprint());
      cache = own.get();
    }
  }
};

void run_list(const GlobalFlags& flags) {
  CacheHandle handle(make_options(flags));
  const DiskCache& cache = *handle.cache;
  const std::vector<CacheEntry> entries = cache.list(true);
  std::uint64_t total = 0;
  for (const CacheEntry& e : entries) total += e.bytes;
  if (flags.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const CacheEntry& e : entries) {
      rows.push_back({{"fingerprint", e.fingerprint},
                      {"current", e.fingerprint == cache.fingerprint()},
                      {"name", e.name},
                      {"bytes", e.bytes},
                      {"last_used", iso_time(e.last_used)},
                      {"path", e.dir.string()}});
    }
    print_json({{"root", cache.root().string()},
                {"fingerprint", cache.fingerprint()},
                {"total_bytes", total},
                {"entries", rows}});
    return;
  }
  fmt::print("cache root:  {}\nfingerprint: {} (current toolchain)\n", cache.root().string(),
             cache.fingerprint());
  if (entries.empty()) {
    fmt::print("no entries\n");
    return;
  }
  std::size_t fp_width = 11, name_width = 4;  // at least the headers' widths
  for (const CacheEntry& e : entries) {
    fp_width = std::max(fp_width, e.fingerprint.size() + 2);
    name_width = std::max(name_width, e.name.size());
  }
  fmt::print("\n{:<{}} {:<{}} {:>10}  {}\n", "FINGERPRINT", fp_width, "NAME", name_width, "BYTES",
             "LAST USED (UTC)");
  for (const CacheEntry& e : entries) {
    const std::string fp = e.fingerprint == cache.fingerprint() ? e.fingerprint + " *" : e.fingerprint;
    fmt::print("{:<{}} {:<{}} {:>10}  {}\n", fp, fp_width, e.name, name_width, e.bytes,
               iso_time(e.last_used));
  }
  fmt::print("\n{} entr{}, {} (* = current toolchain)\n", entries.size(), entries.size() == 1 ? "y" : "ies",
             human_bytes(total));
}

void run_clear(const GlobalFlags& flags) {
  CacheHandle handle(make_options(flags));
  const std::size_t removed = handle.cache->clear();
  if (flags.json) {
    print_json({{"root", handle.cache->root().string()}, {"removed", removed}});
    return;
  }
  fmt::print("removed {} entries from {}\n", removed, handle.cache->root().string());
}

void run_gc(const GlobalFlags& flags, std::uint64_t max_bytes) {
  CacheHandle handle(make_options(flags));
  const std::uint64_t freed = handle.cache->gc(max_bytes);
  const std::uint64_t after = handle.cache->size_bytes();
  if (flags.json) {
    print_json({{"root", handle.cache->root().string()},
                {"max_bytes", max_bytes},
                {"freed_bytes", freed},
                {"bytes", after}});
    return;
  }
  fmt::print("freed {} ({} bytes); {} now holds {} (limit {})\n", human_bytes(freed), freed,
             handle.cache->root().string(), human_bytes(after), human_bytes(max_bytes));
}

// ---- doctor ----------------------------------------------------------------------
// Every probe catches its own failure and reports it: doctor exits 0 on any host.

nlohmann::json probe_driver(const Options& options) {
  nlohmann::json out = {{"found", false}, {"devices", nlohmann::json::array()}};
  try {
    if (!Driver::available(options.libcuda_path)) Driver::instance(options.libcuda_path);  // for the reason
    Driver& driver = Driver::instance(options.libcuda_path);
    out["found"] = true;
    out["version"] = driver.version();
    const int count = driver.device_count();
    for (int i = 0; i < count; ++i) {
      const DeviceInfo d = driver.device(i);
      out["devices"].push_back({{"ordinal", d.ordinal},
                                {"name", d.name},
                                {"cc", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
                                {"sm_count", d.sm_count},
                                {"max_smem_per_block_optin", d.max_smem_per_block_optin},
                                {"memory_bytes", d.total_memory},
                                {"best_arch", d.best_arch().str()}});
    }
  } catch (const std::exception& e) {
    out["error"] = e.what();
  }
  return out;
}

nlohmann::json probe_nvrtc(const Compiler& compiler) {
  nlohmann::json out = {{"found", false}};
  try {
    const std::string version = compiler.nvrtc_version();  // throws LibraryError with the search path
    out["found"] = true;
    out["version"] = version;
    nlohmann::json archs = nlohmann::json::array();
    for (int a : compiler.supported_archs()) archs.push_back(fmt::format("sm_{}", a));
    out["supported_archs"] = archs;
  } catch (const std::exception& e) {
    out["error"] = e.what();
  }
  return out;
}

nlohmann::json probe_cache(const Options& options, const std::string& fingerprint) {
  nlohmann::json out = {
      {"root", options.cache_dir.string()}, {"fingerprint", fingerprint}, {"enabled", options.disk_cache}};
  try {
    DiskCache cache(options.cache_dir, fingerprint);
    out["writable"] = cache.writable();
    out["bytes"] = cache.size_bytes();
    out["entries"] = cache.list(true).size();
    out["entries_current"] = cache.list(false).size();
  } catch (const std::exception& e) {
    out["error"] = e.what();
  }
  if (options.cache_max_bytes > 0) out["max_bytes"] = options.cache_max_bytes;
  return out;
}

nlohmann::json probe_bundles(const Options& options) {
  nlohmann::json out = nlohmann::json::array();
  auto probe_file = [&](const fs::path& file) {
    nlohmann::json row = {{"path", file.string()}};
    try {
      row["entries"] = BundleReader::open(file).entries().size();
      row["ok"] = true;
    } catch (const std::exception& e) {
      row["ok"] = false;
      row["error"] = e.what();
    }
    out.push_back(row);
  };
  for (const fs::path& path : options.bundles) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) {
      probe_file(path);
      continue;
    }
    for (const auto& item : fs::directory_iterator(path, ec))
      if (item.path().extension() == ".xqab") probe_file(item.path());
  }
  return out;
}

void print_doctor_text(const nlohmann::json& r) {
  const auto& drv = r["driver"];
  fmt::print("driver (libcuda)\n");
  if (drv["found"]) {
    fmt::print("  found, CUDA {}; {} device(s)\n", drv["version"].get<std::string>(), drv["devices"].size());
    for (const auto& d : drv["devices"])
      fmt::print("  [{}] {}  cc {}  {} SMs  best arch {}\n", d["ordinal"].get<int>(),
                 d["name"].get<std::string>(), d["cc"].get<std::string>(), d["sm_count"].get<int>(),
                 d["best_arch"].get<std::string>());
  } else {
    fmt::print("  NOT AVAILABLE: {}\n", drv.value("error", "unknown reason"));
  }
  const auto& nv = r["nvrtc"];
  fmt::print("NVRTC\n");
  if (nv["found"]) {
    fmt::print("  found, version {}\n  archs: {}\n", nv["version"].get<std::string>(),
               fmt::join(nv["supported_archs"].get<std::vector<std::string>>(), " "));
  } else {
    fmt::print("  NOT AVAILABLE: {}\n", nv.value("error", "unknown reason"));
  }
  const auto& t = r["templates"];
  fmt::print("kernel templates\n");
  if (t.contains("error"))
    fmt::print("  ERROR: {}\n", t["error"].get<std::string>());
  else
    fmt::print("  origin {}, {} files, sha256 {}\n", t["origin"].get<std::string>(), t["files"].get<int>(),
               t["hash"].get<std::string>());
  const auto& c = r["cache"];
  fmt::print("disk cache{}\n", c["enabled"] ? "" : " (OFF: XQAJIT_DISK_CACHE=0)");
  fmt::print("  root        {}\n  fingerprint {}\n", c["root"].get<std::string>(),
             c["fingerprint"].get<std::string>());
  if (c.contains("error")) {
    fmt::print("  ERROR: {}\n", c["error"].get<std::string>());
  } else {
    fmt::print("  writable    {}\n", c["writable"] ? "yes" : "NO (kernels are kept in memory only)");
    fmt::print("  size        {} in {} entries ({} for the current toolchain)\n",
               human_bytes(c["bytes"].get<std::uint64_t>()), c["entries"].get<std::size_t>(),
               c["entries_current"].get<std::size_t>());
  }
  fmt::print("bundles\n");
  if (r["bundles"].empty()) fmt::print("  none (set XQAJIT_BUNDLES or pass --bundle FILE)\n");
  for (const auto& b : r["bundles"]) {
    if (b["ok"])
      fmt::print("  {}: {} entries\n", b["path"].get<std::string>(), b["entries"].get<std::size_t>());
    else
      fmt::print("  {}: UNUSABLE: {}\n", b["path"].get<std::string>(), b["error"].get<std::string>());
  }
  print_remote_text(r["remote"]);
  fmt::print("summary\n");
  for (const auto& line : r["summary"]) fmt::print("  {}\n", line.get<std::string>());
}

void run_doctor(const GlobalFlags& flags) {
  nlohmann::json report;
  Options options;
  try {
    options = make_options(flags);
  } catch (const std::exception& e) {
    // A malformed variable must not keep doctor from reporting the rest.
    report["environment_error"] = e.what();
    options.cache_dir = flags.cache_dir.empty() ? default_cache_dir() : fs::path(flags.cache_dir);
  }
  report["driver"] = probe_driver(options);

  std::optional<TemplateSet> templates;
  try {
    templates = TemplateSet::load(options.template_dir);
    report["templates"] = {
        {"origin", templates->origin()}, {"hash", templates->hash()}, {"files", templates->files().size()}};
  } catch (const std::exception& e) {
    report["templates"] = {{"error", e.what()}};
  }
  // Without usable templates from XQAJIT_TEMPLATE_DIR, still probe NVRTC with the embedded copy.
  const Compiler compiler(templates ? *templates : TemplateSet::embedded(), options.libnvrtc_path);
  report["nvrtc"] = probe_nvrtc(compiler);

  std::string fingerprint = "(unknown)";
  try {
    fingerprint = Engine(options).fingerprint();
  } catch (const std::exception& e) {
    report["engine_error"] = e.what();
  }
  report["cache"] = probe_cache(options, fingerprint);
  report["bundles"] = probe_bundles(options);
  report["remote"] = probe_remote(options, fingerprint);
  report["options"] = {{"no_compile", options.no_compile},
                       {"log_level", options.log_level},
                       {"template_dir", options.template_dir.string()}};

  const bool gpu = report["driver"]["found"] && !report["driver"]["devices"].empty();
  const bool nvrtc = report["nvrtc"]["found"];
  std::vector<std::string> summary;
  summary.push_back(nvrtc && !options.no_compile
                        ? "compile + prewarm: yes"
                        : (options.no_compile
                               ? "compile: no (XQAJIT_NO_COMPILE / --no-compile)"
                               : "compile: no (NVRTC not found; set XQAJIT_LIBNVRTC or "
                                 "install the CUDA toolkit); bundles and the cache still serve"));
  summary.push_back(
      gpu ? "launch kernels: yes"
          : "launch kernels: no (no driver or no GPU); spec, compile, prewarm and bundles still work");
  if (!options.remote_cache.empty())
    summary.push_back(report["remote"].value("reachable", false)
                          ? "remote cache: yes"
                          : "remote cache: NOT reachable (the engine carries on with the local tiers)");
  if (report.contains("environment_error"))
    summary.push_back("environment: " + report["environment_error"].get<std::string>());
  if (report.contains("engine_error"))
    summary.push_back("engine: FAILED to start: " + report["engine_error"].get<std::string>());
  report["summary"] = summary;

  if (flags.json)
    print_json(report);
  else
    print_doctor_text(report);
}

}  // namespace

void add_cache_commands(CLI::App& app, GlobalFlags& flags, int& exit_code) {
  app.add_subcommand("list", "List the disk cache's entries (every toolchain fingerprint)")
      ->callback([&flags, &exit_code] {
        run_list(flags);
        exit_code = 0;
      });
  app.add_subcommand("clear", "Remove every entry from the disk cache")->callback([&flags, &exit_code] {
    run_clear(flags);
    exit_code = 0;
  });
  auto max_bytes = std::make_shared<std::uint64_t>(0);
  CLI::App* gc = app.add_subcommand("gc", "Evict least-recently-used entries until the cache fits a size");
  gc->add_option("--max-bytes", *max_bytes, "Size bound, e.g. 500000000, 512MB, 2GiB (0 empties it)")
      ->required()
      ->transform(CLI::AsSizeValue(false));
  gc->callback([&flags, &exit_code, max_bytes] {
    run_gc(flags, *max_bytes);
    exit_code = 0;
  });
  app.add_subcommand("doctor", "Report the driver, GPUs, NVRTC, templates, cache and bundles of this host")
      ->callback([&flags, &exit_code] {
        run_doctor(flags);
        exit_code = 0;
      });
}

}  // namespace xqajit::cli
