// CPU tests of the MLA launcher: argument validation (no GPU, no driver), the
// spec and backend it resolves, the split plan and workspace it derives on a
// Hopper and an SM120-class device, and NVRTC compiles of EVERY MLA spec for
// sm_90a (both backends) and sm_120a.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>

#include "ops/paged_op_checks.hpp"
#include "support/expect_error.hpp"
#include "support/fake_device.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "xqajit/error.hpp"
#include "xqajit/ops/mla_decode.hpp"
#include "mla/hopper_geometry.h"
#include "xqajit/ops/split_plan.hpp"

using namespace xqajit;
using xqajit::test::fake;
using xqajit::test::h100;
using xqajit::test::rtx_sm120;

namespace {

MlaDecodeParams valid_params() {
  MlaDecodeParams p;
  xqajit::test::fake_paged_call(p, 8, 64, 64, 1000);
  p.kv_cache = fake<void>(0x30000);
  p.num_heads = 128;
  p.sm_scale = 0.0721687836f;
  return p;
}

template <class Mutate>
void expect_rejected(Mutate&& mutate, const std::string& field) {
  xqajit::test::expect_rejected(valid_params(), mutate, "mla_decode: " + field);
}

}  // namespace

TEST_CASE("mla_decode validates every argument before anything launches", "[mla][args]") {
  CHECK_NOTHROW(validate(valid_params()));
  xqajit::test::expect_paged_refusals(valid_params(), "mla_decode");  // the fields every op shares
  expect_rejected([](auto& p) { p.kv_cache = nullptr; }, "kv_cache");
  expect_rejected([](auto& p) { p.input = DType::fp16; }, "input");
  expect_rejected(
      [](auto& p) {
        p.input = DType::fp8;
        p.kv = DType::bf16;
      },
      "kv");
  expect_rejected([](auto& p) { p.q_len = 5; }, "q_len");
  expect_rejected([](auto& p) { p.num_heads = 24; }, "num_heads");
  expect_rejected([](auto& p) { p.page_size = 16; }, "page_size");
  expect_rejected([](auto& p) { p.sm_scale = 0.f; }, "sm_scale");
  expect_rejected([](auto& p) { p.sm_scale = -1.f; }, "sm_scale");
  expect_rejected([](auto& p) { p.q_stride_head = 100; }, "q_stride_head");         // not 16-byte aligned
  expect_rejected([](auto& p) { p.q_stride_head = 512; }, "q_stride_head");         // rows overlap
  expect_rejected([](auto& p) { p.kv_stride_token = 520; }, "kv_stride_token");     // rows overlap
  expect_rejected([](auto& p) { p.kv_stride_page = 576 * 63; }, "kv_stride_page");  // pages overlap
  expect_rejected([](auto& p) { p.out_stride_head = 256; }, "out_stride_head");
  // Mixed precision and pooled caches are fine.
  MlaDecodeParams p = valid_params();
  p.kv = DType::fp8;
  p.kv_stride_token = 640;
  p.kv_stride_page = 640 * 64 + 128;
  CHECK_NOTHROW(validate(p));
}

TEST_CASE("mla_decode_cache_bytes spans the last row of the last page", "[mla][args]") {
  MlaDecodeParams p = valid_params();  // 1000 pages of 64 latent rows of 576 bf16
  CHECK(mla_decode_cache_bytes(p) == std::size_t{1000} * 64 * 576 * 2);
  p.kv = DType::fp8;
  p.input = DType::bf16;
  p.kv_stride_token = 656;  // fp8 rows padded to 656 bytes
  CHECK(mla_decode_cache_bytes(p) == std::size_t{999} * 64 * 656 + 63 * 656 + 576);
  p.num_pages = 0;
  CHECK(mla_decode_cache_bytes(p) == 0);
}

TEST_CASE("mla_decode resolves its backend by arch", "[mla][args]") {
  MlaDecodeParams p = valid_params();
  CHECK(mla_decode_spec(p, Arch::parse("sm_90a")).backend == Backend::hopper);
  CHECK(mla_decode_spec(p, Arch::parse("sm_120a")).backend == Backend::portable);
  CHECK(mla_decode_spec(p, Arch::parse("sm_100a")).backend == Backend::portable);
  p.backend = Backend::portable;
  CHECK(mla_decode_spec(p, Arch::parse("sm_90a")).backend == Backend::portable);
  p.backend = Backend::hopper;
  CHECK_THROWS_AS(mla_decode_spec(p, Arch::parse("sm_120a")), SpecError);
  const KernelSpec s = mla_decode_spec(valid_params(), Arch::parse("sm_90a"));
  CHECK(canonical_name(s) == "mla_bf16_kvbf16_obf16_d576_p64_g128_q1_sw0_t64_hopper_sm90a");
}

