// `xqajit bundle pack|list|verify|unpack`: ship cubins as one file that hosts
// with no toolkit load through XQAJIT_BUNDLES.

#include <fmt/format.h>

#include <map>
#include <memory>
#include <set>

#include "cli.hpp"
#include "cli_common.hpp"
#include "xqajit/cache/bundle.hpp"
#include "xqajit/cache/cache.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/tuning/tuning.hpp"
#include "xqajit/spec/spec_set.hpp"

namespace xqajit::cli {
namespace {

struct PackArgs {
  std::string out;
  std::string spec_file;
  std::vector<std::string> names;
  int jobs = 0;
  bool skip_invalid = false;
  bool with_tuning = false;  // also pack <cache>/tuning/*.json
};

/// The specs to pack: from a spec file and/or canonical names (empty = all of the cache).
std::vector<KernelSpec> requested_specs(const PackArgs& args) {
  std::vector<FieldProduct> products;
  if (!args.spec_file.empty()) products = read_spec_file(args.spec_file);
  ExpandOptions expand_options;
  expand_options.skip_invalid = args.skip_invalid;
  expand_options.source = std::filesystem::path(args.spec_file).filename().string();
  SpecSet set = expand(products, expand_options);
  for (const auto& message : set.skipped) fmt::print(stderr, "skipped (invalid): {}\n", message);
  for (const auto& name : args.names) {
    if (!looks_like_name(name))
      throw UsageError(fmt::format("'{}' is not a canonical spec name (see `xqajit spec`)", name));
    set.specs.push_back(parse_name(name));
  }
  return set.specs;
}

void run_pack(const GlobalFlags& flags, const PackArgs& args) {
  const Options options = make_options(flags);
  Engine engine(options);
  const std::string fingerprint = engine.fingerprint();
  BundleWriter writer;
  const std::vector<KernelSpec> specs = requested_specs(args);
  if (specs.empty() && args.spec_file.empty()) {
    // Everything the cache holds for the current toolchain.
    DiskCache* cache = engine.disk_cache();
    if (!cache) throw UsageError("the disk cache is off (XQAJIT_DISK_CACHE=0): name the specs to pack");
    for (const CacheEntry& entry : cache->list(/*all_fingerprints=*/false)) {
      auto cubin = cache->load(entry.name);
      if (!cubin)
        throw CacheError(
            fmt::format("cache entry {} in {} is corrupt or half-written; run `xqajit "
                        "compile {}` to rebuild it, then pack again",
                        entry.name, entry.dir.string(), entry.name));
      writer.add({entry.name, parse_name(entry.name).arch.str(), fingerprint, 0, 0, entry.sha256},
                 std::move(*cubin));
    }
  } else {
    // Compile what is missing first (in parallel), then collect from memory. What
    // prewarm compiles -- every backend a launch of an auto spec may pick, and the
    // tuned variants -- is what a host without a compiler needs.
    std::size_t failed = 0;
    const auto results = engine.prewarm(specs, args.jobs);
    for (const auto& r : results) {
      if (r.ok) continue;
      ++failed;
      fmt::print(stderr, "xqajit: cannot pack {}: {}\n", r.name.empty() ? r.spec.arch.str() : r.name,
                 r.error);
    }
    if (failed > 0) throw Error(fmt::format("{} spec(s) could not be compiled; nothing was written", failed));
    std::set<std::string> packed;
    for (const auto& r : results) {
      if (!packed.insert(r.name).second) continue;  // the same kernel named twice
      const CubinRef ref = engine.cubin(r.spec);
      writer.add({ref.name, normalized(r.spec).arch.str(), ref.fingerprint, 0, 0, {}}, *ref.cubin);
    }
  }
  if (args.with_tuning) {  // tuning tables travel as specially named entries (tuning.hpp)
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(options.cache_dir / "tuning", ec)) {
      if (f.path().extension() != ".json") continue;
      const TuningTable table = load_tuning(f.path());
      if (!table.empty()) add_bundle_tuning(writer, table, f.path().filename().string(), fingerprint);
    }
  }
  if (writer.size() == 0)
    throw UsageError(
        fmt::format("nothing to pack: the cache at {} has no entries for fingerprint {}; "
                    "run `xqajit prewarm` first or name the specs",
                    options.cache_dir.string(), fingerprint));
  writer.write(args.out);
  if (flags.json) {
    print_json({{"file", args.out}, {"entries", writer.size()}, {"fingerprint", fingerprint}});
  } else {
    fmt::print("packed {} entries (fingerprint {}) into {}\n", writer.size(), fingerprint, args.out);
  }
}

nlohmann::json entry_json(const BundleEntry& e) {
  return {{"name", e.name},     {"arch", e.arch}, {"fingerprint", e.fingerprint},
          {"offset", e.offset}, {"size", e.size}, {"sha256", e.sha256}};
}

void run_list(const GlobalFlags& flags, const std::string& file) {
  const BundleReader reader = BundleReader::open(file);
  if (flags.json) {
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : reader.entries()) entries.push_back(entry_json(e));
    print_json({{"file", file}, {"format_version", kBundleFormatVersion}, {"entries", entries}});
    return;
  }
  fmt::print("{}: {} entries (format v{})\n", file, reader.entries().size(), kBundleFormatVersion);
  for (const auto& e : reader.entries())
    fmt::print("  {:<56} {:<8} {:>10}  {}  {}\n", e.name, e.arch, human_bytes(e.size), e.fingerprint,
               e.sha256.substr(0, 16));
}

