// Spec names, flags and refusals of DeepSeek-V3.2's MLA variants (issue 31): sparse
// attention (sparse=1) and the fp8-with-scales cache (kv=fp8ds).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "support/expect_error.hpp"
#include "xqajit/error.hpp"
#include "xqajit/spec/spec.hpp"

using namespace xqajit;
using xqajit::test::spec_error;

namespace {

bool has_flag(const KernelSpec& s, const std::string& flag) {
  const auto fl = flags(s);
  return std::find(fl.begin(), fl.end(), flag) != fl.end();
}

}  // namespace

TEST_CASE("sparse MLA: a named field, hopper on sm_90a", "[spec][sparse]") {
  const KernelSpec s = spec_from_fields({{"kind", "mla"}, {"group", "128"}, {"q_len", "2"}, {"sparse", "1"},
                                         {"arch", "sm_90a"}});
  CHECK(s.sparse);
  // auto resolves to hopper on sm_90a, as dense MLA does...
  CHECK(canonical_name(s) == "mla_bf16_kvbf16_obf16_d576_p64_g128_q2_sw0_t64_sparse_hopper_sm90a");
  CHECK(parse_name(canonical_name(s)) == normalized(s));
  CHECK(planned_backend(s) == Backend::hopper);
  CHECK(launch_backends(s) == std::vector<Backend>{Backend::hopper});
  // ...below 64 heads with several query tokens too (a hopper CTA a token: its rows share
  // one index list).
  const KernelSpec small = spec_from_fields({{"kind", "mla"}, {"group", "16"}, {"q_len", "2"}, {"sparse", "1"},
                                             {"arch", "sm_90a"}});
  CHECK(canonical_name(small) == "mla_bf16_kvbf16_obf16_d576_p64_g16_q2_sw0_t64_sparse_hopper_sm90a");
  CHECK(planned_backend(small) == Backend::hopper);
  CHECK(parse_name(canonical_name(small)) == normalized(small));
  CHECK_NOTHROW(spec_from_fields({{"kind", "mla"},
                                  {"group", "32"},
                                  {"q_len", "2"},
                                  {"sparse", "1"},
                                  {"backend", "hopper"},
                                  {"arch", "sm_90a"}}));
  CHECK(spec_to_fields(s).at("sparse") == "1");
  CHECK(spec_to_fields(spec_from_fields({{"kind", "mla"}, {"arch", "sm_90a"}})).at("sparse") == "0");
  const auto f = flags(s);
  CHECK(std::find(f.begin(), f.end(), "-DMLA_SPARSE=1") != f.end());
  // Dense names are unchanged (cache keys).
  CHECK(canonical_name(spec_from_fields({{"kind", "mla"}, {"group", "128"}, {"arch", "sm_90"}})) ==
        "mla_bf16_kvbf16_obf16_d576_p64_g128_q1_sw0_t32_portable_sm90");
  // Refusals name the field, the value and what is allowed.
  CHECK_THROWS_WITH(spec_from_fields({{"kind", "gqa"}, {"sparse", "1"}, {"arch", "sm_90a"}}),
                    Catch::Contains("sparse=1") && Catch::Contains("kind=mla"));
  CHECK_THROWS_WITH(spec_from_fields({{"kind", "mla"}, {"sparse", "2"}, {"arch", "sm_90a"}}),
                    Catch::Contains("sparse=2"));
  CHECK_THROWS_AS(parse_name("mla_bf16_kvbf16_obf16_d576_p64_g128_q2_sw0_t32_dense_portable_sm90"), SpecError);
}