TEST_CASE("mla_decode's auto backend is hopper on sm_90a at every row count, portable elsewhere", "[mla][args]") {
  auto planned = [](int heads, int q_len, DType kv, int batch) {
    MlaDecodeParams p = valid_params();
    p.num_heads = heads;
    p.q_len = q_len;
    p.kv = kv;
    p.input = kv == DType::fp8 && heads == 64 ? DType::fp8 : DType::bf16;
    p.batch = batch;
    return mla_decode_plan(p, h100()).spec.backend;
  };
  const DType bf = DType::bf16, f8 = DType::fp8;
  for (int batch : {1, 16, 17, 64})
    for (DType kv : {bf, f8})
      for (auto [heads, q_len] : {std::pair{16, 1}, std::pair{16, 2}, std::pair{32, 1}, std::pair{64, 1},
                                  std::pair{128, 1}}) {
        INFO("H " << heads << " q_len " << q_len << " B " << batch);
        CHECK(planned(heads, q_len, kv, batch) == Backend::hopper);
      }
  CHECK(mla_decode_plan(valid_params(), rtx_sm120()).spec.backend == Backend::portable);
  MlaDecodeParams p = valid_params();
  p.num_heads = 16;
  p.backend = Backend::portable;  // asked for: kept
  CHECK(mla_decode_plan(p, h100()).spec.backend == Backend::portable);
}

TEST_CASE("mla_decode plans fit the device and split small batches", "[mla][args]") {
  for (const DeviceInfo& device : {h100(), rtx_sm120()})
    for (Backend backend : backends_for(Kind::mla, device.best_arch()))
      for (DType kv : {DType::bf16, DType::fp8})
        for (int heads : {16, 32, 64, 128})
          for (int q_len : {1, 2, 4}) {
            MlaDecodeParams p = valid_params();
            p.kv = kv;
            p.num_heads = heads;
            p.q_len = q_len;
            p.backend = backend;
            INFO(device.name << " " << to_string(backend) << " kv=" << to_string(kv) << " H=" << heads
                             << " q_len=" << q_len);
            const MlaDecodePlan plan = mla_decode_plan(p, device);
            CHECK(plan.spec.backend == backend);
            CHECK(static_cast<int>(plan.smem_bytes) <= device.max_smem_per_block_optin);
            CHECK(plan.threads % 32 == 0);
            if (plan.balanced_parts > 0) {  // hopper's shares (m84; test_mla_balanced_plan has the rest)
              CHECK(backend == Backend::hopper);
              CHECK(plan.merge_launch);
              CHECK(plan.rows_per_cta * static_cast<int>(plan.grid[0]) >= heads * q_len);
              CHECK(plan.grid[2] == 1u);
              CHECK(plan.merge_grid[2] == 8u);
              continue;
            }
            CHECK(plan.rows_per_cta * static_cast<int>(plan.grid[1]) >= heads * q_len);
            CHECK(plan.grid[2] == 8u);
            CHECK(static_cast<long>(plan.num_splits) * plan.split_tokens >= 64L * 64);
            CHECK(plan.split_tokens % plan.spec.kv_tile == 0);
            if (plan.num_splits > 1) {
              const std::size_t groups = 8 * plan.grid[1];
              const std::size_t counters = (groups * 4 + 255) / 256 * 256;
              CHECK(plan.workspace_bytes ==
                    counters + groups * plan.num_splits * plan.rows_per_cta * (512 + 2) * sizeof(float));
            } else {
              CHECK(plan.workspace_bytes == 0);
            }
          }
  // One long request spreads over the GPU.
  MlaDecodeParams lone = valid_params();
  lone.batch = 1;
  lone.max_pages_per_seq = 512;  // 32k keys
  CHECK(mla_decode_plan(lone, h100()).num_splits >= 16);
  // Forced splits are honoured; a count the merge cannot stage is an ArgumentError.
  lone.num_splits = 5;
  CHECK(mla_decode_plan(lone, h100()).num_splits == 5);
  lone.num_splits = 64;
  try {
    (void)mla_decode_plan(lone, h100());
  } catch (const ArgumentError& e) {
    CHECK(std::string(e.what()).find("num_splits") != std::string::npos);
  }
}

