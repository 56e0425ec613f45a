// The tuning table on disk and in bundles: its versioned JSON form, the per-device
// file under the cache root (written atomically), the copy a bundle carries, and the
// tables an engine's options name. tuning.cpp holds the table itself and its lookup.

#include <fcntl.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "util/fs.hpp"
#include "util/log.hpp"
#include "xqajit/cache/bundle.hpp"
#include "xqajit/detail/sha256.hpp"
#include "xqajit/tuning/tuning.hpp"

namespace xqajit {
namespace {

using nlohmann::json;

// As in tuning.cpp: a key's spec without the knobs the tuner picks.
bool same_spec_minus_knobs(const KernelSpec& a, const KernelSpec& b) { return key_spec(a) == key_spec(b); }

json choice_json(const TunedChoice& c) {
  json j = {{"kv_tile", c.kv_tile}, {"num_splits", c.num_splits}, {"backend", to_string(c.backend)}};
  if (c.cta_rows != 0) j["cta_rows"] = c.cta_rows;  // tables from before h43 have none
  return j;
}
TunedChoice choice_from(const json& j) {
  TunedChoice c;
  c.kv_tile = j.at("kv_tile").get<int>();
  c.num_splits = j.at("num_splits").get<int>();
  c.backend = parse_backend(j.at("backend").get<std::string>());
  c.cta_rows = j.value("cta_rows", 0);
  return c;
}

}  // namespace

std::string TuningTable::to_json() const {
  json entries = json::array();
  for (const auto& e : entries_) {
    const auto& k = e.key;
    const auto& s = k.spec;
    json cands = json::array();
    for (const auto& c : e.candidates)
      cands.push_back(
          {{"choice", choice_json(c.choice)}, {"median_us", c.median_us}, {"heuristic", c.heuristic}});
    entries.push_back({
        {"device",
         {{"name", k.device.name},
          {"cc", {k.device.cc_major, k.device.cc_minor}},
          {"sm_count", k.device.sm_count},
          {"toolchain", k.device.toolchain}}},
        {"spec",
         {{"kind", to_string(s.kind)},
          {"input", to_string(s.input)},
          {"kv", to_string(s.kv)},
          {"output", to_string(s.output)},
          {"head_dim", s.head_dim},
          {"page_size", s.page_size},
          {"group", s.group},
          {"q_len", s.q_len},
          {"sliding_window", s.sliding_window},
          {"arch", s.arch.str()}}},
        {"batch", k.batch},
        {"seq_len", k.seq_len},
        {"winner", choice_json(e.winner)},
        {"candidates", cands},
        {"confirm_winner_us", e.confirm_winner_us},
        {"confirm_heuristic_us", e.confirm_heuristic_us},
        {"reverted", e.reverted},
    });
    if (s.sparse) entries.back()["spec"]["sparse"] = true;  // dense entries read as before
  }
  const std::string body = entries.dump();
  json doc = {{"format", "xqajit-tuning"},
              {"version", kTuningFormatVersion},
              {"checksum", detail::sha256_hex(body)},
              {"entries", entries}};
  return doc.dump(1);
}

TuningTable TuningTable::from_json(const std::string& text) {
  json doc = json::parse(text);  // throws on malformed text
  if (doc.value("format", std::string()) != "xqajit-tuning") throw std::runtime_error("not a tuning table");
  const int version = doc.at("version").get<int>();
  if (version != kTuningFormatVersion)
    throw std::runtime_error("tuning table version " + std::to_string(version) + ", expected " +
                             std::to_string(kTuningFormatVersion));
  const json& entries = doc.at("entries");
  if (detail::sha256_hex(entries.dump()) != doc.at("checksum").get<std::string>())
    throw std::runtime_error("tuning table checksum mismatch");
  TuningTable table;
  for (const auto& j : entries) {
    TuningEntry e;
    const auto& d = j.at("device");
    e.key.device.name = d.at("name").get<std::string>();
    e.key.device.cc_major = d.at("cc").at(0).get<int>();
    e.key.device.cc_minor = d.at("cc").at(1).get<int>();
    e.key.device.sm_count = d.at("sm_count").get<int>();
    e.key.device.toolchain = d.at("toolchain").get<std::string>();
    const auto& s = j.at("spec");
    auto& spec = e.key.spec;
    const std::string kind = s.at("kind").get<std::string>();
    spec.kind = kind == "mla" ? Kind::mla : Kind::gqa;
    spec.input = parse_dtype("input", s.at("input").get<std::string>());
    spec.kv = parse_dtype("kv", s.at("kv").get<std::string>());
    spec.output = parse_dtype("output", s.at("output").get<std::string>());
    spec.head_dim = s.at("head_dim").get<int>();
    spec.page_size = s.at("page_size").get<int>();
    spec.group = s.at("group").get<int>();
    spec.q_len = s.at("q_len").get<int>();
    spec.sliding_window = s.at("sliding_window").get<bool>();
    spec.arch = Arch::parse(s.at("arch").get<std::string>());
    spec.sparse = s.value("sparse", false);
    e.key.batch = j.at("batch").get<int>();
    e.key.seq_len = j.at("seq_len").get<std::int64_t>();
    e.winner = choice_from(j.at("winner"));
    for (const auto& c : j.at("candidates"))
      e.candidates.push_back(
          {choice_from(c.at("choice")), c.at("median_us").get<double>(), c.value("heuristic", false)});
    e.confirm_winner_us = j.value("confirm_winner_us", 0.0);
    e.confirm_heuristic_us = j.value("confirm_heuristic_us", 0.0);
    e.reverted = j.value("reverted", false);
    table.insert(std::move(e));
  }
  table.reindex();
  return table;
}

std::filesystem::path tuning_file(const std::filesystem::path& cache_root, const std::string& device_name) {
  std::string safe;
  for (char c : device_name) safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
  if (safe.empty()) safe = "unknown";
  return cache_root / "tuning" / (safe + ".json");
}

TuningTable load_tuning(const std::filesystem::path& file) {
  std::vector<char> bytes;
  if (auto ec = detail::read_whole_file(file, bytes)) {
    if (ec != std::errc::no_such_file_or_directory)
      detail::logger()->warn("tuning table {} unreadable ({}); using the heuristic", file.string(),
                             ec.message());
    return {};
  }
  try {
    return TuningTable::from_json(std::string(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    detail::logger()->warn("tuning table {} ignored: {}", file.string(), e.what());
    return {};
  }
}

void save_tuning(const std::filesystem::path& file, const TuningTable& table) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) throw std::runtime_error("cannot create " + file.parent_path().string() + ": " + ec.message());
  auto lock = detail::lock_file(file.string() + ".lock", detail::LockWait::kBlock, ec);
  if (ec) throw std::runtime_error("cannot lock " + file.string() + ": " + ec.message());
  TuningTable merged = load_tuning(file);
  merged.merge(table);
  const std::string text = merged.to_json();
  if (auto wec = detail::write_file_atomically(file, text.data(), text.size()))
    throw std::runtime_error("cannot write " + file.string() + ": " + wec.message());
  detail::fsync_directory(file.parent_path());
}

bool is_tuning_entry_name(const std::string& name) { return name.rfind(kBundleTuningPrefix, 0) == 0; }

TuningTable load_bundle_tuning(const BundleReader& bundle) {
  TuningTable table;
  for (const auto& e : bundle.entries()) {
    if (!is_tuning_entry_name(e.name)) continue;
    try {
      const std::vector<char> bytes = bundle.read(e);  // checksum verified
      table.merge(TuningTable::from_json(std::string(bytes.begin(), bytes.end())));
    } catch (const std::exception& ex) {
      detail::logger()->warn("bundle {}: tuning entry {} ignored: {}", bundle.path().string(), e.name,
                             ex.what());
    }
  }
  return table;
}

void add_bundle_tuning(BundleWriter& writer, const TuningTable& table, const std::string& file_name,
                       const std::string& fingerprint) {
  const std::string text = table.to_json();
  writer.add({kBundleTuningPrefix + file_name, "any", fingerprint, 0, 0, {}},
             std::vector<char>(text.begin(), text.end()));
}

TuningTable load_tuning_tables(const Options& o) {
  TuningTable table;
  if (o.tuning == "off") return table;
  if (!o.tuning.empty()) {
    table.merge(load_tuning(o.tuning));
    return table;
  }
  // Bundles ship tuning too (bundle pack --with-tuning); the cache root's own tables win.
  std::error_code ec;
  for (const auto& b : o.bundles) {
    std::vector<std::filesystem::path> files{b};
    if (std::filesystem::is_directory(b, ec)) {
      files.clear();
      for (const auto& f : std::filesystem::directory_iterator(b, ec))
        if (f.path().extension() == ".xqab") files.push_back(f.path());
    }
    for (const auto& f : files) try {
        table.merge(load_bundle_tuning(BundleReader::open(f)));
      } catch (const std::exception&) {
        // the bundle set warns about a bad bundle already
      }
  }
  for (const auto& f : std::filesystem::directory_iterator(o.cache_dir / "tuning", ec))
    if (f.path().extension() == ".json") table.merge(load_tuning(f.path()));
  return table;
}

std::vector<KernelSpec> with_tuned_variants(const std::vector<KernelSpec>& specs, const TuningTable& table,
                                            const std::string& toolchain) {
  std::vector<KernelSpec> out = specs;  // as given, duplicates too (one result each)
  std::unordered_map<std::string, bool> seen;
  const auto name_of = [](const KernelSpec& s) {
    try {
      return canonical_name(normalized(s));
    } catch (const std::exception&) {
      return std::string();  // an invalid spec: prewarm reports it
    }
  };
  for (const auto& s : specs) seen.emplace(name_of(s), true);
  const auto add = [&](const KernelSpec& s) {
    const std::string name = name_of(s);
    if (!name.empty() && seen.emplace(name, true).second) out.push_back(s);
  };
  for (const auto& s : specs) {
    // An explicit tile: its launches skip the table. An explicit backend may be
    // a spec set's expansion of backend=auto (launch_backends), so it still counts.
    if (s.kv_tile != 0) continue;
    for (const auto& e : table.entries()) {
      if (!toolchain.empty() && e.key.device.toolchain != toolchain) continue;
      if (!same_spec_minus_knobs(e.key.spec, s)) continue;
      KernelSpec v = s;
      v.kv_tile = e.winner.kv_tile;
      v.backend = e.winner.backend;
      v.cta_rows = e.winner.cta_rows;
      try {
        validate(normalized(v));
      } catch (const std::exception&) {
        continue;  // a choice this toolchain cannot build is never planned either
      }
      for (const KernelSpec& variant : launch_variants({v})) add(variant);  // + the plan's rows per CTA
    }
  }
  return out;
}

}  // namespace xqajit
