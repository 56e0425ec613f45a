#pragma once
/// Sets of kernel specs: spec files, FIELD=VALUE lists and built-in presets,
/// each expanded as a cartesian product of its fields' values.
///
///   [{"input": ["fp16", "bf16"], "head_dim": [64, 128], "arch": "sm_90a"}]
///     -> 4 specs (fp16/d64, fp16/d128, bf16/d64, bf16/d128)
///
/// Used by `xqajit prewarm`, `xqajit bundle pack` and embedders that prewarm
/// through Engine::prewarm().

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "xqajit/spec/spec.hpp"

namespace xqajit {

/// One product: each field (the CLI's names, see spec_field_names()) with one
/// or more values. Fields left out take spec_from_fields()'s defaults.
using FieldProduct = std::map<std::string, std::vector<std::string>>;

struct SpecSet {
  /// Valid specs, duplicates (same canonical name) removed, in first-seen order.
  std::vector<KernelSpec> specs;
  /// With skip_invalid: one message per invalid combination that was skipped.
  std::vector<std::string> skipped;
};

struct ExpandOptions {
  /// Skip invalid combinations (recording them in SpecSet::skipped) instead of
  /// throwing. Structural mistakes (unknown field, wrong JSON type, empty list)
  /// always throw: they are typos, not combinations.
  bool skip_invalid = false;
  /// Used when a product names no arch; null = arch is required.
  const Arch* default_arch = nullptr;
  /// Names the input in messages: "specs.json", "--preset serving-gqa", ...
  std::string source = "specs";
};

/// Expands every product. Throws SpecError whose field reads
/// "<source>[<product index>].<field>" for an invalid combination.
SpecSet expand(const std::vector<FieldProduct>& products, const ExpandOptions& options = {});

/// Parses JSON text: a list of objects (or one object) whose values are strings,
/// integers, booleans, or lists of those. Throws SpecError naming the source,
/// the object index and the field.
std::vector<FieldProduct> parse_spec_json(const std::string& json_text, const std::string& source = "specs");

/// Reads and parses a spec file (throws SpecError when it cannot be read).
std::vector<FieldProduct> read_spec_file(const std::filesystem::path& file);

/// Parses CLI arguments "FIELD=VALUE[,VALUE...]" into one product. Throws
/// SpecError for an argument without '=' or an unknown field.
FieldProduct parse_field_args(const std::vector<std::string>& args);

/// Sets `overrides`' fields in every product (e.g. arch=sm_90a,sm_120a on a preset).
std::vector<FieldProduct> with_overrides(std::vector<FieldProduct> products, const FieldProduct& overrides);

/// Built-in sets, by name:
///   serving-gqa  fp16/bf16 input x (same-type or fp8 cache) x page 16/32/64/128
///                x head dim 64/128/256 x group 1/2/4/8, per arch (fp8 only on
///                sm_89 and newer): 192 specs per fp8-capable arch.
///   smoke        3 small GQA specs per arch, for a quick check of a toolchain.
std::vector<std::string> preset_names();
/// The preset's products for each arch. Throws SpecError for an unknown name or
/// an empty arch list.
std::vector<FieldProduct> preset(const std::string& name, const std::vector<Arch>& archs);

}  // namespace xqajit
