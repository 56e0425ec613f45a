// CPU tests of the launch options decode's plan chooses (src/ops/decode_plan.cpp) on fake
// devices: programmatic dependent launch, the L2 warm-up before its wait, and thread-block
// clusters (adjacent KV heads, the splits of a merge group).
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

TEST_CASE("programmatic dependent launch where it measured faster", "[decode]") {
  DecodeParams p = valid_params();  // Hq 32 / Hkv 8 / D 128, page 64
  p.batch = 64;
  p.max_pages_per_seq = 64;  // 4096 keys: one split
  CHECK(decode_plan(p, h100()).num_splits == 1);
  CHECK(decode_plan(p, h100()).programmatic_dependent_launch);  // 16-bit cache
  p.kv = DType::fp8;
  CHECK_FALSE(decode_plan(p, h100()).programmatic_dependent_launch);  // fp8, one split
  p.q_len = 8;
  CHECK_FALSE(decode_plan(p, h100()).programmatic_dependent_launch);  // fp8 spec-dec, one split
  p.kv = DType::bf16;
  CHECK(decode_plan(p, h100()).programmatic_dependent_launch);  // 16-bit spec-dec
  p.q_len = 1;
  p.kv = DType::fp8;
  p.batch = 1;
  p.max_pages_per_seq = 128;  // 8192 keys: split
  REQUIRE(decode_plan(p, h100()).num_splits > 1);
  CHECK(decode_plan(p, h100()).programmatic_dependent_launch);
  p.programmatic_dependent_launch = false;  // the caller's flag is an upper bound
  CHECK_FALSE(decode_plan(p, h100()).programmatic_dependent_launch);
  p.programmatic_dependent_launch = true;
  p.kv = DType::bf16;  // (sm_80 has no fp8)
  CHECK(decode_plan(p, h100()).programmatic_dependent_launch);
  CHECK_FALSE(decode_plan(p, a100()).programmatic_dependent_launch);  // no griddepcontrol before sm_90
}

TEST_CASE("L2 warm-up before the wait where the next grid cannot fit beside this one", "[decode]") {
  DecodeParams p = valid_params();  // Hq 32 / Hkv 8 / D 128, page 64, num_pages 100
  p.batch = 1;
  p.max_pages_per_seq = 1024;  // 65536 keys: 32 splits x 8 heads, the slots all but full
  DecodePlan plan = decode_plan(p, h100());
  REQUIRE(plan.num_splits > 1);
  CHECK(plan.l2_warmup);
  p.num_pages = 0;  // an unknown pool bounds no hint
  CHECK_FALSE(decode_plan(p, h100()).l2_warmup);
  p.num_pages = 100;
  p.programmatic_dependent_launch = false;  // nothing to wait on
  CHECK_FALSE(decode_plan(p, h100()).l2_warmup);
  p.programmatic_dependent_launch = true;
  p.max_pages_per_seq = 128;  // 8192 keys: 16 splits x 8 heads, one CTA per SM; the next grid fits beside
  p.backend = Backend::portable;  // ... and arrives at this one's start
  plan = decode_plan(p, h100());
  REQUIRE(plan.num_splits > 1);
  CHECK_FALSE(plan.l2_warmup);
  p.backend = Backend::hopper;  // ... or, tiles of at most two pages, near its end (the late trigger)
  REQUIRE(xqajit_gqa_hopper_late_trigger(p.page_size, decode_plan(p, h100()).spec.kv_tile, 1));
  CHECK(decode_plan(p, h100()).l2_warmup);
  p.page_size = 16;  // 16-token pages: the trigger at the top
  p.max_pages_per_seq = 512;
  REQUIRE_FALSE(xqajit_gqa_hopper_late_trigger(p.page_size, decode_plan(p, h100()).spec.kv_tile, 1));
  CHECK_FALSE(decode_plan(p, h100()).l2_warmup);
  p.page_size = 64;
  p.backend = Backend::automatic;
  p.kv = DType::fp8;  // 16384 keys, fp8: two CTAs per SM on the hopper backend
  p.max_pages_per_seq = 256;
  CHECK(decode_plan(p, h100()).l2_warmup);
  p.kv = DType::bf16;
  p.batch = 64;
  p.max_pages_per_seq = 64;  // 4096 keys: one split, no merge tail
  REQUIRE(decode_plan(p, h100()).num_splits == 1);
  CHECK_FALSE(decode_plan(p, h100()).l2_warmup);
  p.batch = 1;
  p.max_pages_per_seq = 1024;
  CHECK_FALSE(decode_plan(p, a100()).l2_warmup);  // no griddepcontrol before sm_90
}