TEST_CASE("mla_decode merges many split rows in a second launch, few in the last CTA", "[mla][args]") {
  for (Backend backend : backends_for(Kind::mla, h100().best_arch())) {
    INFO(to_string(backend));
    MlaDecodeParams p = valid_params();
    p.backend = backend;
    p.batch = 1;
    p.max_pages_per_seq = 512;  // 32k keys: the automatic plan splits wide
    const MlaDecodePlan wide = mla_decode_plan(p, h100());
    REQUIRE(wide.num_splits > 1);
    CHECK(wide.merge_launch);  // 128 heads: every split row is 2 KB the last CTA would read alone
    CHECK(wide.merge_grid[0] == static_cast<unsigned>(wide.rows_per_cta));
    CHECK(wide.merge_grid[1] == wide.grid[1]);
    CHECK(wide.merge_grid[2] == 1u);
    CHECK(wide.merge_threads == 512u);  // 64 splits: four split groups of 128 threads
    CHECK(wide.merge_rows == 1);
    p.num_heads = 16;
    p.num_splits = 2;  // 2 x 16 rows: the last CTA merges
    CHECK_FALSE(mla_decode_plan(p, h100()).merge_launch);
    p.num_splits = 3;
    const MlaDecodePlan few = mla_decode_plan(p, h100());
    CHECK(few.merge_launch);
    CHECK(few.merge_rows == 1);  // the split grid's 3 splits: a CTA a real row
    CHECK(few.merge_grid[0] == 16u);
    CHECK(few.merge_threads == 128u);
    p.num_splits = 1;
    CHECK_FALSE(mla_decode_plan(p, h100()).merge_launch);
  }
}


TEST_CASE("mla_decode's hopper backend merges two splits in a cluster, no merge launch", "[mla][args]") {
  MlaDecodeParams p = valid_params();
  p.batch = 32;
  p.max_pages_per_seq = 64;
  for (int splits : {1, 2, 3, 4}) {
    INFO(splits);
    p.num_splits = splits;
    p.backend = Backend::hopper;
    const MlaDecodePlan hopper = mla_decode_plan(p, h100());
    CHECK(hopper.split_cluster == (splits == 2 ? 2 : 1));
    if (splits == 2) CHECK_FALSE(hopper.merge_launch);  // the cluster merges (the workspace stays the fallback)
    CHECK(hopper.workspace_bytes == (splits > 1 ? split_workspace_bytes(32LL * hopper.grid[1], splits,
                                                                         hopper.rows_per_cta, 512)
                                                : 0u));
    p.backend = Backend::portable;
    CHECK(mla_decode_plan(p, h100()).split_cluster == 1);
  }
}

namespace {
MlaDecodeParams sparse_params() {
  MlaDecodeParams p = valid_params();
  p.block_table = nullptr;
  p.seq_lens = nullptr;
  p.max_pages_per_seq = 0;
  p.indices = fake<std::int32_t>(0x70000);
  p.topk = 2048;
  p.q_len = 2;
  return p;
}

void expect_sparse_rejected(const std::function<void(MlaDecodeParams&)>& mutate, const std::string& field,
                            const std::string& says = "") {
  MlaDecodeParams p = sparse_params();
  mutate(p);
  INFO("field " << field);
  CHECK_THROWS_AS(validate(p), ArgumentError);
  CHECK_THROWS_WITH(validate(p), Catch::Contains("mla_decode: " + field) && Catch::Contains(says));
}
}  // namespace

