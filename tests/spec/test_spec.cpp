// Spec validation, canonical names (golden), parse <-> print round trip, flags.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "support/expect_error.hpp"
#include "xqajit/error.hpp"
#include "xqajit/spec/spec.hpp"

using namespace xqajit;
using xqajit::test::spec_error;

namespace {

KernelSpec gqa(const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> f = {{"arch", "sm_90a"}};
  for (auto& [k, v] : extra) f[k] = v;
  return spec_from_fields(f);
}

bool has_flag(const KernelSpec& s, const std::string& flag) {
  const auto fl = flags(s);
  return std::find(fl.begin(), fl.end(), flag) != fl.end();
}

}  // namespace

TEST_CASE("golden canonical names", "[spec]") {
  // These names are the cache keys on disk and in bundles: changing them
  // orphans every cached cubin, so they are pinned here.
  CHECK(canonical_name(gqa()) == "gqa_fp16_kvfp16_ofp16_d128_p64_g1_q1_sw0_t64_portable_sm90a");
  CHECK(canonical_name(gqa({{"input", "bf16"}, {"kv", "fp8"}, {"group", "8"}})) ==
        "gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t128_portable_sm90a");
  CHECK(canonical_name(gqa({{"input", "bf16"}, {"kv", "fp8"}, {"output", "fp8"}, {"head_dim", "256"},
                            {"page_size", "16"}, {"q_len", "4"}, {"sliding_window", "1"},
                            {"arch", "sm_120a"}})) ==
        "gqa_bf16_kvfp8_ofp8_d256_p16_g1_q4_sw1_t64_portable_sm120a");
  // The fp8-cache tile default: 128 keys for one row tile at D <= 128, else as 16-bit.
  CHECK(canonical_name(gqa({{"kv", "fp8"}, {"group", "16"}})) == "gqa_fp16_kvfp8_ofp16_d128_p64_g16_q1_sw0_t128_portable_sm90a");
  CHECK(canonical_name(gqa({{"kv", "fp8"}, {"group", "32"}})) == "gqa_fp16_kvfp8_ofp16_d128_p64_g32_q1_sw0_t64_portable_sm90a");
  CHECK(canonical_name(gqa({{"kv", "fp8"}, {"group", "8"}, {"q_len", "3"}})) == "gqa_fp16_kvfp8_ofp16_d128_p64_g8_q3_sw0_t64_portable_sm90a");
  CHECK(canonical_name(gqa({{"kv", "fp8"}, {"head_dim", "256"}})) == "gqa_fp16_kvfp8_ofp16_d256_p64_g1_q1_sw0_t64_portable_sm90a");
  CHECK(canonical_name(spec_from_fields({{"kind", "mla"}, {"group", "128"}, {"arch", "sm_90"}})) ==
        "mla_bf16_kvbf16_obf16_d576_p64_g128_q1_sw0_t32_portable_sm90");
  CHECK(canonical_name(spec_from_fields({{"kind", "mla"}, {"input", "fp8"}, {"group", "16"}, {"arch", "sm_120a"}})) ==
        "mla_fp8_kvfp8_obf16_d576_p64_g16_q1_sw0_t32_portable_sm120");
}

TEST_CASE("names parse back to the same spec", "[spec]") {
  for (const auto& s : {gqa(), gqa({{"input", "bf16"}, {"kv", "fp8"}, {"output", "fp8"}, {"q_len", "3"}}),
                        gqa({{"head_dim", "64"}, {"page_size", "128"}, {"group", "16"}, {"arch", "sm_80"}}),
                        spec_from_fields({{"kind", "mla"}, {"group", "64"}, {"arch", "sm_100a"}})}) {
    const std::string name = canonical_name(s);
    const KernelSpec back = parse_name(name);
    CHECK(back == normalized(s));
    CHECK(canonical_name(back) == name);
    CHECK(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos);
  }
}

TEST_CASE("field order and defaults do not change the name", "[spec]") {
  const auto a = spec_from_fields({{"arch", "sm_90a"}, {"input", "bf16"}, {"group", "4"}});
  const auto b = spec_from_fields({{"group", "4"}, {"input", "bf16"}, {"arch", "sm_90a"}, {"kv", "bf16"}, {"output", "bf16"}});
  CHECK(canonical_name(a) == canonical_name(b));
  CHECK(canonical_name(gqa({{"kv_tile", "64"}})) == canonical_name(gqa()));
}

