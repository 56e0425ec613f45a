// CPU tests of the decode launcher's arguments: validation (no GPU needed, no driver
// touched), the cache-span query, and NVRTC compiles of a representative sample of the
// GQA family for sm_90a and sm_120a. Its plan: test_decode_plan.cpp; the plan's launch
// options: test_decode_launch_options.cpp.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>

#include "gqa/hopper_geometry.h"
#include "ops/decode_fixture.hpp"
#include "ops/paged_op_checks.hpp"
#include "support/expect_error.hpp"
#include "support/fake_device.hpp"
#include "xqajit/compile/compiler.hpp"
#include "xqajit/decode_args.h"
#include "xqajit/error.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/runtime/engine.hpp"

using namespace xqajit;
using namespace xqajit::test;

namespace {

template <class Mutate>
void expect_rejected(Mutate&& mutate, const std::string& field) {
  xqajit::test::expect_rejected(valid_params(), mutate, field);
}

}  // namespace

TEST_CASE("valid decode params pass validation", "[decode]") {
  CHECK_NOTHROW(validate(valid_params()));
  DecodeParams p = valid_params();
  p.kv_layout = KvLayout::hnd;
  p.kv = DType::fp8;
  p.output = DType::fp8;
  p.q_len = 4;
  p.spec_mask = fake<std::uint32_t>(0x70000);
  p.sliding_window = 128;
  CHECK_NOTHROW(validate(p));
}

TEST_CASE("invalid decode params are rejected naming the field", "[decode]") {
  expect_paged_refusals(valid_params(), "decode");  // the fields every op shares; then decode's own
  expect_rejected([](DecodeParams& p) { p.k_cache = nullptr; }, "k_cache");
  expect_rejected([](DecodeParams& p) { p.v_cache = nullptr; }, "v_cache");
  expect_rejected([](DecodeParams& p) { p.kv = DType::fp16; }, "kv");
  expect_rejected([](DecodeParams& p) { p.input = DType::fp8; }, "input");
  expect_rejected([](DecodeParams& p) { p.output = DType::fp16; }, "output");
  expect_rejected([](DecodeParams& p) { p.output = DType::fp8; }, "output");  // 16-bit cache
  expect_rejected([](DecodeParams& p) { p.num_q_heads = 30; }, "num_q_heads");  // group does not divide
  expect_rejected([](DecodeParams& p) { p.num_kv_heads = 0; }, "num_kv_heads");
  expect_rejected([](DecodeParams& p) { p.num_q_heads = 8 * 128; }, "num_q_heads");  // group 128
  expect_rejected([](DecodeParams& p) { p.head_dim = 96; }, "head_dim");
  expect_rejected([](DecodeParams& p) { p.page_size = 8; }, "page_size");
  expect_rejected([](DecodeParams& p) { p.q_len = 33; }, "q_len");
  expect_rejected([](DecodeParams& p) { p.q_len = 2; }, "spec_mask");
  expect_rejected([](DecodeParams& p) { p.sliding_window = -1; }, "sliding_window");
  expect_rejected([](DecodeParams& p) { p.q_stride_head = 64; }, "q_stride_head");       // heads overlap
  expect_rejected([](DecodeParams& p) { p.q_stride_head = 132; }, "q_stride_head");      // not 16-byte
  expect_rejected([](DecodeParams& p) { p.out_stride_batch = 128; }, "out_stride_batch"); // requests overlap heads
  expect_rejected([](DecodeParams& p) { p.k_stride_token = 64; }, "k_stride_token");
  expect_rejected([](DecodeParams& p) { p.v_stride_page = 1024; }, "v_stride_page");     // pages overlap
  expect_rejected([](DecodeParams& p) { p.k_stride_head = -128; }, "k_stride_head");
  expect_rejected([](DecodeParams& p) { p.lse = fake<float>(0x90002); }, "lse");  // not 4-byte aligned
  expect_rejected([](DecodeParams& p) { p.lse = fake<float>(0x90000); p.lse_stride_batch = 16; }, "lse_stride_batch");
}

TEST_CASE("decode's lse output takes any strides that keep its entries apart", "[decode]") {
  DecodeParams p = valid_params();
  p.lse = fake<float>(0x90004);
  CHECK_NOTHROW(validate(p));  // dense [batch, q_len, num_q_heads]
  p.lse_stride_head = p.q_len;  // [batch, num_q_heads, q_len] (FlashMLA's softmax_lse layout)
  p.lse_stride_token = 1;
  p.lse_stride_batch = std::int64_t(p.q_len) * p.num_q_heads;
  CHECK_NOTHROW(validate(p));
}

