// CPU tests of decode's plan (src/ops/decode_plan.cpp) on fake devices: the spec and split it
// derives, the split counts of short and speculative-decoding launches, rows per CTA, and the
// backend auto picks.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>

#include "gqa/hopper_geometry.h"
#include "ops/decode_fixture.hpp"
#include "support/expect_error.hpp"
#include "support/fake_device.hpp"
#include "xqajit/compile/compiler.hpp"
#include "xqajit/decode_args.h"
#include "xqajit/ops/decode.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"

using namespace xqajit;
using namespace xqajit::test;

TEST_CASE("decode_spec and decode_plan derive the kernel and the split", "[decode]") {
  DecodeParams p = valid_params();
  const KernelSpec s = decode_spec(p, Arch::parse("sm_90a"));
  CHECK(s.group == 4);
  CHECK(s.head_dim == 128);
  CHECK(s.q_len == 1);
  CHECK_FALSE(s.sliding_window);
  p.sliding_window = 64;
  CHECK(decode_spec(p, Arch::parse("sm_90a")).sliding_window);
  p.sliding_window = 0;
  // fp8 caches with one row tile default to 128-key tiles at D <= 128 and 64 at D = 256.
  p.kv = DType::fp8;
  CHECK(normalized(decode_spec(p, Arch::parse("sm_90a"))).kv_tile == 128);
  p.num_q_heads = 32 * 8;  // group 32: two row tiles
  CHECK(normalized(decode_spec(p, Arch::parse("sm_90a"))).kv_tile == 64);
  p.num_q_heads = 32;
  p.head_dim = 256;
  CHECK(normalized(decode_spec(p, Arch::parse("sm_90a"))).kv_tile == 64);
  CHECK(normalized(decode_spec(p, Arch::parse("sm_120a"))).kv_tile == 64);
  CHECK(decode_plan(p, rtx_sm120()).smem_bytes > 0);  // fits sm_120's 99 KB
  p.head_dim = 128;
  p.kv_tile = 64;  // an explicit tile wins
  CHECK(decode_spec(p, Arch::parse("sm_90a")).kv_tile == 64);
  p.kv_tile = 0;
  p.kv = p.input;

  // One request, a long sequence: split across the SMs, with a workspace.
  p.batch = 1;
  p.max_pages_per_seq = 128;  // 8192 keys
  DecodePlan plan = decode_plan(p, h100());
  CHECK(plan.num_splits > 8);
  CHECK(plan.num_splits <= 64);
  CHECK(static_cast<long>(plan.num_splits) * plan.split_tokens >= 8192);
  CHECK(plan.split_tokens % normalized(plan.spec).kv_tile == 0);
  CHECK(plan.workspace_bytes > 0);
  CHECK(decode_workspace_size(p, h100()) == plan.workspace_bytes);
  CHECK(plan.grid[0] == static_cast<unsigned>(plan.num_splits));
  CHECK(plan.grid[1] == 8u);
  CHECK(plan.grid[2] == 1u);
  // Splits this short (4 tiles at two CTAs per SM) go one CTA per SM instead ...
  CHECK(plan.num_splits == h100().sm_count / 8);
  // ... while a long sequence fills every resident slot (two CTAs per SM).
  p.max_pages_per_seq = 1024;  // 65536 keys
  CHECK(decode_plan(p, h100()).num_splits > h100().sm_count / 8);
  p.max_pages_per_seq = 128;

  // A big batch fills the GPU without splitting: no workspace.
  p.batch = 256;
  plan = decode_plan(p, h100());
  CHECK(plan.num_splits == 1);
  CHECK(plan.workspace_bytes == 0);

  // A forced split count is honoured; a window bounds the keys split over.
  p.batch = 1;
  p.num_splits = 4;
  CHECK(decode_plan(p, h100()).num_splits == 4);
  p.num_splits = 0;
  p.sliding_window = 256;
  plan = decode_plan(p, h100());
  CHECK(static_cast<long>(plan.num_splits) * plan.split_tokens <= 256 + 64 + 64);
}

