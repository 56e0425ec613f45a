// NVRTC compiles of the MLA templates, one spec per schedule the kernels choose among
// (no GPU needed): a template that fails to compile for one path -- a static_assert
// of another path's map, a missing guard -- fails here in CI, not on the first GPU run.
// Which spec takes which schedule: kernel_templates/mla/hopper_geometry.h.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "xqajit/compile/compiler.hpp"
#include "xqajit/compile/templates.hpp"

using namespace xqajit;

namespace {

const Compiler& compiler() {
  static const Compiler c(TemplateSet::embedded());
  return c;
}

using Fields = std::map<std::string, std::string>;

KernelSpec mla(const char* input, const char* kv, int heads, int q_len, const char* backend, Fields extra = {}) {
  Fields f = {{"kind", "mla"},          {"input", input},   {"kv", kv},        {"group", std::to_string(heads)},
              {"q_len", std::to_string(q_len)}, {"backend", backend}, {"arch", "sm_90a"}};
  for (const auto& [k, v] : extra) f[k] = v;
  return spec_from_fields(f);
}

void check_compiles(const KernelSpec& spec) {
  INFO(canonical_name(spec));
  const CompiledKernel k = compiler().compile(spec);
  CHECK(k.cubin.size() > 4);
  CHECK(std::memcmp(k.cubin.data(), "\x7f" "ELF", 4) == 0);
}

}  // namespace

TEST_CASE("every hopper MLA schedule compiles", "[compiler][nvrtc][mla]") {
  const std::vector<KernelSpec> specs = {
      // bf16 cache: the seesaw (two row blocks), the per-tile schedule (one), the narrow one (16 rows).
      mla("bf16", "bf16", 128, 1, "hopper"),
      mla("bf16", "bf16", 64, 1, "hopper"),
      mla("bf16", "bf16", 16, 1, "hopper"),
      mla("bf16", "bf16", 128, 2, "hopper", {{"page_size", "32"}}),
      // Plain fp8 cache on the fp8 tensor cores: the QGMMA seesaw for an fp8 Q and a split bf16 Q
      // (and their short splits' conversion path), 32 rows, and the narrow schedule at 16 rows.
      mla("fp8", "fp8", 128, 1, "hopper"),
      mla("bf16", "fp8", 128, 1, "hopper"),
      mla("fp8", "fp8", 32, 1, "hopper"),
      mla("bf16", "fp8", 16, 2, "hopper"),
      mla("fp8", "fp8", 16, 1, "hopper"),
      mla("bf16", "fp8", 16, 1, "hopper", {{"page_size", "32"}}),
      // fp8ds: the conversion pass (one raw stage) and, at 16 rows, the narrow schedule on the fp8
      // tensor cores (a scale group's own S^T and P^T, m51).
      mla("bf16", "fp8ds", 128, 1, "hopper"),
      mla("bf16", "fp8ds", 16, 1, "hopper"),
      // Sparse: the math threads' gather (bf16), the producer warpgroup, the H=128 crossover.
      mla("bf16", "bf16", 16, 1, "hopper", {{"sparse", "1"}}),
      mla("bf16", "fp8ds", 16, 1, "hopper", {{"sparse", "1"}}),
      mla("bf16", "fp8ds", 64, 1, "hopper", {{"sparse", "1"}}),
      mla("bf16", "bf16", 128, 2, "hopper", {{"sparse", "1"}}),
  };
  for (const KernelSpec& spec : specs) {
    REQUIRE(canonical_name(spec).find("_hopper_sm90a") != std::string::npos);
    check_compiles(spec);
  }
}

TEST_CASE("the portable MLA backend compiles for each cache", "[compiler][nvrtc][mla]") {
  for (const char* kv : {"bf16", "fp8", "fp8ds"}) check_compiles(mla("bf16", kv, 16, 1, "portable"));
  check_compiles(mla("fp8", "fp8", 128, 2, "portable"));
  check_compiles(mla("bf16", "fp8ds", 64, 1, "portable", {{"sparse", "1"}}));
}
