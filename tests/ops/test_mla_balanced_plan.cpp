// The MLA balanced plan (kernel_templates/mla/balanced_plan.h, m77), which every CTA of a
// hopper seesaw launch computes from seq_lens: over random batches (empty, one-tile and long
// requests, fewer tiles than walkers), every CTA's pieces together cover each request's
// tiles exactly once, a walker takes its 1 / Z share, each cut request's pieces name one
// another alike and own distinct workspace slots, and a request runs whole where no walker
// cuts it; even lengths run a CTA a request. Plus the host's choice of the plan
// (mla_decode_plan).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "mla/balanced_plan.h"
#include "mla/hopper_geometry.h"
#include "support/fake_device.hpp"
#include "xqajit/ops/mla_decode.hpp"
#include "xqajit/ops/split_plan.hpp"

using namespace xqajit;
using xqajit::mla::BalancedPiece;

namespace {

struct Piece {
  BalancedPiece p;
  int cta;
};

// The plan as a CTA lays it out (balanced_plan_serial: the longest first, P_r over that order,
// and c(r) and the positions run whole where it walks), with views of its arrays.
struct Layout {
  std::vector<int> space;
  mla::BalancedPlan plan;
  const int* order;
  const int* prefix;
  const int* wholes;
};

Layout lay_out(const std::vector<int>& tiles, int parts) {
  const int batch = static_cast<int>(tiles.size());
  Layout l;
  l.space.assign(4 * static_cast<std::size_t>(batch) + 1, -1);
  l.plan = mla::balanced_plan_serial(tiles.data(), batch, parts, l.space.data());
  l.order = l.plan.order;
  l.prefix = l.plan.prefix;
  l.wholes = l.plan.wholes;
  std::set<int> requests(l.order, l.order + batch);
  CHECK(static_cast<int>(requests.size()) == batch);  // a position each
  if (batch > 0) {
    CHECK(*requests.begin() == 0);
    CHECK(*requests.rbegin() == batch - 1);
  }
  for (int r = 1; r < batch; ++r) CHECK(tiles[l.order[r]] <= tiles[l.order[r - 1]]);  // the longest first
  return l;
}

// Every CTA's pieces (walkers 0..Z-1, then one CTA a position), as the kernel's threads 0 find them.
std::vector<Piece> all_pieces(const Layout& l, int parts) {
  std::vector<Piece> out;
  for (int x = 0; x < parts + l.plan.batch; ++x) {
    BalancedPiece pieces[2];
    mla::balanced_pieces(l.plan, x, pieces);
    if (pieces[0].b < 0) CHECK(pieces[1].b < 0);  // a second piece only after a first
    for (const BalancedPiece& p : pieces)
      if (p.b >= 0) out.push_back({p, x});
  }
  return out;
}

// Returns whether the plan walked.
bool check_plan(const std::vector<int>& tiles, int parts) {
  const Layout l = lay_out(tiles, parts);
  const int* const prefix = l.prefix;
  const std::vector<Piece> pieces = all_pieces(l, parts);
  const int batch = static_cast<int>(tiles.size());
  if (!l.plan.walks()) {  // a CTA a request, each whole, the longest first
    CHECK(static_cast<int>(pieces.size()) == batch);
    std::set<int> seen;
    for (const Piece& pc : pieces) {
      CHECK(pc.cta < batch);
      CHECK(pc.p.b == l.order[pc.cta]);
      CHECK(seen.insert(pc.p.b).second);
      CHECK(pc.p.first_tile == 0);
      CHECK(pc.p.num_tiles == tiles[pc.p.b]);
      CHECK(pc.p.splits == 1);
    }
    return false;
  }
  std::vector<int> position(batch);
  for (int r = 0; r < batch; ++r) position[l.order[r]] = r;
  const long long total = prefix[batch];
  // The walked requests are a share T / Z or more, the rest shorter (m79).
  const int s = l.plan.num_long, zw = l.plan.walkers();
  const long long walked = prefix[s];
  const long long max_walkers = std::min<long long>(parts, total);
  for (int r = 0; r < batch; ++r) CHECK((tiles[l.order[r]] * max_walkers >= total) == (r < s));
  REQUIRE(zw >= 1);
  CHECK(zw <= max_walkers);
  CHECK(zw <= walked);
  std::vector<std::vector<Piece>> by_request(batch);
  std::map<int, long long> walker_tiles;
  std::set<int> slots;
  for (const Piece& pc : pieces) {
    const BalancedPiece& p = pc.p;
    REQUIRE(p.b < batch);
    CHECK(p.first_tile >= 0);
    CHECK(p.num_tiles >= 0);
    CHECK(p.first_tile + p.num_tiles <= tiles[p.b]);
    by_request[p.b].push_back(pc);
    const int r = position[p.b];
    if (pc.cta < zw) {
      CHECK(r < s);
      CHECK(p.num_tiles > 0);
      walker_tiles[pc.cta] += p.num_tiles;
    } else {
      // A request's own CTA runs it whole, the first CTAs after the walkers in the layout's order.
      REQUIRE(pc.cta - zw < l.plan.num_wholes);
      CHECK(l.wholes[pc.cta - zw] == r);
      if (pc.cta > zw) CHECK(l.wholes[pc.cta - zw - 1] < r);
      CHECK(p.splits == 1);
      CHECK(p.num_tiles == tiles[p.b]);
      if (r < s) {  // a walked request inside one walker's range: counts toward that range
        long long z = 0;
        while (z + 1 < zw && (z + 1) * walked / zw <= prefix[r]) ++z;
        CHECK((z + 1) * walked / zw >= prefix[r + 1]);
        walker_tiles[static_cast<int>(z)] += p.num_tiles;
      }
    }
    if (p.splits > 1) {
      CHECK(slots.insert(p.first_slot + p.index).second);  // no two pieces share a slot
      CHECK(p.first_slot + p.index < 2 * parts);            // the workspace's 2 Z a row block
    }
  }
  // Each range is 1 / Z' of the walked tiles, rounded either way, run by its walker or, for the
  // requests inside it, by their own CTAs; a walker runs two pieces at most.
  CHECK(static_cast<long long>(walker_tiles.size()) == zw);
  for (const auto& [z, n] : walker_tiles) {
    CHECK(z < zw);
    CHECK(n >= walked / zw);
    CHECK(n <= (walked + zw - 1) / zw);
  }
  for (int b = 0; b < batch; ++b) {
    std::vector<Piece>& ps = by_request[b];
    INFO("request " << b << " of " << batch << ", " << tiles[b] << " tiles, " << parts << " walkers");
    REQUIRE(!ps.empty());  // even an empty request writes its (zero) rows
    const int splits = ps.front().p.splits;
    CHECK(static_cast<int>(ps.size()) == splits);
    std::sort(ps.begin(), ps.end(), [](const Piece& a, const Piece& c) { return a.p.index < c.p.index; });
    int next = 0;
    for (int i = 0; i < splits; ++i) {
      CHECK(ps[i].p.splits == splits);
      CHECK(ps[i].p.index == i);
      CHECK(ps[i].p.first_slot == ps.front().p.first_slot);
      CHECK(ps[i].p.first_tile == next);  // pieces in order, end to end
      next += ps[i].p.num_tiles;
    }
    CHECK(next == tiles[b]);
  }
  return true;
}

}  // namespace