TEST_CASE("short fp8 splits go one CTA per SM where more splits than a cluster remain", "[decode]") {
  DecodeParams p = valid_params();  // Hq 32 / Hkv 8 / D 128, page 64
  p.kv = DType::fp8;
  p.batch = 1;
  p.max_pages_per_seq = 128;  // B=1 L=8192: 16 splits of 4 tiles, not 32 of 2
  DecodePlan plan = decode_plan(p, h100());
  REQUIRE(plan.spec.backend == Backend::hopper);
  CHECK(plan.num_splits == h100().sm_count / 8);
  CHECK(plan.split_tokens == 4 * 128);
  p.max_pages_per_seq = 96;  // L=6144: 16 splits of 3 tiles
  CHECK(decode_plan(p, h100()).num_splits == 16);
  p.max_pages_per_seq = 256;  // L=16384: 16 splits would be 8 tiles: two CTAs per SM, 32 splits
  CHECK(decode_plan(p, h100()).num_splits == 32);
  p.batch = 2;
  p.max_pages_per_seq = 64;  // B=2 L=4096: one per SM would be 8 splits, a cluster's count
  CHECK(decode_plan(p, h100()).num_splits == 16);
  p.batch = 1;
  p.max_pages_per_seq = 128;
  p.kv_tile = 64;  // 64-key tiles keep filling their slots
  CHECK(decode_plan(p, h100()).num_splits > 16);
}

TEST_CASE("speculative decoding's tall row blocks keep their splits to one cluster", "[decode]") {
  DecodeParams p = valid_params();  // Hq 32 / Hkv 8 (group 4) / D 128, page 64
  p.batch = 1;
  p.max_pages_per_seq = 128;  // B=1 L=8192: 16 splits at q_len 1
  REQUIRE(decode_plan(p, h100()).num_splits > xqajit_max_cluster_splits);
  p.q_len = 8;  // 32 rows per KV head in one CTA: at most a cluster's splits, merged in it
  p.cta_rows = 32;  // (the plan's own rows at this batch, 8 per CTA, merge as q_len 1: below)
  for (const Backend backend : {Backend::automatic, Backend::hopper, Backend::portable}) {
    for (const DType kv : {DType::bf16, DType::fp8}) {
      p.backend = backend;
      p.kv = kv;
      p.cta_rows = backend == Backend::portable ? 0 : 32;
      INFO("backend " << to_string(backend) << " kv " << to_string(kv));
      const DecodePlan plan = decode_plan(p, h100());
      CHECK(plan.num_splits == xqajit_max_cluster_splits);
      CHECK(plan.split_cluster == plan.num_splits);
    }
  }
  p.kv = DType::bf16;
  p.backend = Backend::automatic;
  p.num_splits = 16;  // a request may still ask for more (merged through the workspace)
  CHECK(decode_plan(p, h100()).num_splits == 16);
  p.num_splits = 0;
  p.cta_rows = 32;  // one row block, as the cap was measured (the plan's own rows: below)
  p.max_pages_per_seq = 512;  // L=32768: 16 splits of 32 tiles, long enough to merge through the workspace
  CHECK(decode_plan(p, h100()).num_splits > xqajit_max_cluster_splits);
  p.max_pages_per_seq = 128;
  p.q_len = 4;  // 16 rows: the slot rule as before
  p.cta_rows = 16;
  CHECK(decode_plan(p, h100()).num_splits > xqajit_max_cluster_splits);
  p.q_len = 8;  // no clusters before sm_90: the cap does not apply
  p.cta_rows = 0;
  CHECK(decode_plan(p, a100()).num_splits > xqajit_max_cluster_splits);
}