TEST_CASE("malformed names are rejected", "[spec]") {
  for (const char* bad : {"", "gqa", "gqa_fp16_kvfp16_ofp16_d128_p64_g1_q1_sw0_t64",
                          "gqa_fp16_kvfp16_ofp16_d128_p64_g1_q1_sw0_t64_portable_sm90a_extra",
                          "xyz_fp16_kvfp16_ofp16_d128_p64_g1_q1_sw0_t64_sm90a",
                          "gqa_fp16_kvfp16_ofp16_d100_p64_g1_q1_sw0_t64_portable_sm90a",
                          "gqa_fp16_kvfp16_ofp16_d128_p64_g01_q1_sw0_t64_portable_sm90a"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_name(bad), SpecError);
  }
}

TEST_CASE("invalid values name the field, the value and what is allowed", "[spec]") {
  auto e = spec_error([] { gqa({{"head_dim", "100"}}); });
  CHECK(e.field() == "head_dim");
  CHECK(e.value() == "100");
  CHECK(e.allowed() == "64, 128, 256");
  CHECK(std::string(e.what()).find("head_dim=100") != std::string::npos);

  // One bad field each: "kv bf16" is a bf16 cache under the default fp16 input.
  const std::pair<const char*, const char*> bad[] = {
      {"page_size", "48"}, {"group", "0"},    {"group", "65"},         {"q_len", "0"},    {"input", "fp32"},
      {"input", "fp8"},    {"kv", "bf16"},    {"sliding_window", "2"}, {"arch", "sm_70"}, {"arch", "sm_89a"},
      {"arch", "banana"},  {"kv_tile", "48"}, {"colour", "red"},       {"head_dim", "-1"}};
  for (const auto& field_value : bad) {
    INFO(field_value.first << "=" << field_value.second);
    CHECK(spec_error([&] { gqa({field_value}); }).field() == field_value.first);
  }
}

TEST_CASE("invalid combinations are rejected", "[spec]") {
  // fp8 output needs a quantized cache.
  auto e = spec_error([] { gqa({{"input", "bf16"}, {"output", "fp8"}}); });
  CHECK(e.field() == "output");
  CHECK(e.allowed().find("fp8 KV cache") != std::string::npos);
  // fp8 needs Ada or newer.
  CHECK(spec_error([] { gqa({{"kv", "fp8"}, {"arch", "sm_80"}}); }).field() == "arch");
  // MLA: head dim 576 only, bf16 output, kv = input, no sliding window.
  CHECK(spec_error([] { spec_from_fields({{"kind", "mla"}, {"head_dim", "128"}, {"arch", "sm_90a"}}); }).field() == "head_dim");
  CHECK(spec_error([] { spec_from_fields({{"kind", "mla"}, {"input", "fp16"}, {"arch", "sm_90a"}}); }).field() == "input");
  CHECK(spec_error([] { spec_from_fields({{"kind", "mla"}, {"input", "fp8"}, {"kv", "bf16"}, {"arch", "sm_90a"}}); }).field() == "kv");
  // ... but a bf16 Q over an fp8 cache is a deployment MLA serves.
  CHECK(canonical_name(spec_from_fields({{"kind", "mla"}, {"kv", "fp8"}, {"arch", "sm_90a"}, {"backend", "hopper"}})) ==
        "mla_bf16_kvfp8_obf16_d576_p64_g16_q1_sw0_t64_hopper_sm90a");
  CHECK(spec_error([] { spec_from_fields({{"kind", "mla"}, {"group", "24"}, {"arch", "sm_90a"}}); }).allowed().find("16, 32, 64, 128") != std::string::npos);
  CHECK(spec_error([] { spec_from_fields({{"kind", "mla"}, {"page_size", "16"}, {"arch", "sm_90a"}}); }).field() == "page_size");
  CHECK(spec_error([] { spec_from_fields({{"kind", "mla"}, {"q_len", "5"}, {"arch", "sm_90a"}}); }).field() == "q_len");
  CHECK(spec_error([] { spec_from_fields({{"kind", "mla"}, {"sliding_window", "1"}, {"arch", "sm_90a"}}); }).field() == "sliding_window");
  // An arch the installed NVRTC cannot target.
  KernelSpec s = gqa({{"arch", "sm_121a"}});
  auto e2 = spec_error([&] { validate(s, {80, 86, 89, 90, 100, 120}); });
  CHECK(e2.field() == "arch");
  CHECK(e2.allowed().find("installed NVRTC") != std::string::npos);
  // A missing arch with nothing to default to.
  CHECK(spec_error([] { spec_from_fields({{"input", "bf16"}}); }).field() == "arch");
  // A default arch fills it in.
  const Arch def = Arch::parse("sm_90a");
  CHECK(spec_from_fields({{"input", "bf16"}}, &def).arch == def);
}