TEST_CASE("sparse mla_decode (DSA) validates its index lists and extra outputs", "[mla][args][sparse]") {
  CHECK_NOTHROW(validate(sparse_params()));
  CHECK(is_sparse(sparse_params()));
  expect_sparse_rejected([](auto& p) { p.block_table = fake<std::int32_t>(0x50000); }, "block_table", "null");
  expect_sparse_rejected([](auto& p) { p.seq_lens = fake<std::int32_t>(0x60000); }, "seq_lens", "topk_length");
  expect_sparse_rejected([](auto& p) { p.spec_mask = fake<std::uint32_t>(0x80000); }, "spec_mask", "null");
  expect_sparse_rejected([](auto& p) { p.topk = 0; }, "topk", "= 0: allowed 1 to");
  expect_sparse_rejected([](auto& p) { p.topk = (1 << 20) + 1; }, "topk");
  expect_sparse_rejected([](auto& p) { p.num_pages = 0; }, "num_pages", "page count");
  expect_sparse_rejected([](auto& p) { p.num_pages = 1 << 26; }, "num_pages", "2^31");
  expect_sparse_rejected([](auto& p) { p.indices_stride_token = 100; }, "indices_stride_token", "overlap");
  expect_sparse_rejected([](auto& p) { p.indices_stride_batch = -1; }, "indices_stride_batch", "positive");
  expect_sparse_rejected([](auto& p) { p.lse = fake<float>(0x90000); p.lse_stride_token = 64; },
                         "lse_stride_token", "overlap");
  // Any stride layout that keeps entries apart: FlashMLA's lse is [batch, heads, q_len].
  MlaDecodeParams flash = sparse_params();
  flash.lse = fake<float>(0x90004);  // 4-byte aligned is enough
  flash.lse_stride_head = flash.q_len;
  flash.lse_stride_token = 1;
  flash.lse_stride_batch = flash.q_len * flash.num_heads;
  flash.attn_sink = fake<float>(0xa0004);
  flash.topk_length = fake<std::int32_t>(0xb0004);
  flash.indices = fake<std::int32_t>(0x70004);
  flash.topk = 100;  // any count
  CHECK_NOTHROW(validate(flash));
  // Dense calls: topk_length without indices is a mistake, lse and sinks are fine.
  expect_rejected([](auto& p) { p.topk_length = fake<std::int32_t>(0xb0000); }, "topk_length");
  MlaDecodeParams dense = valid_params();
  dense.lse = fake<float>(0x90000);
  dense.attn_sink = fake<float>(0xa0000);
  CHECK_NOTHROW(validate(dense));
}

TEST_CASE("sparse mla_decode plans: hopper on sm_90a, a CTA's rows one token's heads, splits over topk",
          "[mla][args][sparse]") {
  for (const DeviceInfo& device : {h100(), rtx_sm120()})
    for (DType kv : {DType::bf16, DType::fp8, DType::fp8ds})
      for (int heads : {16, 32, 64, 128})
        for (int q_len : {1, 2, 4})
          for (int topk : {64, 2048}) {
            MlaDecodeParams p = sparse_params();
            p.kv = kv;
            p.num_heads = heads;
            p.q_len = q_len;
            p.topk = topk;
            INFO(device.name << " kv=" << to_string(kv) << " H=" << heads << " q_len=" << q_len << " topk=" << topk);
            const MlaDecodePlan plan = mla_decode_plan(p, device);
            CHECK(plan.spec.sparse);
            // Hopper on sm_90a at every head count and q_len.
            const bool hopper = device.best_arch().number() == 90;
            CHECK(plan.spec.backend == (hopper ? Backend::hopper : Backend::portable));
            // A row block never spans two tokens: whole blocks of one token's heads, or one
            // token's heads padded into one block, a block a query token.
            if (plan.rows_per_cta <= heads) {
              CHECK(heads % plan.rows_per_cta == 0);
              CHECK(plan.rows_per_cta * static_cast<int>(plan.grid[1]) == heads * q_len);
            } else {
              CHECK(plan.grid[1] == static_cast<unsigned>(q_len));
            }
            CHECK(static_cast<long>(plan.num_splits) * plan.split_tokens >= topk);
            CHECK(plan.split_tokens % plan.spec.kv_tile == 0);
            CHECK(static_cast<int>(plan.smem_bytes) <= device.max_smem_per_block_optin);
            // Hopper: a producer warpgroup for fp8 rows and for H=128, whose token's two row
            // blocks are one cluster sharing each tile's gather (m21); no split cluster then.
            // Not for fp8ds at 16 heads (a CTA's 16 rows): its math warpgroups gather their own
            // rows (m53).
            const bool narrow_ds = kv == DType::fp8ds && heads == 16;
            const bool producer = hopper && (kv != DType::bf16 || heads == 128) && !narrow_ds;
            CHECK(plan.threads == (producer ? 384u : hopper ? 256u : plan.threads));
            CHECK(plan.row_cluster == (hopper && heads == 128 ? 2 : 1));
            CHECK(plan.grid[1] % plan.row_cluster == 0);
            if (plan.row_cluster > 1) CHECK(plan.split_cluster == 1);
          }
  MlaDecodeParams p = sparse_params();
  p.backend = Backend::hopper;
  CHECK(mla_decode_plan(p, h100()).spec.backend == Backend::hopper);
  CHECK(canonical_name(mla_decode_spec(p, h100().best_arch())).find("_sparse_hopper_") != std::string::npos);
  // Below 64 heads with several query tokens a hopper CTA takes one token's heads (its other
  // rows padding): a row block a token, and the merge launch's rows are the real ones.
  p.num_heads = 32;
  p.num_splits = 16;
  const MlaDecodePlan tokens = mla_decode_plan(p, h100());
  CHECK(tokens.grid[1] == 2u);
  CHECK(tokens.rows_per_cta == 64);
  if (tokens.merge_launch) CHECK(tokens.merge_grid[0] == 32u);
  static_assert(xqajit_mla_hopper_geometry(16, 4, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 1).row_stride == 16,
                "H=16 sparse at q_len 4: a CTA a token");
  static_assert(xqajit_mla_hopper_geometry(16, 4, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 1).row_blocks == 4,
                "H=16 sparse at q_len 4: four row blocks");
  static_assert(xqajit_mla_hopper_geometry(16, 2, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 0).row_stride == 64,
                "dense H=16 at q_len 2: both tokens in one CTA");
  static_assert(xqajit_mla_hopper_geometry(16, 1, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 1).row_stride == 64,
                "one row block at q_len 1: the kernels of session 34, unchanged");
  p.num_splits = 0;
  p.backend = Backend::automatic;
  CHECK(mla_decode_spec(p, h100().best_arch()).backend == Backend::hopper);
  // Dense specs are unchanged: hopper on sm_90a, two warpgroups, no row cluster.
  CHECK(mla_decode_spec(valid_params(), h100().best_arch()).backend == Backend::hopper);
  CHECK(mla_decode_plan(valid_params(), h100()).threads == 256u);
  CHECK(mla_decode_plan(valid_params(), h100()).row_cluster == 1);
  // H=128 with two splits: the row cluster wins over the split cluster (a CTA is in one
  // cluster), so the last CTA or a merge launch merges the splits.
  p = sparse_params();
  p.num_heads = 128;
  p.num_splits = 2;
  const MlaDecodePlan two = mla_decode_plan(p, h100());
  CHECK(two.row_cluster == 2);
  CHECK(two.split_cluster == 1);
  static_assert(xqajit_mla_hopper_geometry(128, 2, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 1).stages == 2,
                "sparse fp8ds: the producer's two bf16 buffers");
  static_assert(xqajit_mla_hopper_geometry(64, 1, 64, XQAJIT_MLA_QK_DIM * 2, 2, 90, 1).threads == 256,
                "sparse bf16 at one row block a token: the math threads gather (m19)");
}

