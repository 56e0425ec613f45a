// Spec sets: spec-file JSON and FIELD=VALUE lists expanded as cartesian
// products, their errors, and the built-in presets.

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "support/expect_error.hpp"
#include "xqajit/error.hpp"
#include "xqajit/spec/spec_set.hpp"

using namespace xqajit;
using xqajit::test::spec_error;

namespace {

SpecSet expand_json(const std::string& text, bool skip_invalid = false) {
  ExpandOptions options;
  options.skip_invalid = skip_invalid;
  options.source = "specs.json";
  return expand(parse_spec_json(text, "specs.json"), options);
}

std::set<std::string> names_of(const SpecSet& set) {
  std::set<std::string> names;
  for (const auto& spec : set.specs) names.insert(canonical_name(spec));
  return names;
}

}  // namespace

TEST_CASE("a product of lists expands to every combination", "[spec_set]") {
  const SpecSet set =
      expand_json(R"([{"input": ["fp16", "bf16"], "head_dim": [64, 128], "group": 4, "arch": "sm_90a"}])");
  REQUIRE(set.specs.size() == 4);
  CHECK(set.skipped.empty());
  CHECK(names_of(set) == std::set<std::string>{
                             "gqa_fp16_kvfp16_ofp16_d64_p64_g4_q1_sw0_t64_portable_sm90a",
                             "gqa_fp16_kvfp16_ofp16_d128_p64_g4_q1_sw0_t64_portable_sm90a",
                             "gqa_bf16_kvbf16_obf16_d64_p64_g4_q1_sw0_t64_portable_sm90a",
                             "gqa_bf16_kvbf16_obf16_d128_p64_g4_q1_sw0_t64_portable_sm90a",
                         });
  // Several objects add up; a single object (not in a list) is accepted too.
  CHECK(expand_json(R"([{"arch": "sm_90a"}, {"arch": "sm_80", "page_size": [16, 32]}])").specs.size() == 3);
  CHECK(expand_json(R"({"arch": "sm_90a", "group": [1, 2, 8]})").specs.size() == 3);
}

TEST_CASE("numbers may be JSON numbers or strings, booleans true/false", "[spec_set]") {
  const SpecSet set = expand_json(
      R"([{"head_dim": "128", "page_size": 32, "sliding_window": [true, false], "q_len": "1", "arch": "sm_90a"}])");
  REQUIRE(set.specs.size() == 2);
  CHECK(set.specs[0].page_size == 32);
  CHECK(set.specs[0].sliding_window != set.specs[1].sliding_window);
}

TEST_CASE("duplicates are removed by canonical name, first one kept", "[spec_set]") {
  // 128 and "128" are the same; kv_tile 0 normalizes to the default 64.
  const SpecSet set = expand_json(
      R"([{"head_dim": [128, "128"], "arch": "sm_90a"}, {"kv_tile": [0, 64], "arch": "sm_90a"}])");
  CHECK(set.specs.size() == 1);
}

TEST_CASE("an invalid combination is an error naming the object and field", "[spec_set]") {
  // fp8 needs sm_89 or newer: the second object's sm_80 x fp8 combination is invalid.
  const std::string text =
      R"([{"arch": "sm_90a"}, {"kv": ["bf16", "fp8"], "input": "bf16", "arch": ["sm_80", "sm_90a"]}])";
  const SpecError e = spec_error([&] { expand_json(text); });
  CHECK(e.field() == "specs.json[1].arch");
  CHECK(e.value() == "sm_80");
  CHECK_THAT(e.what(),
             Catch::Contains("sm_89") && Catch::Contains("kv=fp8") && Catch::Contains("--skip-invalid"));

  SECTION("skip_invalid collects it and keeps the rest") {
    const SpecSet set = expand_json(text, /*skip_invalid=*/true);
    CHECK(set.specs.size() == 4);  // 1 + (bf16 x 2 archs) + (fp8 x sm_90a)
    REQUIRE(set.skipped.size() == 1);
    CHECK_THAT(set.skipped[0], Catch::Contains("specs.json[1]") && Catch::Contains("arch=sm_80"));
  }
  SECTION("a bad value is reported the same way") {
    const SpecError bad =
        spec_error([] { expand_json(R"([{"arch": "sm_90a", "head_dim": [128, 100]}])"); });
    CHECK(bad.field() == "specs.json[0].head_dim");
    CHECK(bad.value() == "100");
  }
}

TEST_CASE("structural mistakes are errors even with skip_invalid", "[spec_set]") {
  struct Case {
    const char* text;
    const char* field;
  };
  const Case cases[] = {
      {R"([{"arch": "sm_90a", "head_dims": 128}])", "specs.json[0].head_dims"},  // typo
      {R"([{"arch": "sm_90a"}, {"head_dim": 1.5}])", "specs.json[1].head_dim"},  // float
      {R"([{"arch": "sm_90a", "group": []}])", "specs.json[0].group"},           // empty list
      {R"([{"arch": {"x": 1}}])", "specs.json[0].arch"},                         // object value
      {R"([{"arch": [["sm_90a"]]}])", "specs.json[0].arch"},                     // nested list
      {R"([{"arch": "sm_90a"}, 42])", "specs.json[1]"},                          // not an object
      {R"("sm_90a")", "specs.json"},                                             // not a list
      {R"([{"arch": "sm_90a",)", "specs.json"},                                  // not JSON
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const SpecError e = spec_error([&] { expand_json(c.text, /*skip_invalid=*/true); });
    CHECK(e.field() == c.field);
  }
  // arch is required when there is no default.
  CHECK(spec_error([] { expand_json(R"([{"input": "bf16"}])"); }).field() == "specs.json[0].arch");
  const Arch sm90a = Arch::parse("sm_90a");
  ExpandOptions with_default;
  with_default.default_arch = &sm90a;
  CHECK(expand(parse_spec_json(R"([{"input": "bf16"}])"), with_default).specs.at(0).arch == sm90a);
}