TEST_CASE("flags per family", "[spec]") {
  auto mla = [](std::map<std::string, std::string> f) {
    f["kind"] = "mla";
    f["arch"] = "sm_90a";
    return spec_from_fields(f);
  };
  // Each spec, and flags it must carry among others.
  const std::pair<KernelSpec, std::vector<std::string>> expected[] = {
      {gqa({{"input", "bf16"}, {"group", "8"}, {"page_size", "32"}, {"head_dim", "64"}}),
       {"-DCACHE_ELEM_ENUM=0", "-DINPUT_FP16=0", "-DHEAD_ELEMS=64", "-DHEAD_GRP_SIZE=8",
        "-DTOKENS_PER_PAGE=32", "-DBEAM_WIDTH=1", "-DSPEC_DEC=0", "-DLOW_PREC_OUTPUT=0", "-DMLA_BF16=0",
        "-DIS_MLA=0"}},
      {gqa(), {"-DINPUT_FP16=1"}},
      {gqa({{"kv", "fp8"}}), {"-DCACHE_ELEM_ENUM=2"}},
      {gqa({{"kv", "fp8"}, {"output", "fp8"}}), {"-DLOW_PREC_OUTPUT=1"}},
      {gqa({{"sliding_window", "1"}}), {"-DSLIDING_WINDOW=1"}},
      {gqa({{"q_len", "4"}}), {"-DSPEC_DEC=1", "-DSPEC_Q_SEQ_LEN=4"}},
      {mla({{"group", "128"}}), {"-DMLA_BF16=1", "-DIS_MLA=1", "-DHEAD_ELEMS=576"}},
      {mla({{"input", "fp8"}, {"group", "128"}}), {"-DMLA_BF16=0", "-DCACHE_ELEM_ENUM=2", "-DINPUT_FP8=1"}},
      {mla({{"kv", "fp8"}}), {"-DMLA_BF16=0", "-DINPUT_FP8=0", "-DCACHE_ELEM_ENUM=2"}},
  };
  for (const auto& [spec, spec_flags] : expected)
    for (const std::string& flag : spec_flags) {
      INFO(canonical_name(spec) << " " << flag);
      CHECK(has_flag(spec, flag));
    }
}