TEST_CASE("the MLA balanced plan covers every tile once, a walker's share each", "[mla][plan]") {
  std::mt19937 rng(20261129);
  CHECK(check_plan({128, 128, 128}, 66));  // fewer requests than walkers: many pieces each
  CHECK_FALSE(check_plan(std::vector<int>(64, 128), 66));  // even lengths, a walker's share 125: a CTA a request
  CHECK(check_plan(std::vector<int>(50, 128), 66));         // 100 CTAs on 132 SMs: walk (share 97)
  CHECK_FALSE(check_plan({3, 90, 7, 90, 120, 1, 64}, 3));    // 3 walkers, share 125: the longest first
  std::vector<int> one_long(40, 100);
  one_long[7] = 2000;
  CHECK(check_plan(one_long, 66));
  CHECK_FALSE(check_plan({0, 0, 0}, 66));  // nothing to do: every request's CTA writes zeros
  check_plan({0, 5, 0, 0, 1}, 66);
  check_plan({1}, 1);
  int walked = 0;
  for (int round = 0; round < 300; ++round) {
    const int batch = 1 + static_cast<int>(rng() % 512);
    const int parts = 1 + static_cast<int>(rng() % 140);
    const int spread = std::uniform_int_distribution<int>(0, 3)(rng);
    std::vector<int> tiles(batch);
    for (int& t : tiles) {
      const int r = static_cast<int>(rng() % 1000);
      t = spread == 0 ? 128 : spread == 1 ? r % 3 : spread == 2 ? r : (r < 50 ? 2000 + r : r % 40);
      if (rng() % 8 == 0) t = 0;
    }
    INFO("round " << round << ": " << batch << " requests, " << parts << " walkers, spread " << spread);
    walked += check_plan(tiles, parts) ? 1 : 0;
  }
  CHECK(walked > 60);  // both modes, many times each
  CHECK(walked < 240);
}