TEST_CASE("spec files are read from disk", "[spec_set]") {
  const auto file = std::filesystem::temp_directory_path() / "xqajit_test_spec_set.json";
  {
    std::ofstream out(file);
    out << R"([{"input": ["fp16", "bf16"], "arch": "sm_90a"}])";
  }
  const auto products = read_spec_file(file);
  std::filesystem::remove(file);
  CHECK(expand(products).specs.size() == 2);
  CHECK_THROWS_AS(read_spec_file(file), SpecError);  // gone now
}

TEST_CASE("FIELD=VALUE arguments with comma-separated lists", "[spec_set]") {
  const FieldProduct product = parse_field_args({"input=fp16,bf16", "arch=sm_90a,sm_120a", "head_dim=128"});
  CHECK(product.at("input") == std::vector<std::string>{"fp16", "bf16"});
  CHECK(expand({product}).specs.size() == 4);
  CHECK_THROWS_AS(parse_field_args({"input"}), SpecError);
  CHECK_THROWS_AS(parse_field_args({"=fp16"}), SpecError);
  CHECK_THROWS_AS(parse_field_args({"inptu=fp16"}), SpecError);
  CHECK_THROWS_AS(parse_field_args({"input=fp16,,bf16"}), SpecError);
  CHECK_THROWS_AS(parse_field_args({"input="}), SpecError);

  const auto overridden =
      with_overrides({{{"input", {"fp16"}}, {"arch", {"sm_80"}}}}, {{"arch", {"sm_90a"}}});
  CHECK(overridden.at(0).at("arch") == std::vector<std::string>{"sm_90a"});
  CHECK(overridden.at(0).at("input") == std::vector<std::string>{"fp16"});
}

TEST_CASE("the serving-gqa preset covers the serving GQA family", "[spec_set][preset]") {
  const Arch sm90a = Arch::parse("sm_90a"), sm120a = Arch::parse("sm_120a"), sm80 = Arch::parse("sm_80");
  // fp16/bf16 x (same or fp8 cache) x 4 pages x 3 head dims x 4 groups
  const SpecSet hopper = expand(preset("serving-gqa", {sm90a}));
  CHECK(hopper.specs.size() == 2 * 2 * 4 * 3 * 4);
  CHECK(hopper.skipped.empty());
  std::set<int> pages, dims, groups;
  int fp8 = 0;
  for (const auto& s : hopper.specs) {
    pages.insert(s.page_size), dims.insert(s.head_dim), groups.insert(s.group);
    fp8 += s.kv == DType::fp8;
    CHECK(s.arch == sm90a);
  }
  CHECK(pages == std::set<int>{16, 32, 64, 128});
  CHECK(dims == std::set<int>{64, 128, 256});
  CHECK(groups == std::set<int>{1, 2, 4, 8});
  CHECK(fp8 == 96);

  // Two archs at once; fp8 is left out where the arch cannot run it.
  CHECK(expand(preset("serving-gqa", {sm90a, sm120a})).specs.size() == 384);
  CHECK(expand(preset("serving-gqa", {sm80})).specs.size() == 96);

  // serving-mla: 3 dtype pairs x H 16/128 x q_len 1/2 per arch; bf16 only before sm_89.
  const SpecSet mla = expand(preset("serving-mla", {sm90a, sm120a}));
  CHECK(mla.specs.size() == 24);
  for (const auto& s : mla.specs) {
    CHECK(s.kind == Kind::mla);
    // auto resolves to hopper on sm_90a (spec.cpp, default_backend), portable elsewhere.
    CHECK(normalized(s).backend == (s.arch == sm90a ? Backend::hopper : Backend::portable));
  }
  CHECK(expand(preset("serving-mla", {sm80})).specs.size() == 4);

  // serving-dsa (DeepSeek-V3.2 sparse): 2 cache types (bf16, fp8ds) x H 16/32/64/128 x q_len 1/2 per arch,
  // all sparse; hopper on sm_90a (below 64 heads at q_len 2, a CTA a token), portable elsewhere;
  // bf16 only before sm_89.
  const SpecSet dsa = expand(preset("serving-dsa", {sm90a, sm120a}));
  CHECK(dsa.specs.size() == 32);
  int fp8ds = 0;  // the other cache type: V3.2's fp8-with-scales rows
  for (const auto& s : dsa.specs) fp8ds += s.kv == DType::fp8ds;
  CHECK(fp8ds == 16);
  for (const auto& s : dsa.specs) {
    CHECK(s.sparse);
    const bool hopper = s.arch == sm90a;
    CHECK(normalized(s).backend == (hopper ? Backend::hopper : Backend::portable));
    CHECK(canonical_name(normalized(s)).find(hopper ? "_sparse_hopper_" : "_sparse_portable_") != std::string::npos);
  }
  CHECK(expand(preset("serving-dsa", {sm80})).specs.size() == 8);

  const SpecSet smoke = expand(preset("smoke", {sm90a}));
  CHECK(smoke.specs.size() >= 2);
  CHECK(smoke.specs.size() <= 4);
  CHECK(expand(preset("smoke", {sm80})).specs.size() == smoke.specs.size());

  CHECK(spec_error([&] { preset("serving", {sm90a}); }).field() == "--preset");
  CHECK(spec_error([] { preset("smoke", {}); }).field() == "arch");
  for (const auto& name : preset_names()) CHECK_NOTHROW(expand(preset(name, {sm90a})));
}