TEST_CASE("speculative decoding at small batch runs a KV head's rows as several CTAs", "[decode]") {
  DecodeParams p = valid_params();  // Hq 32 / Hkv 8 (group 4) / D 128, page 64
  p.q_len = 8;                      // 32 rows per KV head
  p.spec_mask = fake<std::uint32_t>(0x90000);
  p.max_pages_per_seq = 128;        // L=8192
  for (const DType kv : {DType::bf16, DType::fp8}) {
    p.kv = kv;
    p.batch = 1;  // batch x KV heads = 8 <= 132 / 16: four blocks of 8 rows
    DecodePlan plan = decode_plan(p, h100());
    CHECK(plan.spec.backend == Backend::hopper);
    CHECK(plan.spec.cta_rows == 8);
    CHECK(plan.grid[1] == 8u * 4);
    // 8-row CTAs merge as q_len 1 does: no cluster cap, the slot rule; an fp8 one takes 128 keys (h49)
    CHECK(plan.num_splits == 8);
    CHECK(plan.workspace_bytes == decode_workspace_size(p, h100()));
    CHECK(plan.spec.kv_tile == (kv == DType::fp8 ? 128 : 64));
    p.max_pages_per_seq = 512;  // L=32768: past 256 keys per query row, two blocks of 16 (h47)
    plan = decode_plan(p, h100());
    CHECK(plan.spec.cta_rows == 16);
    CHECK(plan.grid[1] == 8u * 2);
    CHECK(plan.spec.kv_tile == (kv == DType::fp8 ? 128 : 64));  // fp8: a 16-row CTA takes 128 keys
    CHECK(plan.workspace_bytes == decode_workspace_size(p, h100()));
    p.batch = 2;  // two blocks up to batch x KV heads <= SMs / 8
    CHECK(decode_plan(p, h100()).spec.cta_rows == 16);
    p.kv_tile = 64;  // a tile asked for is kept
    CHECK(decode_plan(p, h100()).spec.kv_tile == 64);
    p.kv_tile = 0;
    p.max_pages_per_seq = 128;
    p.batch = 4;  // bf16: one block, as before; fp8: two blocks of 16 up to batch x KV heads <= SMs / 2 (h49)
    plan = decode_plan(p, h100());
    CHECK(plan.spec.cta_rows == (kv == DType::fp8 ? 16 : 0));
    CHECK(plan.grid[1] == (kv == DType::fp8 ? 16u : 8u));
    CHECK(plan.spec.kv_tile == (kv == DType::fp8 ? 128 : 64));
    p.batch = 9;  // past SMs / 2: one block
    CHECK(decode_plan(p, h100()).spec.cta_rows == 0);
  }
  p.num_q_heads = 64;  // group 8: 64 rows, two blocks of 32 up to batch x KV heads = 66 (bf16)
  p.kv = DType::bf16;
  p.batch = 8;
  CHECK(decode_plan(p, h100()).spec.cta_rows == 32);
  CHECK(decode_plan(p, h100()).grid[1] == 16u);
  p.batch = 16;
  CHECK(decode_plan(p, h100()).spec.cta_rows == 0);
  p.kv = DType::fp8;  // ... and 132 with an fp8 cache
  CHECK(decode_plan(p, h100()).spec.cta_rows == 32);
  p.batch = 32;
  CHECK(decode_plan(p, h100()).spec.cta_rows == 0);
  p.batch = 16;
  // Asked for: kept at any batch; one that is the kernel's own N names no variant.
  p.cta_rows = 16;
  CHECK(decode_plan(p, h100()).spec.cta_rows == 16);
  CHECK(decode_plan(p, h100()).grid[1] == 8u * 4);
  p.batch = 1;
  p.cta_rows = 64;
  CHECK(decode_plan(p, h100()).spec.cta_rows == 0);
  // The portable kernel has fixed row tiles: asking it for rows per CTA is an error that says so;
  // the rule leaves it alone.
  p.cta_rows = 8;
  p.backend = Backend::portable;
  CHECK_THROWS_AS(validate(p), ArgumentError);
  p.cta_rows = 0;
  CHECK(decode_plan(p, h100()).spec.cta_rows == 0);
  p.backend = Backend::automatic;
  p.cta_rows = 12;
  CHECK_THROWS_AS(validate(p), ArgumentError);
  p.cta_rows = 8;  // before sm_90a there is no hopper kernel
  CHECK(spec_error([&] { decode_plan(p, a100()); }).field() == "cta_rows");
}