TEST_CASE("the fp8-with-scales MLA cache (kv=fp8ds): named, bf16 Q only, both backends", "[spec][fp8ds]") {
  const KernelSpec dense =
      spec_from_fields({{"kind", "mla"}, {"kv", "fp8ds"}, {"group", "64"}, {"arch", "sm_90a"}});
  CHECK(dense.kv == DType::fp8ds);
  CHECK(to_string(DType::fp8ds) == "fp8ds");
  CHECK(dtype_bytes(DType::fp8ds) == 1);
  // auto resolves to hopper on sm_90a, as for the other caches.
  CHECK(canonical_name(dense) == "mla_bf16_kvfp8ds_obf16_d576_p64_g64_q1_sw0_t64_hopper_sm90a");
  CHECK(parse_name(canonical_name(dense)) == normalized(dense));
  CHECK(planned_backend(dense) == Backend::hopper);
  CHECK(launch_backends(dense) == std::vector<Backend>{Backend::hopper});
  CHECK(spec_to_fields(dense).at("kv") == "fp8ds");
  CHECK(has_flag(dense, "-DCACHE_ELEM_ENUM=2"));
  CHECK(has_flag(dense, "-DMLA_FP8DS=1"));
  CHECK(has_flag(dense, "-DMLA_BF16=0"));
  CHECK(has_flag(dense, "-DINPUT_FP8=0"));
  CHECK(has_flag(spec_from_fields({{"kind", "mla"}, {"kv", "fp8"}, {"arch", "sm_90a"}}), "-DMLA_FP8DS=0"));
  const KernelSpec sparse = spec_from_fields({{"kind", "mla"},
                                              {"kv", "fp8ds"},
                                              {"group", "128"},
                                              {"q_len", "2"},
                                              {"sparse", "1"},
                                              {"arch", "sm_120a"}});
  CHECK(canonical_name(sparse) == "mla_bf16_kvfp8ds_obf16_d576_p64_g128_q2_sw0_t32_sparse_portable_sm120");
  CHECK(parse_name(canonical_name(sparse)) == normalized(sparse));
  // Refusals name the field, the value and what is allowed.
  auto refused = [](const std::map<std::string, std::string>& f) {
    return spec_error([&] { spec_from_fields(f); });
  };
  const SpecError fp8_q = refused({{"kind", "mla"}, {"input", "fp8"}, {"kv", "fp8ds"}, {"arch", "sm_90a"}});
  CHECK(fp8_q.field() == "kv");
  CHECK_THAT(fp8_q.what(), Catch::Contains("kv=fp8ds") && Catch::Contains("input=bf16"));
  const SpecError hopper = refused({{"kind", "mla"}, {"kv", "fp8ds"}, {"backend", "hopper"}, {"arch", "sm_89"}});
  CHECK(hopper.field() == "backend");
  CHECK_THAT(hopper.what(), Catch::Contains("backend=hopper") && Catch::Contains("sm_90a"));
  const SpecError gqa_kv = refused({{"kind", "gqa"}, {"input", "bf16"}, {"kv", "fp8ds"}, {"arch", "sm_90a"}});
  CHECK(gqa_kv.field() == "kv");
  CHECK_THAT(gqa_kv.what(), Catch::Contains("kind=mla"));
  CHECK(refused({{"kind", "mla"}, {"kv", "fp8ds"}, {"arch", "sm_86"}}).field() ==
        "arch");  // e4m3 needs sm_89
  CHECK(refused({{"kind", "mla"}, {"input", "fp8ds"}, {"kv", "fp8ds"}, {"arch", "sm_90a"}}).field() ==
        "input");
  CHECK(refused({{"kind", "mla"}, {"output", "fp8ds"}, {"kv", "fp8ds"}, {"arch", "sm_90a"}}).field() ==
        "output");
  const SpecError unknown = refused({{"kind", "mla"}, {"kv", "fp8x"}, {"arch", "sm_90a"}});
  CHECK_THAT(unknown.what(), Catch::Contains("fp8ds"));
  CHECK_THROWS_AS(parse_name("mla_bf16_kvfp8ds_obf16_d576_p64_g64_q1_sw0_t64_hopper_sm89"), SpecError);
}
