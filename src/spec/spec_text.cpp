// The spec's text forms (include/xqajit/spec/spec.hpp): the canonical name and its
// parse (a name must print back to itself), and the FIELD=VALUE map the CLI, the C ABI
// and the tuning table read and write. Validation and flags are spec.cpp's.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "xqajit/error.hpp"
#include "xqajit/mla_args.h"
#include "xqajit/spec/spec.hpp"

namespace xqajit {
namespace {

int parse_int(const std::string& field, const std::string& text) {
  if (text.empty() || text.size() > 9 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); }))
    throw SpecError(field, text, "a non-negative integer");
  return std::stoi(text);
}

bool parse_bool(const std::string& field, const std::string& text) {
  if (text == "0" || text == "false" || text == "off") return false;
  if (text == "1" || text == "true" || text == "on") return true;
  throw SpecError(field, text, "0 or 1");
}

Kind parse_kind(const std::string& text) {
  if (text == "gqa") return Kind::gqa;
  if (text == "mla") return Kind::mla;
  throw SpecError("kind", text, "gqa, mla");
}

}  // namespace

std::string canonical_name(const KernelSpec& spec) {
  const KernelSpec s = normalized(spec);
  return fmt::format("{}_{}_kv{}_o{}_d{}_p{}_g{}_q{}_sw{}_t{}{}{}_{}_sm{}{}", to_string(s.kind),
                     to_string(s.input), to_string(s.kv), to_string(s.output), s.head_dim,
                     s.page_size, s.group, s.q_len, s.sliding_window ? 1 : 0, s.kv_tile,
                     s.cta_rows ? fmt::format("_r{}", s.cta_rows) : "", s.sparse ? "_sparse" : "",
                     to_string(s.backend), s.arch.number(), s.arch.accel ? "a" : "");
}

bool looks_like_name(const std::string& text) {
  return text.find('=') == std::string::npos && text.find('_') != std::string::npos;
}

KernelSpec parse_name(const std::string& name) {
  const std::string expected =
      "KIND_INPUT_kvKV_oOUT_dHEAD_pPAGE_gGROUP_qQLEN_sw{0|1}_tTILE[_rROWS][_sparse]_BACKEND_smARCH, "
      "e.g. gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t64_portable_sm90a";
  std::vector<std::string> parts;
  std::stringstream ss(name);
  for (std::string p; std::getline(ss, p, '_');) parts.push_back(p);
  auto field = [&](size_t i, const char* prefix) -> std::string {
    const std::string pre(prefix);
    if (i >= parts.size() || parts[i].rfind(pre, 0) != 0 || parts[i].size() == pre.size())
      throw SpecError("name", name, expected);
    return parts[i].substr(pre.size());
  };
  KernelSpec s;
  // Optional parts after the tile: rROWS (cta_rows where it is not the kernel's default),
  // then `sparse` (sparse MLA).
  if (parts.size() >= 13 && parts[parts.size() - 3] == "sparse") {
    s.sparse = true;
    parts.erase(parts.end() - 3);
  }
  if (parts.size() == 13 && parts[10].rfind('r', 0) == 0) {
    s.cta_rows = parse_int("cta_rows", field(10, "r"));
    parts.erase(parts.begin() + 10);
  }
  if (parts.size() != 12) throw SpecError("name", name, expected);
  s.kind = parse_kind(parts[0]);
  s.input = parse_dtype("input", field(1, ""));
  s.kv = parse_dtype("kv", field(2, "kv"));
  s.output = parse_dtype("output", field(3, "o"));
  s.head_dim = parse_int("head_dim", field(4, "d"));
  s.page_size = parse_int("page_size", field(5, "p"));
  s.group = parse_int("group", field(6, "g"));
  s.q_len = parse_int("q_len", field(7, "q"));
  s.sliding_window = parse_bool("sliding_window", field(8, "sw"));
  s.kv_tile = parse_int("kv_tile", field(9, "t"));
  if (parts[10] == "auto") throw SpecError("name", name, expected + " (a resolved backend: portable or hopper)");
  s.backend = parse_backend(parts[10]);
  s.arch = Arch::parse(field(11, "sm"));
  // Only a name that prints back to itself is canonical.
  if (canonical_name(s) != name) throw SpecError("name", name, "a canonical name: " + canonical_name(s));
  return s;
}