namespace {

MlaDecodeParams dense(int heads, int q_len, int batch) {
  MlaDecodeParams p;
  xqajit::test::fake_paged_call(p, batch, 64, 128, 10000);
  p.kv_cache = xqajit::test::fake<void>(0x30000);
  p.num_heads = heads;
  p.q_len = q_len;
  p.sm_scale = 0.0721687836f;
  return p;
}

}  // namespace

TEST_CASE("mla_decode plans the balanced grid where one split a request would leave SMs idle", "[mla][plan]") {
  const DeviceInfo dev = xqajit::test::h100();  // 132 SMs
  // H=128, B=64: 128 CTAs on 132 SMs -> 66 walkers a row block.
  MlaDecodePlan plan = mla_decode_plan(dense(128, 1, 64), dev);
  CHECK(plan.balanced_parts == 66);
  CHECK(plan.grid[0] == 2);  // a walker's row blocks side by side
  CHECK(plan.grid[1] == 66 + 64);
  CHECK(plan.grid[2] == 1);
  CHECK(plan.num_splits == 1);
  CHECK(plan.workspace_bytes == split_counter_bytes(128) + std::size_t{2} * (2 * 66) * 64 * 514 * 4);
  CHECK(mla_decode_workspace_size(dense(128, 1, 64), dev) == plan.workspace_bytes);
  CHECK(mla_decode_plan(dense(128, 1, 34), dev).balanced_parts == 66);
  // q_len 4 (eight row blocks): 16 walkers a row block up to 16 requests.
  CHECK(mla_decode_plan(dense(128, 4, 16), dev).balanced_parts == 16);
  // Past one wave (B=128, or q_len 4 B=40: 256 and 320 CTAs) too: a CTA a request, the longest
  // first, unless a few long requests make it walk; the workspace stays 2 Z slots a row block.
  const MlaDecodePlan b128 = mla_decode_plan(dense(128, 1, 128), dev);
  CHECK(b128.balanced_parts == 66);
  CHECK(b128.grid[1] == 66 + 128);
  CHECK(b128.workspace_bytes == split_counter_bytes(256) + std::size_t{2} * (2 * 66) * 64 * 514 * 4);
  CHECK(mla_decode_plan(dense(128, 4, 40), dev).balanced_parts == 16);
  CHECK(mla_decode_plan(dense(128, 1, kXqajitMlaBalancedMaxBatch), dev).balanced_parts == 66);
  // Past one wave only where a request may be long (64 tiles or more): B=200 over 32-page
  // tables (2048 keys, 32 tiles) keeps the one-split grid; within one wave (B=40) it walks.
  MlaDecodeParams short_table = dense(128, 1, 200);
  short_table.max_pages_per_seq = 32;
  CHECK(mla_decode_plan(short_table, dev).balanced_parts == 0);
  short_table.max_pages_per_seq = 64;  // 64 tiles
  CHECK(mla_decode_plan(short_table, dev).balanced_parts == 66);
  short_table.batch = 40;
  short_table.max_pages_per_seq = 32;
  CHECK(mla_decode_plan(short_table, dev).balanced_parts == 66);
  // Past kXqajitMlaBalancedMaxBatch (the plan's ranks in every CTA), the one-split grid.
  CHECK(mla_decode_plan(dense(128, 1, kXqajitMlaBalancedMaxBatch + 1), dev).balanced_parts == 0);
  // Not planned: splits the caller set, an fp8 cache (not the seesaw), one row block (H=64), the
  // portable backend.
  MlaDecodeParams set = dense(128, 1, 64);
  set.num_splits = 1;
  CHECK(mla_decode_plan(set, dev).balanced_parts == 0);
  CHECK(mla_decode_plan(set, dev).workspace_bytes == 0);
  MlaDecodeParams fp8 = dense(128, 1, 64);
  fp8.input = fp8.kv = DType::fp8;
  CHECK(mla_decode_plan(fp8, dev).balanced_parts == 0);
  CHECK(mla_decode_plan(dense(64, 1, 200), dev).balanced_parts == 0);
  MlaDecodeParams portable = dense(128, 1, 64);
  portable.backend = Backend::portable;
  CHECK(mla_decode_plan(portable, dev).balanced_parts == 0);
}