TEST_CASE("sparse mla_decode plans splits of one tile where the launch takes at most half of the slots",
          "[mla][args][sparse]") {
  auto splits = [](int heads, int batch, int topk, DType kv = DType::fp8ds) {
    MlaDecodeParams p = sparse_params();
    p.kv = kv;
    p.num_heads = heads;
    p.batch = batch;
    p.q_len = 1;
    p.topk = topk;
    return mla_decode_plan(p, h100()).num_splits;
  };
  // Session 39 run 2 (H200): one tile a split at B=1, two where one-tile splits would fill the slots.
  CHECK(splits(128, 1, 2048) == 32);  // 32 clusters of two CTAs: half of the 132 SMs
  CHECK(splits(128, 1, 2048, DType::bf16) == 32);
  CHECK(splits(64, 1, 2048) == 32);
  CHECK(splits(16, 1, 2048) == 32);
  CHECK(splits(128, 1, 512) == 8);
  CHECK(splits(128, 2, 2048) == 16);  // 64 clusters of one tile lost to 32 of two
  CHECK(splits(128, 64, 2048) == 1);
  // Dense splits keep two tiles at least: B=1 L=4096 (64 tiles) caps at 32 splits.
  MlaDecodeParams dense = valid_params();
  dense.batch = 1;
  dense.num_heads = 64;
  dense.q_len = 1;
  dense.max_pages_per_seq = 64;  // 4096 keys, 64 tiles
  CHECK(mla_decode_plan(dense, h100()).num_splits == 32);
}