TEST_CASE("backend=auto picks per shape where both backends run", "[decode]") {
  DecodeParams p = valid_params();  // Hq 32 / Hkv 8 / D 128, page 64
  // An fp8 cache on sm_90a: the hopper backend at any size and q_len; 128-key tiles for
  // one row block of <= 16 rows or of 64 on 64-token pages, 64 keys on 16-token pages or at 32 rows.
  p.kv = DType::fp8;
  p.batch = 64;
  p.max_pages_per_seq = 64;  // 4096 keys
  DecodePlan plan = decode_plan(p, h100());
  CHECK(plan.spec.backend == Backend::hopper);
  CHECK(normalized(plan.spec).kv_tile == 128);
  p.q_len = 4;  // 16 rows
  CHECK(normalized(decode_plan(p, h100()).spec).kv_tile == 128);
  p.q_len = 8;  // 32 rows
  CHECK(normalized(decode_plan(p, h100()).spec).kv_tile == 64);
  p.q_len = 16;  // 64 rows (h42)
  CHECK(normalized(decode_plan(p, h100()).spec).kv_tile == 128);
  p.num_q_heads = 64;  // group 8 x q_len 16: two row blocks of 64, each at 128 keys
  plan = decode_plan(p, h100());
  CHECK(normalized(plan.spec).kv_tile == 128);
  CHECK(plan.smem_bytes > 0);
  p.num_q_heads = 32;
  p.q_len = 1;
  p.page_size = 16;
  p.max_pages_per_seq = 256;
  CHECK(normalized(decode_plan(p, h100()).spec).kv_tile == 64);
  p.page_size = 64;
  p.max_pages_per_seq = 64;
  p.batch = 1;
  CHECK(decode_plan(p, h100()).spec.backend == Backend::hopper);
  // A 16-bit cache at D=128: hopper where the launch splits the sequence (B=1, 4096 keys)
  // or for speculative decoding, portable for one-split grids of one query token (ties in
  // bulk; the tuner may pick hopper per bucket). At D=256: hopper for one query token.
  // Speculative decoding at B=1: hopper for both caches.
  struct Shape {
    DType kv;
    int head_dim, batch, q_len;
    Backend backend;
    int splits;  // 0: any; 1: one split; 2: more than one
  };
  const DType bf16 = DType::bf16, fp8 = DType::fp8;
  const Backend hopper = Backend::hopper, portable = Backend::portable;
  for (const Shape& s : {Shape{bf16, 128, 1, 1, hopper, 2}, Shape{bf16, 256, 1, 1, hopper, 0},
                         Shape{bf16, 256, 64, 1, hopper, 1}, Shape{bf16, 256, 64, 4, portable, 0},
                         Shape{bf16, 128, 64, 4, hopper, 0}, Shape{bf16, 128, 64, 1, portable, 1},
                         Shape{bf16, 128, 1, 4, hopper, 0}, Shape{fp8, 128, 1, 4, hopper, 0}}) {
    p.kv = s.kv;
    p.head_dim = s.head_dim;
    p.batch = s.batch;
    p.q_len = s.q_len;
    const DecodePlan plan = decode_plan(p, h100());
    INFO("kv " << to_string(s.kv) << " D " << s.head_dim << " B " << s.batch << " q_len " << s.q_len);
    if (s.splits != 0) REQUIRE((plan.num_splits > 1) == (s.splits > 1));
    CHECK(plan.spec.backend == s.backend);
  }
  p.q_len = 1;
  // Only sm_90a has the hopper backend; an explicit backend or tile is honoured.
  CHECK(decode_plan(p, rtx_sm120()).spec.backend == Backend::portable);
  p.kv_tile = 32;
  CHECK(decode_plan(p, h100()).spec.backend == Backend::portable);
  p.kv_tile = 0;
  p.backend = Backend::portable;
  CHECK(decode_plan(p, h100()).spec.backend == Backend::portable);
  p.kv = DType::bf16;
  p.batch = 64;
  p.backend = Backend::hopper;
  CHECK(decode_plan(p, h100()).spec.backend == Backend::hopper);
}