int run_verify(const GlobalFlags& flags, const std::string& file) {
  try {
    const BundleReader reader = BundleReader::open(file);
    reader.verify();
    if (flags.json)
      print_json({{"file", file}, {"ok", true}, {"entries", reader.entries().size()}});
    else
      fmt::print("{}: ok, {} entries verified\n", file, reader.entries().size());
    return 0;
  } catch (const BundleError& e) {
    if (!flags.json) throw;  // main prints it and exits 1
    print_json({{"file", file}, {"ok", false}, {"error", e.what()}});
    return 1;
  }
}

int run_unpack(const GlobalFlags& flags, const std::string& file) {
  const Options options = make_options(flags);
  const BundleReader reader = BundleReader::open(file);
  // Each entry goes under its own fingerprint, so a bundle built by another
  // toolchain never poisons the entries of this one.
  std::map<std::string, std::unique_ptr<DiskCache>> caches;
  std::size_t written = 0;
  std::vector<std::string> failed;
  for (const auto& entry : reader.entries()) {
    if (is_tuning_entry_name(entry.name)) {  // a tuning table: merge into <cache>/tuning/
      const std::string file_name = entry.name.substr(std::string(kBundleTuningPrefix).size());
      const std::vector<char> bytes = reader.read(entry);
      try {
        save_tuning(options.cache_dir / "tuning" / std::filesystem::path(file_name).filename(),
                    TuningTable::from_json(std::string(bytes.begin(), bytes.end())));
        ++written;
      } catch (const std::exception& e) {
        fmt::print(stderr, "xqajit: tuning entry {} not unpacked: {}\n", entry.name, e.what());
        failed.push_back(entry.name);
      }
      continue;
    }
    const std::vector<char> cubin = reader.read(entry);  // checksum verified
    auto& cache = caches[entry.fingerprint];
    if (!cache) cache = std::make_unique<DiskCache>(options.cache_dir, entry.fingerprint);
    const nlohmann::json meta = {{"source", "bundle"}, {"bundle", file}, {"arch", entry.arch}};
    if (cache->publish(entry.name, cubin, meta.dump()))
      ++written;
    else
      failed.push_back(entry.name);
  }
  if (flags.json) {
    print_json({{"file", file},
                {"cache_dir", options.cache_dir.string()},
                {"unpacked", written},
                {"failed", failed}});
  } else {
    fmt::print("unpacked {} of {} entries from {} into {}\n", written, reader.entries().size(), file,
               options.cache_dir.string());
  }
  for (const auto& name : failed)
    fmt::print(stderr, "xqajit: could not write {} into the cache at {} (see the warning above)\n", name,
               options.cache_dir.string());
  return failed.empty() ? 0 : 1;
}

}  // namespace

void add_bundle_commands(CLI::App& app, GlobalFlags& flags, int& exit_code) {
  CLI::App* bundle = app.add_subcommand("bundle", "Pack, list, verify and unpack cubin bundles");
  bundle->require_subcommand(1);

  auto pack_args = std::make_shared<PackArgs>();
  CLI::App* pack = bundle->add_subcommand(
      "pack",
      "Write cache entries into one bundle (all of the current toolchain, or those named, compiled first)");
  pack->add_option("--out,-o", pack_args->out, "Bundle file to write (atomically)")
      ->required()
      ->type_name("FILE");
  pack->add_option("--spec-file", pack_args->spec_file, "Pack the specs of this JSON spec file")
      ->type_name("FILE");
  pack->add_option("-j,--jobs", pack_args->jobs, "Worker threads for missing compiles (default: cores)");
  pack->add_flag("--skip-invalid", pack_args->skip_invalid, "Skip invalid combinations of the spec file");
  pack->add_flag("--with-tuning", pack_args->with_tuning,
                 "Also pack the tuning tables of the cache root (xqajit tune), for hosts that do not tune");
  pack->add_option("names", pack_args->names, "Canonical spec names to pack")->type_name("NAME");
  pack->callback([&flags, &exit_code, pack_args] {
    run_pack(flags, *pack_args);
    exit_code = 0;
  });

  auto list_file = std::make_shared<std::string>();
  CLI::App* list = bundle->add_subcommand("list", "List a bundle's entries");
  list->add_option("file", *list_file, "Bundle file")->required()->type_name("FILE");
  list->callback([&flags, &exit_code, list_file] {
    run_list(flags, *list_file);
    exit_code = 0;
  });

  auto verify_file = std::make_shared<std::string>();
  CLI::App* verify = bundle->add_subcommand(
      "verify", "Check a bundle's header, index and every checksum (exit 1 naming the bad entry)");
  verify->add_option("file", *verify_file, "Bundle file")->required()->type_name("FILE");
  verify->callback([&flags, &exit_code, verify_file] { exit_code = run_verify(flags, *verify_file); });

  auto unpack_file = std::make_shared<std::string>();
  CLI::App* unpack = bundle->add_subcommand(
      "unpack",
      "Verify a bundle and publish its cubins into the cache (--cache-dir), each under its fingerprint");
  unpack->add_option("file", *unpack_file, "Bundle file")->required()->type_name("FILE");
  unpack->callback([&flags, &exit_code, unpack_file] { exit_code = run_unpack(flags, *unpack_file); });
}

}  // namespace xqajit::cli