TEST_CASE("the fp8-with-scales cache (kv=fp8ds): byte strides, bf16 Q, plans on both backends",
          "[mla][args][fp8ds]") {
  auto ds = [] {
    MlaDecodeParams p = valid_params();
    p.kv = DType::fp8ds;
    return p;
  };
  CHECK_NOTHROW(validate(ds()));
  auto rejected = [&](const std::function<void(MlaDecodeParams&)>& mutate, const std::string& field,
                      const std::string& says) {
    MlaDecodeParams p = ds();
    mutate(p);
    INFO("field " << field);
    CHECK_THROWS_AS(validate(p), ArgumentError);
    CHECK_THROWS_WITH(validate(p), Catch::Contains("mla_decode: " + field) && Catch::Contains(says));
  };
  rejected([](auto& p) { p.input = DType::fp8; }, "kv", "fp8ds needs a bf16 Q");
  rejected([](auto& p) { p.kv_stride_token = 664; }, "kv_stride_token",
           "16 bytes");  // rows must stay aligned
  rejected([](auto& p) { p.kv_stride_token = 640; }, "kv_stride_token",
           "656 bytes of an fp8ds row");  // overlap
  rejected([](auto& p) { p.kv_stride_page = 656 * 63; }, "kv_stride_page", "overlap");
  // FlashMLA's quantised cache: pages of page_size + 1 rows (its test pads them), rows of 656.
  MlaDecodeParams flash = ds();
  flash.kv_stride_token = 656;
  flash.kv_stride_page = 656 * 65;
  CHECK_NOTHROW(validate(flash));
  CHECK(mla_decode_cache_bytes(flash) == std::size_t{999} * 656 * 65 + 63 * 656 + 656);
  CHECK(mla_decode_cache_bytes(ds()) == std::size_t{1000} * 64 * 656);
  // Hopper on sm_90a (one raw stage: two of 656-byte rows do not fit beside Q and the bf16
  // tile), portable elsewhere.
  for (const DeviceInfo& device : {h100(), rtx_sm120()})
    for (int heads : {16, 32, 64, 128})
      for (int q_len : {1, 2, 4}) {
        MlaDecodeParams p = ds();
        p.num_heads = heads;
        p.q_len = q_len;
        INFO(device.name << " H=" << heads << " q_len=" << q_len);
        const MlaDecodePlan plan = mla_decode_plan(p, device);
        CHECK(plan.spec.kv == DType::fp8ds);
        const bool hopper = device.best_arch().number() == 90;
        CHECK(plan.spec.backend == (hopper ? Backend::hopper : Backend::portable));
        CHECK(static_cast<int>(plan.smem_bytes) <= device.max_smem_per_block_optin);
        CHECK(canonical_name(plan.spec).find("_kvfp8ds_") != std::string::npos);
      }
  static_assert(xqajit_mla_hopper_geometry(128, 1, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 0).stages == 1,
                "two fp8ds raw stages do not fit the hopper kernel");
  static_assert(xqajit_mla_hopper_geometry(128, 1, 64, XQAJIT_MLA_QK_DIM, 2, 90, 0).stages == 2, "fp8: two");
  static_assert(xqajit_mla_hopper_geometry(16, 2, 64, XQAJIT_MLA_QK_DIM * 2, 2, 90, 1).row_blocks == 2,
                "sparse hopper: one token's heads a CTA");
  MlaDecodeParams portable = ds();
  portable.backend = Backend::portable;
  CHECK(mla_decode_plan(portable, h100()).spec.backend == Backend::portable);
  // A raw row takes more shared memory than an fp8 one (656 vs 576 bytes a key).
  MlaDecodeParams fp8 = valid_params();
  fp8.kv = DType::fp8;
  fp8.backend = Backend::portable;
  CHECK(mla_decode_plan(portable, h100()).smem_bytes > mla_decode_plan(fp8, h100()).smem_bytes);
}