namespace {

// share_plan_serial's plan of `tiles` over `parts` CTAs, checked: every request gets
// share_pieces(t, s) >= 1 pieces in consecutive CTAs, within the parts; its pieces cover its
// tiles once, none longer than s; and s is the least share that fits. Returns s.
int check_shares(const std::vector<int>& tiles, int parts) {
  const int batch = static_cast<int>(tiles.size());
  std::vector<int> first(tiles.size()), pieces(tiles.size());
  const int share = mla::share_plan_serial(tiles.data(), batch, parts, first.data(), pieces.data());
  int total = 0, used = 0;
  for (int b = 0; b < batch; ++b) {
    total += tiles[b];
    CHECK(first[b] == used);
    CHECK(pieces[b] == mla::share_pieces(tiles[b], share));
    CHECK(pieces[b] >= 1);
    int next = 0;
    for (int i = 0; i < pieces[b]; ++i) {
      const int t0 = mla::share_first_tile(tiles[b], pieces[b], i), t1 = mla::share_first_tile(tiles[b], pieces[b], i + 1);
      CHECK(t0 == next);
      CHECK(t1 - t0 <= share);
      next = t1;
    }
    CHECK(next == tiles[b]);
    used += pieces[b];
  }
  CHECK(used <= parts);
  const auto fits = [&](int s) {
    int n = 0;
    for (int t : tiles) n += mla::share_pieces(t, s);
    return n <= parts;
  };
  CHECK(share >= 1);
  CHECK((share == std::max(1, (total + parts - 1) / parts) || !fits(share - 1)));
  return share;
}

}  // namespace

TEST_CASE("a small batch's shares cover every tile once within the grid, the least share that fits",
          "[mla][plan]") {
  CHECK(check_shares(std::vector<int>(8, 128), 66) == 16);  // even: the launcher's 8 splits of 16 tiles
  CHECK(check_shares(std::vector<int>(20, 128), 66) == 43);  // 3 pieces each (43, 43, 42)
  CHECK(check_shares({512, 10, 300, 0, 77}, 66) == 15);      // ragged: 35 + 1 + 20 + 1 + 6 = 63 CTAs
  CHECK(check_shares({0, 0, 0}, 66) == 1);                   // a CTA each writes zeros
  check_shares({1}, 1);
  std::mt19937 rng(20261130);
  for (int round = 0; round < 500; ++round) {
    const int batch = 1 + static_cast<int>(rng() % kXqajitMlaSharesMaxBatch);
    const int parts = batch + static_cast<int>(rng() % 140);
    std::vector<int> tiles(batch);
    const int spread = static_cast<int>(rng() % 3);
    for (int& t : tiles) {
      t = spread == 0 ? 128 : static_cast<int>(rng() % (spread == 1 ? 600 : 5));
      if (rng() % 8 == 0) t = 0;
    }
    INFO("round " << round << ": " << batch << " requests, " << parts << " CTAs, spread " << spread);
    check_shares(tiles, parts);
  }
}