TEST_CASE("decode() validates before touching the driver", "[decode]") {
  // On a GPU-less CI host a driver call would raise LibraryError instead.
  Options o = Options::from_env();
  o.disk_cache = false;
  Engine engine(o);
  DecodeParams p = valid_params();
  p.seq_lens = nullptr;
  CHECK_THROWS_AS(decode(engine, p, nullptr), ArgumentError);
}

TEST_CASE("decode_cache_bytes spans the last row of the last page, by the strides", "[decode]") {
  DecodeParams p = valid_params();  // 100 pages of 64 tokens x 8 heads x 128, bf16, NHD
  const std::size_t dense = std::size_t{100} * 64 * 8 * 128 * 2;
  CHECK(decode_cache_bytes(p).k == dense);
  CHECK(decode_cache_bytes(p).v == dense);
  p.kv_layout = KvLayout::hnd;  // the same pages, heads outermost in each
  CHECK(decode_cache_bytes(p).k == dense);
  // A page stride with room between pages (K and V of a page interleaved): the last page's rows end early.
  p = valid_params();
  p.k_stride_page = p.v_stride_page = 2 * 64 * 8 * 128;
  CHECK(decode_cache_bytes(p).k == (std::size_t{99} * 2 * 64 * 8 * 128 + 64 * 8 * 128) * 2);
  p.kv = DType::fp8;
  CHECK(decode_cache_bytes(p).v == std::size_t{99} * 2 * 64 * 8 * 128 + 64 * 8 * 128);
  p.num_pages = 0;  // unknown
  CHECK(decode_cache_bytes(p).k == 0);
  CHECK(decode_cache_bytes(p).v == 0);
  p.num_kv_heads = 3;  // bad params are refused, as by decode()
  CHECK_THROWS_AS(decode_cache_bytes(p), ArgumentError);
}

TEST_CASE("the GQA family compiles for sm_90a and sm_120a (representative sample)", "[decode][nvrtc]") {
  Options o = Options::from_env();
  o.disk_cache = false;
  Engine engine(o);
  if (!engine.compiler().available()) {
    WARN("SKIPPED: libnvrtc not found, the family was NOT compiled");
    return;
  }
  std::vector<KernelSpec> specs;
  const int groups[] = {1, 2, 4, 8, 16, 32, 64};
  int i = 0;
  for (const char* arch : {"sm_90a", "sm_120a"})
    for (DType in : {DType::fp16, DType::bf16})
      for (DType kv : {in, DType::fp8})
        for (int d : {64, 128, 256}) {
          KernelSpec s;
          s.input = in;
          s.kv = kv;
          s.output = (kv == DType::fp8 && i % 3 == 0) ? DType::fp8 : in;
          s.head_dim = d;
          s.page_size = 16 << (i % 4);
          s.group = groups[i % 7];
          s.q_len = i % 5 == 4 ? 1 + i % 8 : 1;
          s.sliding_window = i % 4 == 3;
          s.arch = Arch::parse(arch);
          specs.push_back(s);
          ++i;
        }
  // Extremes: the largest rows per CTA, the biggest tile, spec-dec at its limit.
  for (const char* arch : {"sm_90a", "sm_120a"}) {
    KernelSpec s;
    s.input = s.kv = s.output = DType::bf16;
    s.head_dim = 256;
    s.group = 64;
    s.q_len = 32;
    s.arch = Arch::parse(arch);
    specs.push_back(s);
    s.head_dim = 64;
    s.q_len = 1;
    s.kv_tile = 128;
    specs.push_back(s);
  }
  // The hopper backend beyond what auto fp8 specs expand to (prewarm adds those):
  // 16-bit caches, spec-dec with a window, the widest rows at D=256.
  for (int d : {128, 256}) {
    KernelSpec s;
    s.input = s.kv = s.output = DType::fp16;
    s.head_dim = d;
    s.group = d == 128 ? 8 : 64;
    s.q_len = d == 128 ? 4 : 32;
    s.sliding_window = d == 128;
    s.arch = Arch::parse("sm_90a");
    s.backend = Backend::hopper;
    specs.push_back(s);
  }
  const auto results = engine.prewarm(specs, 2);
  CHECK(results.size() > specs.size());  // + the hopper variants of the auto fp8 q_len-1 specs
  for (const auto& r : results) {
    INFO(r.name << ": " << r.error.substr(0, 3000));
    CHECK(r.ok);
  }
}