TEST_CASE("fp8 or bf16 Q over a plain fp8 cache runs on the fp8 tensor cores (hopper)", "[mla][args]") {
  constexpr int fp8_row = XQAJIT_MLA_QK_DIM;
  // Which specs: fp8 or bf16 Q, a plain fp8 cache, dense.
  static_assert(xqajit_mla_hopper_qgmma(128, 1, fp8_row, 1, 0), "H=128");
  static_assert(xqajit_mla_hopper_qgmma(64, 2, fp8_row, 1, 0) && xqajit_mla_hopper_qgmma(32, 4, fp8_row, 1, 0),
                "two row blocks at q_len > 1");
  static_assert(xqajit_mla_hopper_qgmma(64, 1, fp8_row, 1, 0) && xqajit_mla_hopper_qgmma(32, 1, fp8_row, 1, 0) &&
                    xqajit_mla_hopper_qgmma(16, 2, fp8_row, 1, 0),
                "one row block of 32 rows or more (m37)");
  static_assert(xqajit_mla_hopper_qgmma(16, 1, fp8_row, 1, 0), "16 rows: the narrow schedule on it (m42)");
  static_assert(xqajit_mla_hopper_qgmma(128, 1, fp8_row, 2, 0) && xqajit_mla_hopper_qgmma(32, 1, fp8_row, 2, 0),
                "bf16 Q over fp8: split into two e4m3 planes (m39)");
  static_assert(xqajit_mla_hopper_qgmma(16, 1, fp8_row, 2, 0), "bf16 Q, 16 rows: the narrow schedule on it (m42)");
  static_assert(xqajit_mla_hopper_qgmma(16, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 0),
                "dense fp8ds, 16 rows: the narrow schedule on the fp8 tensor cores (m51)");
  static_assert(!xqajit_mla_hopper_qgmma(16, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 1, 0), "fp8ds: bf16 Q");
  static_assert(!xqajit_mla_hopper_qgmma(128, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 0) &&
                    !xqajit_mla_hopper_qgmma(16, 2, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 0) &&
                    !xqajit_mla_hopper_qgmma(64, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 1),
                "fp8ds: 16 rows");
  // Sparse fp8ds at 16 rows too, its rows gathered by the math warpgroups (m53): no producer,
  // no tensor map, the dense map's geometry.
  static_assert(xqajit_mla_hopper_qgmma(16, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 1) &&
                    !xqajit_mla_hopper_producer(16, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 1) &&
                    !xqajit_mla_hopper_kv_map(16, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 1),
                "sparse fp8ds, 16 rows: the narrow schedule, gathered (m53)");
  static_assert(xqajit_mla_hopper_producer(16, 1, fp8_row, 2, 1) &&
                    xqajit_mla_hopper_producer(64, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 1) &&
                    xqajit_mla_hopper_producer(128, 1, fp8_row * 2, 2, 1) &&
                    !xqajit_mla_hopper_producer(64, 1, fp8_row * 2, 2, 1),
                "the producer: other sparse fp8 rows, and H=128's cluster");
  static_assert(xqajit_mla_hopper_geometry(16, 1, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 1).threads == 256 &&
                    xqajit_mla_hopper_geometry(16, 1, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 1).smem_bytes ==
                        xqajit_mla_hopper_geometry(16, 1, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 0).smem_bytes,
                "sparse fp8ds at 16 rows: two warpgroups on the dense map");
  static_assert(!xqajit_mla_hopper_qgmma(128, 1, fp8_row, 1, 1), "sparse: the producer");
  // Its shared memory: Q, four raw tiles, three P, the row stats; a split Q's two planes, three
  // tiles and its row scales. Both within sm_90's opt-in limit.
  constexpr XqajitMlaGeometry g = xqajit_mla_hopper_geometry(128, 1, 64, fp8_row, 1, 90, 0);
  static_assert(g.smem_bytes == xqajit_mla_hopper_qgmma_smem(64, 1, 128) && g.stages == 2 && g.threads == 256,
                "the QGMMA geometry");
  constexpr XqajitMlaGeometry split = xqajit_mla_hopper_geometry(128, 1, 64, fp8_row, 2, 90, 0);
  static_assert(split.smem_bytes == xqajit_mla_hopper_qgmma_smem(64, 2, 128) && split.stages == 2,
                "the split-Q QGMMA geometry");
  static_assert(xqajit_mla_hopper_qgmma_buffers(1, 64) == 4 && xqajit_mla_hopper_qgmma_buffers(2, 64) == 3,
                "an fp8 Q's four tile buffers, a split Q's three");
  // 16 rows: a split Q's lo plane in the one plane's rows 16-31, so four buffers either way.
  constexpr XqajitMlaGeometry narrow = xqajit_mla_hopper_geometry(16, 1, 64, fp8_row, 2, 90, 0);
  static_assert(xqajit_mla_hopper_qgmma_planes(2, 16) == 1 && xqajit_mla_hopper_qgmma_buffers(2, 16) == 4 &&
                    narrow.smem_bytes == xqajit_mla_hopper_qgmma_smem(64, 2, 16) && narrow.stages == 2 &&
                    narrow.smem_bytes <= xqajit_mla_smem_budget(90),
                "the narrow QGMMA geometry");
  // The host encodes the cache's tensor map for it (and for bf16 dense), not for the others.
  static_assert(xqajit_mla_hopper_kv_map(128, 1, fp8_row, 1, 0) && xqajit_mla_hopper_kv_map(16, 1, fp8_row * 2, 2, 0),
                "TMA: QGMMA and bf16 dense");
  static_assert(xqajit_mla_hopper_kv_map(128, 1, fp8_row, 2, 0), "TMA: bf16 Q over fp8 (the split Q)");
  static_assert(xqajit_mla_hopper_kv_map(16, 1, fp8_row, 2, 0), "TMA: 16 rows over fp8 (m42)");
  static_assert(xqajit_mla_hopper_kv_map(16, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 0), "TMA: 16 rows over fp8ds (m51)");
  static_assert(!xqajit_mla_hopper_kv_map(64, 1, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 0) &&
                    !xqajit_mla_hopper_kv_map(128, 1, fp8_row * 2, 2, 1) &&
                    !xqajit_mla_hopper_kv_map(16, 1, fp8_row, 2, 1),
                "no map: fp8ds past 16 rows, sparse");
  constexpr XqajitMlaGeometry narrow_ds = xqajit_mla_hopper_geometry(16, 1, 64, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 90, 0);
  static_assert(narrow_ds.smem_bytes == xqajit_mla_hopper_qgmma_smem(64, 2, 16) && narrow_ds.stages > 0,
                "fp8ds at 16 rows: the narrow QGMMA map");
  MlaDecodeParams p = valid_params();
  p.input = p.kv = DType::fp8;
  p.num_heads = 128;
  const MlaDecodePlan plan = mla_decode_plan(p, h100());
  CHECK(plan.spec.backend == Backend::hopper);
  CHECK(plan.smem_bytes == static_cast<std::size_t>(g.smem_bytes));
  CHECK(static_cast<int>(plan.smem_bytes) <= h100().max_smem_per_block_optin);
  p.input = DType::bf16;
  const MlaDecodePlan split_plan = mla_decode_plan(p, h100());
  CHECK(split_plan.smem_bytes == static_cast<std::size_t>(split.smem_bytes));
  CHECK(static_cast<int>(split_plan.smem_bytes) <= h100().max_smem_per_block_optin);
}