TEST_CASE("adjacent KV heads of an fp8 NHD cache launch as 2-CTA clusters", "[decode]") {
  DecodeParams p = valid_params();  // Hq 32 / Hkv 8 / D 128, page 64
  p.kv = DType::fp8;
  p.batch = 64;
  p.max_pages_per_seq = 64;  // 4096 keys: one split of 32 tiles
  DecodePlan plan = decode_plan(p, h100());
  REQUIRE(plan.spec.backend == Backend::hopper);
  REQUIRE(plan.spec.kv_tile == 128);
  CHECK(plan.kv_head_cluster == 2);
  CHECK(plan.grid[1] % 2 == 0);
  p.kv_layout = KvLayout::hnd;  // a head's page is contiguous: no pair of rows to read together
  CHECK(decode_plan(p, h100()).kv_head_cluster == 1);
  p.kv_layout = KvLayout::nhd;
  p.k_stride_head = 256;  // heads' rows not adjacent
  p.k_stride_token = 8 * 256;
  CHECK(decode_plan(p, h100()).kv_head_cluster == 1);
  p.k_stride_head = p.k_stride_token = 0;
  p.num_q_heads = 28;  // Hkv 7: heads cannot pair
  p.num_kv_heads = 7;
  CHECK(decode_plan(p, h100()).kv_head_cluster == 1);
  p.num_q_heads = 32;
  p.num_kv_heads = 8;
  p.kv_tile = 64;  // 4 CTAs per SM: measured slower with clusters
  CHECK(decode_plan(p, h100()).kv_head_cluster == 1);
  p.kv_tile = 0;
  p.kv = DType::bf16;  // 256-byte rows
  CHECK(decode_plan(p, h100()).kv_head_cluster == 1);
  p.kv = DType::fp8;
  p.batch = 2;
  p.max_pages_per_seq = 64;  // B=2 L=4096: 16 splits of 2 tiles
  plan = decode_plan(p, h100());
  REQUIRE(plan.num_splits == 16);
  CHECK(plan.kv_head_cluster == 1);
  p.batch = 1;
  p.max_pages_per_seq = 1024;  // B=1 L=65536: 32 splits of 16 tiles
  CHECK(decode_plan(p, h100()).kv_head_cluster == 2);
  p.backend = Backend::portable;
  CHECK(decode_plan(p, h100()).kv_head_cluster == 1);
}

TEST_CASE("the splits of a launch form one cluster that merges in shared memory", "[decode]") {
  DecodeParams p = valid_params();  // Hq 32 / Hkv 8 / D 128, page 64
  p.batch = 4;
  p.max_pages_per_seq = 128;  // B=4 L=8192: 8 splits
  p.backend = Backend::hopper;
  DecodePlan plan = decode_plan(p, h100());
  REQUIRE(plan.num_splits == xqajit_max_cluster_splits);
  CHECK(plan.split_cluster == plan.num_splits);
  CHECK(plan.grid[0] % plan.split_cluster == 0);
  CHECK(plan.workspace_bytes > 0);  // the workspace stays the contract (decode may launch unclustered)
  p.kv = DType::fp8;
  p.batch = 16;
  p.max_pages_per_seq = 64;  // B=16 L=4096 fp8: 2 splits; the head pairs stay the fallback
  plan = decode_plan(p, h100());
  REQUIRE(plan.num_splits == 2);
  CHECK(plan.split_cluster == 2);
  CHECK(plan.kv_head_cluster == 2);
  p.kv = DType::bf16;
  p.batch = 1;
  p.max_pages_per_seq = 128;  // B=1 L=8192: 16 splits, more than one cluster merges
  plan = decode_plan(p, h100());
  REQUIRE(plan.num_splits > xqajit_max_cluster_splits);
  CHECK(plan.split_cluster == 1);
  p.batch = 64;  // one split: nothing to merge
  p.max_pages_per_seq = 64;
  CHECK(decode_plan(p, h100()).split_cluster == 1);
  p.batch = 4;
  p.max_pages_per_seq = 128;
  p.backend = Backend::portable;  // the portable kernel merges in a cluster too, from sm_90 on
  plan = decode_plan(p, h100());
  REQUIRE(plan.num_splits > 1);
  CHECK(plan.split_cluster == plan.num_splits);
  REQUIRE(decode_plan(p, a100()).num_splits > 1);
  CHECK(decode_plan(p, a100()).split_cluster == 1);  // no clusters before sm_90
}

TEST_CASE("split clusters of about one CTA per SM launch without PDL", "[decode]") {
  DecodeParams p = valid_params();  // Hq 32 / Hkv 8 / D 128, page 64, bf16
  p.batch = 2;
  p.max_pages_per_seq = 64;  // L=4096: 8 splits, 128 CTAs in clusters of 8 on 132 SMs
  DecodePlan plan = decode_plan(p, h100());
  REQUIRE(plan.split_cluster == 8);
  REQUIRE(plan.grid[0] * plan.grid[1] * plan.grid[2] == 128);
  CHECK_FALSE(plan.programmatic_dependent_launch);
  p.batch = 4;  // 256 CTAs: the next grid cannot start beside this one, PDL stays
  plan = decode_plan(p, h100());
  REQUIRE(plan.split_cluster > 1);
  CHECK(plan.programmatic_dependent_launch);
  p.batch = 1;  // fp8, L=2048: 64 CTAs in clusters of 8, half the SMs: PDL stays
  p.kv = DType::fp8;
  p.max_pages_per_seq = 32;
  plan = decode_plan(p, h100());
  REQUIRE(plan.split_cluster > 1);
  REQUIRE(plan.grid[0] * plan.grid[1] * plan.grid[2] <= 66);
  CHECK(plan.programmatic_dependent_launch);
  p.batch = 2;
  p.kv = DType::bf16;
  p.max_pages_per_seq = 128;  // L=8192: 16 splits merge through the workspace, PDL stays
  plan = decode_plan(p, h100());
  REQUIRE(plan.split_cluster == 1);
  CHECK(plan.programmatic_dependent_launch);
}
