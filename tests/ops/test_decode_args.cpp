// CPU tests of the decode launcher: argument validation (no GPU needed, no
// driver touched), the spec and split plan it derives, and NVRTC compiles of a
// representative sample of the GQA family for sm_90a and sm_120a.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>

#include "gqa/hopper_geometry.h"
#include "support/expect_error.hpp"
#include "support/fake_device.hpp"
#include "xqajit/compile/compiler.hpp"
#include "xqajit/decode_args.h"
#include "xqajit/ops/decode.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"

using namespace xqajit;
using xqajit::test::a100;
using xqajit::test::fake;
using xqajit::test::h100;
using xqajit::test::rtx_sm120;
using xqajit::test::spec_error;

namespace {

DecodeParams valid_params() {
  DecodeParams p;
  xqajit::test::fake_shared_tensors(p);
  p.k_cache = fake<void>(0x30000);
  p.v_cache = fake<void>(0x40000);
  p.input = p.kv = p.output = DType::bf16;
  p.batch = 4;
  p.num_q_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.page_size = 64;
  p.max_pages_per_seq = 16;
  p.num_pages = 100;
  return p;
}

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
  expect_rejected([](DecodeParams& p) { p.q = nullptr; }, "q ");
  expect_rejected([](DecodeParams& p) { p.out = nullptr; }, "out");
  expect_rejected([](DecodeParams& p) { p.k_cache = nullptr; }, "k_cache");
  expect_rejected([](DecodeParams& p) { p.v_cache = nullptr; }, "v_cache");
  expect_rejected([](DecodeParams& p) { p.block_table = nullptr; }, "block_table");
  expect_rejected([](DecodeParams& p) { p.seq_lens = nullptr; }, "seq_lens");
  expect_rejected([](DecodeParams& p) { p.q = fake<void>(0x10008); }, "aligned");
  expect_rejected([](DecodeParams& p) { p.kv = DType::fp16; }, "kv");
  expect_rejected([](DecodeParams& p) { p.input = DType::fp8; }, "input");
  expect_rejected([](DecodeParams& p) { p.output = DType::fp16; }, "output");
  expect_rejected([](DecodeParams& p) { p.output = DType::fp8; }, "output");  // 16-bit cache
  expect_rejected([](DecodeParams& p) { p.num_q_heads = 30; }, "num_q_heads");  // group does not divide
  expect_rejected([](DecodeParams& p) { p.num_kv_heads = 0; }, "num_kv_heads");
  expect_rejected([](DecodeParams& p) { p.num_q_heads = 8 * 128; }, "num_q_heads");  // group 128
  expect_rejected([](DecodeParams& p) { p.head_dim = 96; }, "head_dim");
  expect_rejected([](DecodeParams& p) { p.page_size = 8; }, "page_size");
  expect_rejected([](DecodeParams& p) { p.batch = 0; }, "batch");
  expect_rejected([](DecodeParams& p) { p.q_len = 33; }, "q_len");
  expect_rejected([](DecodeParams& p) { p.q_len = 2; }, "spec_mask");
  expect_rejected([](DecodeParams& p) { p.max_pages_per_seq = 0; }, "max_pages_per_seq");
  expect_rejected([](DecodeParams& p) { p.block_table_stride = 3; }, "block_table_stride");
  expect_rejected([](DecodeParams& p) { p.sliding_window = -1; }, "sliding_window");
  expect_rejected([](DecodeParams& p) { p.num_splits = 65; }, "num_splits");
  expect_rejected([](DecodeParams& p) { p.kv_tile = 48; }, "kv_tile");
  expect_rejected([](DecodeParams& p) { p.q_stride_head = 64; }, "q_stride_head");       // heads overlap
  expect_rejected([](DecodeParams& p) { p.q_stride_head = 132; }, "q_stride_head");      // not 16-byte
  expect_rejected([](DecodeParams& p) { p.out_stride_batch = 128; }, "out_stride_batch"); // requests overlap heads
  expect_rejected([](DecodeParams& p) { p.k_stride_token = 64; }, "k_stride_token");
  expect_rejected([](DecodeParams& p) { p.v_stride_page = 1024; }, "v_stride_page");     // pages overlap
  expect_rejected([](DecodeParams& p) { p.k_stride_head = -128; }, "k_stride_head");
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
  p.kv = DType::bf16;
  REQUIRE(decode_plan(p, h100()).num_splits > 1);
  CHECK(decode_plan(p, h100()).spec.backend == Backend::hopper);
  p.head_dim = 256;
  CHECK(decode_plan(p, h100()).spec.backend == Backend::hopper);
  p.batch = 64;
  REQUIRE(decode_plan(p, h100()).num_splits == 1);
  CHECK(decode_plan(p, h100()).spec.backend == Backend::hopper);
  p.q_len = 4;
  CHECK(decode_plan(p, h100()).spec.backend == Backend::portable);
  p.head_dim = 128;
  CHECK(decode_plan(p, h100()).spec.backend == Backend::hopper);
  p.q_len = 1;
  REQUIRE(decode_plan(p, h100()).num_splits == 1);
  CHECK(decode_plan(p, h100()).spec.backend == Backend::portable);
  p.batch = 1;
  // Speculative decoding at B=1: hopper for both caches.
  p.q_len = 4;
  CHECK(decode_plan(p, h100()).spec.backend == Backend::hopper);
  p.kv = DType::fp8;
  CHECK(decode_plan(p, h100()).spec.backend == Backend::hopper);
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