TEST_CASE("every fp8ds MLA spec compiles (dense and sparse; sm_89, sm_90a, sm_120a)", "[mla][nvrtc][fp8ds]") {
  xqajit::test::TempDir dir;
  // 2 head counts x 2 page sizes x 2 q_len x dense/sparse x 3 archs = 48 portable kernels.
  const auto r = xqajit::test::run_cli_line(
      "", fmt::format("--cache-dir {} --json prewarm --jobs 2 kind=mla input=bf16 kv=fp8ds group=16,128 "
                      "page_size=32,64 q_len=1,4 sparse=0,1 arch=sm_89,sm_90a,sm_120a",
                      dir.path().string()));
  INFO(r.describe().substr(0, 6000));
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc.at("compiled").get<int>() == 48);
  CHECK(doc.at("failed").get<int>() == 0);
}

TEST_CASE("every MLA spec compiles for sm_90a (both backends) and sm_120a", "[mla][nvrtc]") {
  xqajit::test::TempDir dir;
  // 3 dtype pairs x 4 head counts x 2 page sizes x 4 q_len, per backend and arch:
  // 96 x (hopper + portable on sm_90a, portable on sm_120a) = 288 kernels.
  const auto r = xqajit::test::run_cli_line(
      "", fmt::format("--cache-dir {} --json prewarm --skip-invalid --jobs 2 kind=mla input=bf16,fp8 kv=bf16,fp8 "
                      "group=16,32,64,128 page_size=32,64 q_len=1,2,3,4 backend=portable,hopper "
                      "arch=sm_90a,sm_120a",
                      dir.path().string()));
  INFO(r.describe().substr(0, 6000));
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc.at("compiled").get<int>() == 288);
  CHECK(doc.at("failed").get<int>() == 0);
}

TEST_CASE("hopper mla_decode merges rows of two splits 16 rows a CTA", "[mla][args]") {
  // Sparse H=128 (its row blocks a cluster, so no split cluster): two splits merge in a launch of
  // xqajit_mla_merge_rows (m92), 4 CTAs a row block of 64 rows.
  MlaDecodeParams p = sparse_params();
  p.backend = Backend::hopper;
  p.num_splits = 2;
  const MlaDecodePlan two = mla_decode_plan(p, h100());
  REQUIRE(two.merge_launch);
  CHECK(two.merge_rows == kXqajitMlaMergeRows);
  CHECK(two.merge_grid[0] == 4u);
  CHECK(two.merge_threads == static_cast<unsigned>(kXqajitMlaMergeRowsThreads));
  p.num_splits = 3;  // the split grid's 3: a row a CTA
  CHECK(mla_decode_plan(p, h100()).merge_rows == 1);
  p.backend = Backend::portable;  // the portable module has no rows entry
  p.num_splits = 2;
  CHECK(mla_decode_plan(p, h100()).merge_rows == 1);
}
