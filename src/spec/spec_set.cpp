#include "xqajit/spec/spec_set.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "xqajit/error.hpp"

namespace xqajit {
namespace {

using nlohmann::json;

bool is_field_name(const std::string& name) {
  const auto& names = spec_field_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string all_field_names() { return fmt::format("{}", fmt::join(spec_field_names(), ", ")); }

std::string located(const std::string& source, std::size_t index, const std::string& field) {
  return fmt::format("{}[{}].{}", source, index, field);
}

// Numbers may be written as JSON numbers or strings, booleans as true/false.
std::string scalar_text(const json& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  if (value.is_boolean()) return value.get<bool>() ? "1" : "0";
  throw SpecError(where, value.dump(), "a string, an integer, a boolean, or a list of those");
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) parts.push_back(part);
  if (!text.empty() && text.back() == ',') parts.emplace_back();
  return parts;
}

void check_product(const FieldProduct& product, const std::string& source, std::size_t index) {
  for (const auto& [field, values] : product) {
    if (!is_field_name(field))
      throw SpecError(located(source, index, field), "(unknown field)", all_field_names());
    if (values.empty()) throw SpecError(located(source, index, field), "[]", "at least one value");
    for (const auto& v : values)
      if (v.empty()) throw SpecError(located(source, index, field), "(empty)", "a value");
  }
}

std::string describe(const std::map<std::string, std::string>& fields) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : fields) parts.push_back(k + "=" + v);
  return fmt::format("{}", fmt::join(parts, " "));
}

// Calls `visit` with every combination of the product's values (odometer order:
// the last field varies fastest).
template <typename Visit>
void for_each_combination(const FieldProduct& product, Visit&& visit) {
  std::vector<std::pair<std::string, const std::vector<std::string>*>> axes;
  for (const auto& [field, values] : product) axes.emplace_back(field, &values);
  std::vector<std::size_t> at(axes.size(), 0);
  for (;;) {
    std::map<std::string, std::string> fields;
    for (std::size_t i = 0; i < axes.size(); ++i) fields[axes[i].first] = (*axes[i].second)[at[i]];
    visit(fields);
    std::size_t i = axes.size();
    while (i > 0) {
      --i;
      if (++at[i] < axes[i].second->size()) break;
      at[i] = 0;
      if (i == 0) return;
    }
    if (axes.empty()) return;
  }
}

}  // namespace

SpecSet expand(const std::vector<FieldProduct>& products, const ExpandOptions& options) {
  SpecSet result;
  std::set<std::string> seen;
  for (std::size_t index = 0; index < products.size(); ++index) {
    const FieldProduct& product = products[index];
    check_product(product, options.source, index);
    for_each_combination(product, [&](const std::map<std::string, std::string>& fields) {
      try {
        KernelSpec spec = spec_from_fields(fields, options.default_arch);
        if (seen.insert(canonical_name(spec)).second) result.specs.push_back(spec);
      } catch (const SpecError& e) {
        if (!options.skip_invalid)
          throw SpecError(located(options.source, index, e.field()), e.value(),
                          fmt::format("{}; in the combination {}; pass --skip-invalid to skip such "
                                      "combinations",
                                      e.allowed(), describe(fields)));
        result.skipped.push_back(
            fmt::format("{}[{}] {}: {}", options.source, index, describe(fields), e.what()));
      }
    });
  }
  return result;
}

std::vector<FieldProduct> parse_spec_json(const std::string& json_text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw SpecError(source, "(not valid JSON)", fmt::format("a JSON list of objects; {}", e.what()));
  }
  if (doc.is_object()) doc = json::array({doc});
  if (!doc.is_array())
    throw SpecError(source, doc.type_name(), "a JSON list of objects with the CLI's field names");
  std::vector<FieldProduct> products;
  for (std::size_t index = 0; index < doc.size(); ++index) {
    const json& object = doc[index];
    if (!object.is_object())
      throw SpecError(fmt::format("{}[{}]", source, index), object.dump(),
                      "an object such as {\"input\": \"bf16\", \"arch\": \"sm_90a\"}");
    FieldProduct product;
    for (const auto& [field, value] : object.items()) {
      const std::string where = located(source, index, field);
      if (!is_field_name(field)) throw SpecError(where, "(unknown field)", all_field_names());
      std::vector<std::string>& values = product[field];
      if (value.is_array()) {
        if (value.empty()) throw SpecError(where, "[]", "at least one value");
        for (const json& item : value) values.push_back(scalar_text(item, where));
      } else {
        values.push_back(scalar_text(value, where));
      }
    }
    products.push_back(std::move(product));
  }
  return products;
}

std::vector<FieldProduct> read_spec_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw SpecError("--spec-file", file.string(), "a readable JSON file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_spec_json(text.str(), file.filename().string());
}

