#pragma once
// A tiny template set (the XQAJIT_TEMPLATE_DIR way): a real kernel that reads the
// spec flags and compiles in a fraction of a second, for tests of the tiers.

#include <filesystem>
#include <string>

#include "support/temp_dir.hpp"
#include "xqajit/spec/spec.hpp"

namespace xqajit::test {

inline void write_tiny_templates(const std::filesystem::path& dir) {
  write_file(dir / "gqa_decode.cu",
             "#include \"common/tiny.cuh\"\n"
             "extern \"C\" __global__ void xqajit_gqa_decode(int* out) { out[0] = tiny_value(); }\n");
  write_file(dir / "common/tiny.cuh",
             "#pragma once\n"
             "__device__ inline int tiny_value() { return HEAD_ELEMS * HEAD_GRP_SIZE + TOKENS_PER_PAGE; }\n");
}

inline KernelSpec tiny_spec(int group, const std::string& arch = "sm_90a") {
  // portable: the tiny set has no hopper kernel, so backend=auto would prewarm one it cannot build
  return spec_from_fields({{"arch", arch}, {"group", std::to_string(group)}, {"backend", "portable"}});
}

}  // namespace xqajit::test