const std::vector<std::string>& spec_field_names() {
  static const std::vector<std::string> names = {"kind",     "input",     "kv",    "output",
                                                 "head_dim", "page_size", "group", "q_len",
                                                 "sliding_window", "arch", "kv_tile", "backend",
                                                 "cta_rows", "sparse"};
  return names;
}

KernelSpec spec_from_fields(const std::map<std::string, std::string>& fields,
                            const Arch* default_arch) {
  for (const auto& [key, value] : fields) {
    const auto& names = spec_field_names();
    if (std::find(names.begin(), names.end(), key) == names.end())
      throw SpecError(key, value, "a field name: " + fmt::format("{}", fmt::join(names, ", ")));
  }
  auto get = [&](const char* key) -> const std::string* {
    auto it = fields.find(key);
    return it == fields.end() ? nullptr : &it->second;
  };
  KernelSpec s;
  if (auto v = get("kind")) s.kind = parse_kind(*v);
  if (s.kind == Kind::mla) {  // DeepSeek-V3 at tensor-parallel 8: 16 heads, bf16
    s.input = DType::bf16;
    s.head_dim = XQAJIT_MLA_QK_DIM;
    s.group = 16;
  }
  if (auto v = get("input")) s.input = parse_dtype("input", *v);
  s.kv = s.input;
  s.output = s.kind == Kind::mla ? DType::bf16 : s.input;
  if (auto v = get("kv")) s.kv = parse_dtype("kv", *v);
  if (auto v = get("output")) s.output = parse_dtype("output", *v);
  if (auto v = get("head_dim")) s.head_dim = parse_int("head_dim", *v);
  if (auto v = get("page_size")) s.page_size = parse_int("page_size", *v);
  if (auto v = get("group")) s.group = parse_int("group", *v);
  if (auto v = get("q_len")) s.q_len = parse_int("q_len", *v);
  if (auto v = get("sliding_window")) s.sliding_window = parse_bool("sliding_window", *v);
  if (auto v = get("kv_tile")) s.kv_tile = parse_int("kv_tile", *v);
  if (auto v = get("backend")) s.backend = parse_backend(*v);
  if (auto v = get("cta_rows")) s.cta_rows = parse_int("cta_rows", *v);
  if (auto v = get("sparse")) s.sparse = parse_bool("sparse", *v);
  if (auto v = get("arch")) s.arch = Arch::parse(*v);
  else if (default_arch) s.arch = *default_arch;
  else throw SpecError("arch", "(missing)", "an arch such as sm_90a; no GPU was found to default to");
  validate(s);
  return s;
}

std::map<std::string, std::string> spec_to_fields(const KernelSpec& spec) {
  const KernelSpec s = normalized(spec);
  return {{"kind", to_string(s.kind)},
          {"input", to_string(s.input)},
          {"kv", to_string(s.kv)},
          {"output", to_string(s.output)},
          {"head_dim", std::to_string(s.head_dim)},
          {"page_size", std::to_string(s.page_size)},
          {"group", std::to_string(s.group)},
          {"q_len", std::to_string(s.q_len)},
          {"sliding_window", s.sliding_window ? "1" : "0"},
          {"arch", s.arch.str()},
          {"kv_tile", std::to_string(s.kv_tile)},
          {"backend", to_string(s.backend)},
          {"cta_rows", std::to_string(s.cta_rows)},
          {"sparse", s.sparse ? "1" : "0"}};
}

}  // namespace xqajit
