// NVRTC compiles of the real (embedded) kernel templates, per arch; the
// embedded copy matches the source tree; NVRTC facts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "xqajit/compile/compiler.hpp"
#include "xqajit/error.hpp"
#include "xqajit/compile/templates.hpp"

using namespace xqajit;

namespace {

const Compiler& compiler() {
  static const Compiler c(TemplateSet::embedded());
  return c;
}

// An ELF cubin starts with \x7fELF.
bool is_elf(const std::vector<char>& bytes) {
  return bytes.size() > 4 && std::memcmp(bytes.data(), "\x7f" "ELF", 4) == 0;
}

}  // namespace

TEST_CASE("the embedded templates are exactly the source tree's", "[compiler]") {
  const TemplateSet embedded = TemplateSet::embedded();
  const TemplateSet tree = TemplateSet::from_dir(XQAJIT_SOURCE_DIR "/kernel_templates");
  CHECK(embedded.origin() == "embedded");
  CHECK(embedded.files().size() == tree.files().size());
  CHECK(embedded.hash() == tree.hash());
  CHECK(embedded.hash().size() == 64);
  CHECK(embedded.find("gqa_decode.cu") != nullptr);
}

TEST_CASE("NVRTC reports its version and archs", "[compiler]") {
  REQUIRE(compiler().available());
  CHECK(compiler().nvrtc_version().find('.') != std::string::npos);
  const auto archs = compiler().supported_archs();
  for (int a : {80, 90, 120}) CHECK(std::find(archs.begin(), archs.end(), a) != archs.end());
}

TEST_CASE("the GQA template compiles to a cubin for each arch", "[compiler][nvrtc]") {
  for (const char* arch : {"sm_80", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120a"}) {
    for (const char* kv : {"bf16", "fp8"}) {
      if (std::string(kv) == "fp8" && std::string(arch) == "sm_80") continue;  // fp8 needs sm_89+
      const KernelSpec spec = spec_from_fields({{"input", "bf16"}, {"kv", kv}, {"group", "8"}, {"arch", arch}});
      INFO(canonical_name(spec));
      const CompiledKernel k = compiler().compile(spec);
      CHECK(is_elf(k.cubin));
      CHECK(k.name == canonical_name(spec));
      CHECK(k.seconds > 0);
      CHECK(std::find(k.options.begin(), k.options.end(), std::string("-arch=") + arch) != k.options.end());
    }
  }
}

TEST_CASE("compile options carry the spec flags", "[compiler]") {
  const KernelSpec spec = spec_from_fields({{"input", "fp16"}, {"kv", "fp8"}, {"q_len", "2"}, {"arch", "sm_90a"}});
  const auto opts = compiler().options_for(normalized(spec));
  for (const char* flag : {"-DCACHE_ELEM_ENUM=2", "-DINPUT_FP16=1", "-DSPEC_DEC=1", "-DSPEC_Q_SEQ_LEN=2", "-std=c++17"})
    CHECK(std::find(opts.begin(), opts.end(), flag) != opts.end());
}

TEST_CASE("an arch this NVRTC cannot target is a SpecError naming the arch", "[compiler]") {
  // sm_87 (Orin) is in xqajit's table but absent from some NVRTC builds; when
  // it is supported, the compile must simply work.
  const KernelSpec spec = spec_from_fields({{"input", "bf16"}, {"arch", "sm_87"}});
  const auto archs = compiler().supported_archs();
  if (std::find(archs.begin(), archs.end(), 87) == archs.end()) {
    try {
      compiler().compile(spec);
      FAIL("expected SpecError");
    } catch (const SpecError& e) {
      CHECK(e.field() == "arch");
    }
  } else {
    CHECK(is_elf(compiler().compile(spec).cubin));
  }
}