TEST_CASE("backends resolve by arch and are named", "[spec]") {
  auto mla = [](const char* arch, const char* backend, const char* group = "128") {
    return spec_from_fields({{"kind", "mla"}, {"arch", arch}, {"backend", backend}, {"group", group}});
  };
  CHECK(normalized(mla("sm_90a", "auto")).backend == Backend::hopper);
  // MLA's auto on sm_90a is hopper at every row count (since m4-m5, session 19).
  CHECK(normalized(mla("sm_90a", "auto", "16")).backend == Backend::hopper);
  CHECK(normalized(mla("sm_90a", "auto", "32")).backend == Backend::hopper);
  CHECK(normalized(mla("sm_90a", "auto", "64")).backend == Backend::hopper);
  auto mla_fields = [](std::map<std::string, std::string> f) {
    f["kind"] = "mla";
    f["arch"] = "sm_90a";
    return normalized(spec_from_fields(f)).backend;
  };
  CHECK(mla_fields({{"group", "32"}, {"input", "fp8"}, {"kv", "fp8"}}) == Backend::hopper);
  CHECK(mla_fields({{"group", "32"}, {"kv", "fp8"}}) == Backend::hopper);
  CHECK(mla_fields({{"group", "16"}, {"input", "fp8"}, {"kv", "fp8"}}) == Backend::hopper);
  CHECK(mla_fields({{"group", "16"}, {"q_len", "2"}}) == Backend::hopper);
  CHECK(mla_fields({{"group", "16"}, {"q_len", "2"}, {"kv", "fp8"}}) == Backend::hopper);
  CHECK(mla_fields({{"group", "16"}, {"q_len", "3"}}) == Backend::hopper);
  CHECK(normalized(mla("sm_90", "auto")).backend == Backend::portable);
  CHECK(normalized(mla("sm_120a", "auto")).backend == Backend::portable);
  CHECK(normalized(mla("sm_90a", "portable")).backend == Backend::portable);
  CHECK(canonical_name(mla("sm_90a", "portable", "16")) == "mla_bf16_kvbf16_obf16_d576_p64_g16_q1_sw0_t32_portable_sm90");
  // The portable backend builds for the plain arch (it runs on every 9.x).
  CHECK_THROWS_AS(parse_name("mla_bf16_kvbf16_obf16_d576_p64_g16_q1_sw0_t32_portable_sm90a"), SpecError);
  // hopper needs sm_90a; the error says what this arch has.
  auto e = spec_error([&] { mla("sm_120a", "hopper"); });
  CHECK(e.field() == "backend");
  CHECK(e.allowed().find("portable") != std::string::npos);
  CHECK(e.allowed().find("sm_90a") != std::string::npos);
  CHECK(spec_error([&] { mla("sm_90", "hopper"); }).field() == "backend");
  // GQA: portable everywhere, hopper on sm_90a only (auto resolves to
  // portable in a spec; decode_plan picks per shape).
  CHECK(normalized(gqa({{"arch", "sm_90a"}, {"backend", "hopper"}})).backend == Backend::hopper);
  CHECK(spec_error([] { gqa({{"arch", "sm_90"}, {"backend", "hopper"}}); }).field() == "backend");
  CHECK(spec_error([] { gqa({{"arch", "sm_120a"}, {"backend", "hopper"}}); }).allowed().find("sm_90a") !=
        std::string::npos);
  CHECK(spec_error([] { gqa({{"arch", "sm_90a"}, {"backend", "hopper"}, {"kv_tile", "32"}}); }).field() == "kv_tile");
  CHECK(normalized(gqa({{"arch", "sm_90a"}, {"backend", "hopper"}})).kv_tile == 64);
  CHECK(normalized(gqa({{"backend", "auto"}})).backend == Backend::portable);
  CHECK(backends_for(Kind::gqa, Arch::parse("sm_90a")) == std::vector<Backend>{Backend::portable, Backend::hopper});
  CHECK(backends_for(Kind::gqa, Arch::parse("sm_90")) == std::vector<Backend>{Backend::portable});
  // What a launch of an auto spec runs by the measured rule, and what it may pick
  // (so what prewarm compiles for it).
  CHECK(planned_backend(gqa({{"kv", "fp8"}, {"input", "bf16"}})) == Backend::hopper);
  CHECK(planned_backend(gqa({{"kv", "fp8"}, {"input", "bf16"}, {"q_len", "2"}})) == Backend::hopper);
  // A 16-bit cache with speculative decoding at head_dim 128: hopper (session 16, tuner).
  CHECK(planned_backend(gqa({{"input", "bf16"}, {"q_len", "2"}})) == Backend::hopper);
  CHECK(planned_backend(gqa({{"head_dim", "128"}})) == Backend::portable);
  // A 16-bit cache: hopper where the launch splits the sequence, at head_dim 128 and q_len 1.
  CHECK(planned_backend(gqa({{"head_dim", "128"}}), /*split_launch=*/true) == Backend::hopper);
  // ... and at head_dim 256 with one query token, split or not; portable otherwise.
  CHECK(planned_backend(gqa({{"head_dim", "256"}}), true) == Backend::hopper);
  CHECK(planned_backend(gqa({{"head_dim", "256"}})) == Backend::hopper);
  CHECK(planned_backend(gqa({{"head_dim", "256"}, {"q_len", "2"}}), true) == Backend::portable);
  CHECK(planned_backend(gqa({{"head_dim", "64"}}), true) == Backend::portable);
  CHECK(planned_backend(gqa({{"input", "bf16"}, {"q_len", "2"}}), true) == Backend::hopper);
  CHECK(planned_backend(gqa({{"head_dim", "128"}, {"arch", "sm_90"}}), true) == Backend::portable);
  CHECK(planned_backend(gqa({{"kv", "fp8"}, {"input", "bf16"}, {"backend", "portable"}})) == Backend::portable);
  CHECK(planned_backend(mla("sm_90a", "auto")) == Backend::hopper);
  CHECK(planned_backend(mla("sm_90", "auto")) == Backend::portable);
  CHECK(launch_backends(gqa({{"kv", "fp8"}, {"input", "bf16"}})) ==
        std::vector<Backend>{Backend::portable, Backend::hopper});
  CHECK(launch_backends(gqa({{"kv", "fp8"}, {"input", "bf16"}, {"head_dim", "256"}})) ==
        std::vector<Backend>{Backend::portable, Backend::hopper});
  CHECK(launch_backends(gqa({{"head_dim", "128"}})) == std::vector<Backend>{Backend::portable, Backend::hopper});
  CHECK(launch_backends(gqa({{"head_dim", "256"}})) == std::vector<Backend>{Backend::portable, Backend::hopper});
  CHECK(launch_backends(gqa({{"head_dim", "256"}, {"q_len", "2"}})) == std::vector<Backend>{Backend::portable});
  CHECK(launch_backends(gqa({{"kv", "fp8"}, {"input", "bf16"}, {"q_len", "4"}})) ==
        std::vector<Backend>{Backend::portable, Backend::hopper});
  CHECK(launch_backends(gqa({{"input", "bf16"}, {"q_len", "4"}})) ==
        std::vector<Backend>{Backend::portable, Backend::hopper});
  CHECK(launch_backends(gqa({{"kv", "fp8"}, {"input", "bf16"}, {"kv_tile", "32"}})) ==
        std::vector<Backend>{Backend::portable});
  CHECK(launch_backends(gqa({{"kv", "fp8"}, {"input", "bf16"}, {"backend", "portable"}})) ==
        std::vector<Backend>{Backend::portable});
  CHECK(launch_backends(gqa({{"kv", "fp8"}, {"input", "bf16"}, {"arch", "sm_90"}})) ==
        std::vector<Backend>{Backend::portable});
  CHECK(launch_backends(mla("sm_90a", "auto")) == std::vector<Backend>{Backend::hopper});
  CHECK(launch_backends(mla("sm_90a", "auto", "16")) == std::vector<Backend>{Backend::hopper});
  CHECK(launch_backends(mla("sm_90a", "auto", "32")) == std::vector<Backend>{Backend::hopper});
  const std::map<std::string, std::string> fp8 = {{"kv", "fp8"}, {"input", "bf16"}};
  auto with = [&](std::map<std::string, std::string> f, const char* k, const char* v) { f[k] = v; return gqa(f); };
  const auto variants = launch_variants({gqa(fp8), with(fp8, "backend", "portable"), gqa({{"head_dim", "64"}})});
  REQUIRE(variants.size() == 4);  // portable + hopper, the explicit portable, D=64 (still auto)
  CHECK(variants[0].backend == Backend::portable);
  CHECK(variants[1].backend == Backend::hopper);
  CHECK(variants[2].backend == Backend::portable);
  CHECK(variants[3].head_dim == 64);
  CHECK(variants[3].backend == Backend::automatic);
  CHECK(spec_error([] { gqa({{"backend", "fast"}}); }).allowed() == "auto, portable, hopper");
  // Names carry only resolved backends.
  CHECK_THROWS_AS(parse_name("gqa_fp16_kvfp16_ofp16_d128_p64_g1_q1_sw0_t64_auto_sm90a"), SpecError);
  CHECK(parse_name("mla_fp8_kvfp8_obf16_d576_p32_g128_q2_sw0_t64_hopper_sm90a").backend == Backend::hopper);
  CHECK(backends_for(Kind::mla, Arch::parse("sm_90a")) == std::vector<Backend>{Backend::hopper, Backend::portable});
}