TEST_CASE("mla_decode plans a small batch's shares where the launcher cuts every request into seesaw splits",
          "[mla][plan]") {
  const DeviceInfo dev = xqajit::test::h100();  // 132 SMs
  // H=128 B=8 over 128-tile tables: the launcher's 8 splits of 16 tiles -> 66 CTAs a row block,
  // merged by a launch of a CTA a row, its block sized for 8 splits.
  const MlaDecodePlan plan = mla_decode_plan(dense(128, 1, 8), dev);
  CHECK(plan.balanced_parts == 66);
  CHECK(plan.merge_launch);
  CHECK(plan.num_splits == 8);
  CHECK(plan.grid[0] == 2);
  CHECK(plan.grid[1] == 66);
  CHECK(plan.grid[2] == 1);
  CHECK(plan.merge_grid[0] == 64);
  CHECK(plan.merge_grid[1] == 2);
  CHECK(plan.merge_grid[2] == 8);
  CHECK(plan.merge_threads == xqajit_mla_merge_threads(8));
  CHECK(plan.merge_rows == 1);
  CHECK(plan.workspace_bytes == split_counter_bytes(16) + std::size_t{2} * (2 * 66) * 64 * 514 * 4);
  CHECK(mla_decode_workspace_size(dense(128, 1, 8), dev) == plan.workspace_bytes);
  // q_len 2 (four row blocks): 33 CTAs a row block.
  CHECK(mla_decode_plan(dense(128, 2, 6), dev).balanced_parts == 33);
  // One long request: a request's pieces stay within the merge's 64 (Z - B + 1).
  MlaDecodeParams lone = dense(128, 1, 1);
  lone.max_pages_per_seq = 1024;  // 65536 keys: 64 splits of 16 tiles
  CHECK(mla_decode_plan(lone, dev).balanced_parts == 64);
  // Two splits too (B=32, which the split grid merged in a cluster): 2 pieces a request where
  // the lengths are even.
  const MlaDecodePlan b32 = mla_decode_plan(dense(128, 1, 32), dev);
  CHECK(b32.balanced_parts == 66);
  CHECK(b32.num_splits == 2);
  CHECK(b32.split_cluster == 1);
  CHECK(b32.merge_launch);
  // Its merge: 16 rows a CTA (xqajit_mla_merge_rows, m92): 4 x 2 x 32 CTAs, not 64 x 2 x 32.
  CHECK(b32.merge_rows == kXqajitMlaMergeRows);
  CHECK(b32.merge_grid[0] == 4);
  CHECK(b32.merge_grid[1] == 2);
  CHECK(b32.merge_grid[2] == 32);
  CHECK(b32.merge_threads == static_cast<unsigned>(kXqajitMlaMergeRowsThreads));
  // Not: splits of 8 tiles or fewer (the per-tile schedule: B=4 L=8192's 16), past
  // kXqajitMlaSharesMaxBatch, splits the caller set.
  CHECK(mla_decode_plan(dense(128, 1, 4), dev).balanced_parts == 0);
  // Past the shares' warp (32 requests), two splits walk as one split does (B=33).
  const MlaDecodePlan b33 = mla_decode_plan(dense(128, 1, 33), dev);
  const MlaDecodePlan b34 = mla_decode_plan(dense(128, 1, 34), dev);
  CHECK(b33.balanced_parts == 66);
  CHECK_FALSE(b33.merge_launch);
  CHECK(b33.num_splits == 1);
  CHECK(b33.split_cluster == 1);
  CHECK(b33.grid[1] == 66 + 33);
  CHECK(b33.workspace_bytes == split_counter_bytes(66) + std::size_t{2} * (2 * 66) * 64 * 514 * 4);
  CHECK(b34.split_tokens == b33.split_tokens);
  MlaDecodeParams set = dense(128, 1, 8);
  set.num_splits = 8;
  CHECK(mla_decode_plan(set, dev).balanced_parts == 0);
}