FieldProduct parse_field_args(const std::vector<std::string>& args) {
  FieldProduct product;
  for (const auto& arg : args) {
    const auto eq = arg.find('=');
    if (eq == std::string::npos || eq == 0)
      throw SpecError("argument", arg, "FIELD=VALUE[,VALUE...] with FIELD one of " + all_field_names());
    const std::string field = arg.substr(0, eq);
    if (!is_field_name(field)) throw SpecError(field, "(unknown field)", all_field_names());
    std::vector<std::string> values = split_commas(arg.substr(eq + 1));
    if (values.empty()) throw SpecError(field, "(empty)", "one or more comma-separated values");
    for (const auto& v : values)
      if (v.empty()) throw SpecError(field, arg.substr(eq + 1), "comma-separated values, none empty");
    auto& slot = product[field];
    slot.insert(slot.end(), values.begin(), values.end());
  }
  return product;
}

std::vector<FieldProduct> with_overrides(std::vector<FieldProduct> products, const FieldProduct& overrides) {
  for (auto& product : products)
    for (const auto& [field, values] : overrides) product[field] = values;
  return products;
}

std::vector<std::string> preset_names() { return {"serving-gqa", "serving-mla", "serving-dsa", "smoke"}; }

namespace {

// An MLA serving preset on one arch: bf16 Q and cache over `groups` heads, q_len 1 and 2
// (decode and one MTP draft), page 64; where the arch has fp8, the same over an fp8 cache
// and fp8 Q over it too (dense), or over DeepSeek-V3.2's fp8-with-scales cache (sparse).
void add_mla_serving(std::vector<FieldProduct>& products, const Arch& arch, bool fp8,
                     std::vector<std::string> groups, bool sparse) {
  FieldProduct bf16 = {{"kind", {"mla"}},
                       {"input", {"bf16"}},
                       {"kv", {"bf16"}},
                       {"page_size", {"64"}},
                       {"group", std::move(groups)},
                       {"q_len", {"1", "2"}},
                       {"arch", {arch.str()}}};
  if (sparse) bf16["sparse"] = {"1"};
  products.push_back(bf16);
  if (!fp8) return;
  FieldProduct mixed = bf16;  // bf16 activations over an fp8 cache
  mixed["kv"] = {sparse ? "fp8ds" : "fp8"};
  products.push_back(mixed);
  if (sparse) return;
  FieldProduct all_fp8 = mixed;
  all_fp8["input"] = {"fp8"};
  products.push_back(all_fp8);
}

}  // namespace

std::vector<FieldProduct> preset(const std::string& name, const std::vector<Arch>& archs) {
  if (archs.empty())
    throw SpecError("arch", "(missing)",
                    fmt::format("one or more archs for --preset {}, e.g. arch=sm_90a,sm_120a", name));
  std::vector<FieldProduct> products;
  for (const Arch& arch : archs) {
    // fp8 e4m3 needs sm_89 or newer; older archs get the 16-bit cache only.
    const bool fp8 = arch.number() >= 89;
    if (name == "serving-gqa") {
      FieldProduct same_type = {{"kind", {"gqa"}},
                                {"input", {"fp16", "bf16"}},
                                {"page_size", {"16", "32", "64", "128"}},
                                {"head_dim", {"64", "128", "256"}},
                                {"group", {"1", "2", "4", "8"}},
                                {"arch", {arch.str()}}};
      products.push_back(same_type);
      if (fp8) {
        FieldProduct fp8_cache = same_type;
        fp8_cache["kv"] = {"fp8"};
        products.push_back(fp8_cache);
      }
    } else if (name == "serving-mla") {
      // DeepSeek-V3-style serving: 16 heads (tensor-parallel 8) and 128 (data-parallel
      // attention), decode and one MTP draft, page 64; the backend resolves by arch.
      add_mla_serving(products, arch, fp8, {"16", "128"}, false);
    } else if (name == "serving-dsa") {
      // DeepSeek-V3.2 sparse attention (DSA) decode: 16/32/64/128 heads (tensor-parallel 8
      // to data-parallel attention), decode and one MTP draft, page 64, a bf16 and the
      // fp8-with-scales cache (kv=fp8ds, V3.2's 656-byte rows); the backend resolves by arch.
      add_mla_serving(products, arch, fp8, {"16", "32", "64", "128"}, true);
    } else if (name == "smoke") {
      products.push_back({{"input", {"fp16"}},
                          {"head_dim", {"128"}},
                          {"page_size", {"64"}},
                          {"group", {"4"}},
                          {"arch", {arch.str()}}});
      products.push_back({{"input", {"bf16"}},
                          {"head_dim", {"64"}},
                          {"page_size", {"16"}},
                          {"group", {"1"}},
                          {"arch", {arch.str()}}});
      products.push_back({{"input", {"bf16"}},
                          {"kv", {fp8 ? "fp8" : "bf16"}},
                          {"head_dim", {"128"}},
                          {"page_size", {"32"}},
                          {"group", {"8"}},
                          {"arch", {arch.str()}}});
    } else {
      throw SpecError("--preset", name, fmt::format("{}", fmt::join(preset_names(), ", ")));
    }
  }
  return products;
}

}  // namespace xqajit