TEST_CASE("arch parsing", "[spec]") {
  CHECK(Arch::parse("sm_90a") == Arch{9, 0, true});
  CHECK(Arch::parse("sm90a") == Arch{9, 0, true});
  CHECK(Arch::parse("120a") == Arch{12, 0, true});
  CHECK(Arch::parse("sm_86").str() == "sm_86");
  CHECK(Arch::parse("sm_121a").number() == 121);
  CHECK_THROWS_AS(Arch::parse("sm_"), SpecError);
  CHECK_THROWS_AS(Arch::parse("sm_75"), SpecError);
}

TEST_CASE("rows per CTA: a named variant of the hopper kernel, and the plan's small-batch rule", "[spec]") {
  const std::map<std::string, std::string> q8 = {{"input", "bf16"}, {"group", "4"}, {"q_len", "8"},
                                                 {"backend", "hopper"}};
  auto with = [](std::map<std::string, std::string> f, const char* k, const char* v) { f[k] = v; return gqa(f); };
  // Named only where it is not the kernel's own N (32 rows here), and printed back to itself.
  const KernelSpec r8 = with(q8, "cta_rows", "8");
  CHECK(canonical_name(r8) == "gqa_bf16_kvbf16_obf16_d128_p64_g4_q8_sw0_t64_r8_hopper_sm90a");
  CHECK(parse_name(canonical_name(r8)) == normalized(r8));
  CHECK(canonical_name(with(q8, "cta_rows", "32")) == canonical_name(gqa(q8)));
  CHECK(canonical_name(with(q8, "cta_rows", "64")) == canonical_name(gqa(q8)));
  CHECK(canonical_name(gqa(q8)) == "gqa_bf16_kvbf16_obf16_d128_p64_g4_q8_sw0_t64_hopper_sm90a");
  CHECK_THROWS_AS(parse_name("gqa_bf16_kvbf16_obf16_d128_p64_g4_q8_sw0_t64_r32_hopper_sm90a"), SpecError);
  CHECK_THROWS_AS(parse_name("gqa_bf16_kvbf16_obf16_d128_p64_g4_q8_sw0_t64_x8_hopper_sm90a"), SpecError);
  CHECK(has_flag(r8, "-DCTA_ROWS=8"));
  CHECK(has_flag(gqa(q8), "-DCTA_ROWS=0"));
  CHECK(spec_to_fields(r8).at("cta_rows") == "8");
  // Bad values name the field and what is allowed.
  SpecError e = spec_error([&] { with(q8, "cta_rows", "12"); });
  CHECK(e.field() == "cta_rows");
  CHECK(e.allowed() == "0 (default), 8, 16, 32, 64");
  e = spec_error([&] {
    auto f = q8;
    f["backend"] = "portable";
    with(f, "cta_rows", "8");
  });
  CHECK(e.field() == "cta_rows");
  CHECK(e.allowed().find("backend=hopper") != std::string::npos);
  CHECK(spec_error([&] { with(q8, "cta_rows", "eight"); }).field() == "cta_rows");

  // The rule: four row blocks (two for 16 rows) where batch x KV heads <= SMs / 16, 64 rows as
  // two blocks of 32 up to SMs / 2; only for speculative decoding at head_dim 128 on hopper.
  const KernelSpec g4q8 = normalized(gqa(q8));
  const KernelSpec g4q4 = normalized(with(q8, "q_len", "4"));
  const KernelSpec g8q8 = normalized(with(q8, "group", "8"));
  CHECK(planned_cta_rows(g4q8, 8, 132) == 8);
  CHECK(planned_cta_rows(g4q4, 8, 132) == 8);
  CHECK(planned_cta_rows(g8q8, 8, 132) == 16);
  CHECK(planned_cta_rows(g4q8, 16, 132) == 0);
  CHECK(planned_cta_rows(g8q8, 16, 132) == 32);
  CHECK(planned_cta_rows(g8q8, 64, 132) == 32);
  CHECK(planned_cta_rows(g8q8, 128, 132) == 0);
  // Long sequences (> 256 keys per query row of a KV head): two blocks, up to batch x KV heads <= SMs / 8.
  CHECK(planned_cta_rows(g4q8, 8, 132, 8192) == 8);
  CHECK(planned_cta_rows(g4q8, 8, 132, 16384) == 16);
  CHECK(planned_cta_rows(g4q8, 16, 132, 32768) == 16);  // B=2: one block before
  CHECK(planned_cta_rows(g4q8, 32, 132, 32768) == 0);
  CHECK(planned_cta_rows(g8q8, 8, 132, 16384) == 16);
  CHECK(planned_cta_rows(g8q8, 8, 132, 32768) == 32);
  CHECK(planned_cta_rows(g4q4, 8, 132, 65536) == 8);  // 16 rows: two blocks either way
  auto fp8_q8 = q8;
  fp8_q8["kv"] = "fp8";
  fp8_q8["group"] = "8";
  CHECK(planned_cta_rows(normalized(gqa(fp8_q8)), 128, 132) == 32);  // an fp8 cache: up to SMs
  CHECK(planned_cta_rows(normalized(gqa(fp8_q8)), 256, 132) == 0);
  // 32 rows of an fp8 cache, short sequences: two blocks of 16 up to batch x KV heads <= SMs / 2 (h49),
  // four at B=1 as before; long sequences past h47's batch keep one block; bf16 keeps one block.
  auto fp8_g4q8 = q8;
  fp8_g4q8["kv"] = "fp8";
  const KernelSpec f4q8 = normalized(gqa(fp8_g4q8));
  CHECK(planned_cta_rows(f4q8, 8, 132, 8192) == 8);
  CHECK(planned_cta_rows(f4q8, 16, 132, 8192) == 16);
  CHECK(planned_cta_rows(f4q8, 64, 132, 4096) == 16);
  CHECK(planned_cta_rows(f4q8, 66, 132, 8192) == 16);
  CHECK(planned_cta_rows(f4q8, 72, 132, 8192) == 0);
  CHECK(planned_cta_rows(f4q8, 32, 132, 32768) == 0);
  CHECK(planned_cta_rows(g4q8, 32, 132, 8192) == 0);
  CHECK(planned_cta_rows(normalized(with(fp8_g4q8, "head_dim", "256")), 16, 132, 8192) == 0);  // measured at 128
  // ... and every fp8 row block of <= 16 rows takes 128-key tiles (one of 32 keeps 64).
  CHECK(normalized(gqa(fp8_g4q8)).kv_tile == 64);
  CHECK(normalized(with(fp8_g4q8, "cta_rows", "16")).kv_tile == 128);
  CHECK(normalized(with(fp8_g4q8, "cta_rows", "8")).kv_tile == 128);
  CHECK(normalized(with(q8, "cta_rows", "8")).kv_tile == 64);  // bf16: 64
  CHECK(planned_cta_rows(normalized(r8), 128, 132) == 8);  // asked for: kept
  CHECK(planned_cta_rows(normalized(with(q8, "q_len", "1")), 1, 132) == 0);
  CHECK(planned_cta_rows(normalized(with(q8, "head_dim", "256")), 1, 132) == 0);  // bf16: untimed
  CHECK(planned_cta_rows(normalized(with(q8, "head_dim", "64")), 1, 132) == 0);   // lost at B=1
  auto d256_fp8 = q8;
  d256_fp8["head_dim"] = "256";
  d256_fp8["kv"] = "fp8";
  CHECK(planned_cta_rows(normalized(gqa(d256_fp8)), 8, 132) == 8);  // 32 rows (the D=256 cap): four blocks
  CHECK(planned_cta_rows(normalized(gqa(d256_fp8)), 16, 132) == 0);
  CHECK(planned_cta_rows(normalized(gqa(d256_fp8)), 8, 132, 1 << 20) == 8);  // the long rule: head_dim 128 only
  auto portable = q8;
  portable["backend"] = "portable";
  CHECK(planned_cta_rows(normalized(gqa(portable)), 1, 132) == 0);
  // Prewarm compiles every variant the rule may pick.
  auto auto_q8 = q8;
  auto_q8.erase("backend");
  std::vector<int> rows;
  for (const KernelSpec& v : launch_variants({gqa(auto_q8), with(q8, "group", "8")})) rows.push_back(v.cta_rows);
  CHECK(rows == std::vector<int>{0, 0, 8, 16, 0, 16, 32});  // portable, hopper + r8, r16; g8 hopper + r16, r32
}
