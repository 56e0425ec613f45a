// xqajit_plan_model: the MLA balanced plan (kernel_templates/mla/balanced_plan.h, the code every
// CTA of a hopper seesaw launch runs) on a batch's lengths, and a model of its launch, so that a
// change to the plan can be predicted before a GPU measures it (docs/MLA_HOPPER_NOTES.md,
// session 42). No GPU needed.
//
// The model: one CTA an SM, a row block's Z = SMs / row blocks of them at a time (every row
// block alike); the hardware hands each CTA, in grid order, to the SM that frees first. A CTA
// costs its pieces' tiles, a fixed cost a piece (--fixed: Q, the first tiles, the epilogue)
// and a merge a cut piece (--merge: its partial rows, the fold); a CTA with nothing to run
// costs --leave (the plan it computes). All in tiles (~1.56 us at H=128 on an H200); --fixed 12
// fits session 42's runs within 10 % (docs/MLA_HOPPER_NOTES.md).
//
//   xqajit_plan_model [--sms 132] [--row-blocks 2] [--tile 64] [--fixed 12] [--merge 3]
//                     [--leave 1] [--ragged] --shapes "B L|B L|..."
//
// --ragged draws each request's length uniform on [1, L] as `bench_mla --ragged` does
// (bench/ragged_lengths.hpp), else every request has L keys. Prints, per shape, the plan's
// mode, its walkers and the requests run whole, and the model's end of the plan's grid, of the
// one-split grid (a CTA a request, in the requests' order) and of a perfect split (T / Z); for
// batches of kXqajitMlaSharesMaxBatch or fewer, the end of their shares (m84: a piece a CTA, in
// one wave, each cut request merged by the merge launch at --merge) and the share s in tiles.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <queue>
#include <sstream>
#include <string>
#include <vector>

#include "bench/ragged_lengths.hpp"
#include "mla/balanced_plan.h"
#include "mla/hopper_geometry.h"

namespace {

struct Costs {
  double fixed = 12, merge = 3, leave = 1;
};

// The end of a grid whose CTAs cost `ctas` (grid order) on `slots` SMs that each take the next
// CTA as they free.
double list_schedule(const std::vector<double>& ctas, int slots) {
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int i = 0; i < slots; ++i) free_at.push(0.0);
  double end = 0.0;
  for (double c : ctas) {
    const double t = free_at.top() + c;
    free_at.pop();
    free_at.push(t);
    end = std::max(end, t);
  }
  return end;
}

const char* option(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return argv[i + 1];
  return nullptr;
}

double number(int argc, char** argv, const char* name, double fallback) {
  const char* v = option(argc, argv, name);
  if (!v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end != '\0' || x < 0) {
    std::fprintf(stderr, "xqajit_plan_model: %s: '%s' is not a number >= 0\n", name, v);
    std::exit(2);
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  const char* shapes = option(argc, argv, "--shapes");
  if (!shapes) {
    std::fprintf(stderr,
                 "usage: xqajit_plan_model [--sms 132] [--row-blocks 2] [--tile 64] [--fixed 12] [--merge 3] "
                 "[--leave 1] [--ragged] --shapes \"B L|B L|...\"\n");
    return 2;
  }
  bool ragged = false;
  for (int i = 1; i < argc; ++i) ragged = ragged || std::string(argv[i]) == "--ragged";
  const int sms = static_cast<int>(number(argc, argv, "--sms", 132));
  const int row_blocks = static_cast<int>(number(argc, argv, "--row-blocks", 2));
  const int tile = static_cast<int>(number(argc, argv, "--tile", 64));
  if (sms < 1 || row_blocks < 1 || tile < 1) {
    std::fprintf(stderr, "xqajit_plan_model: --sms, --row-blocks and --tile must be at least 1\n");
    return 2;
  }
  Costs cost;
  cost.fixed = number(argc, argv, "--fixed", cost.fixed);
  cost.merge = number(argc, argv, "--merge", cost.merge);
  cost.leave = number(argc, argv, "--leave", cost.leave);
  const int parts = std::max(1, sms / row_blocks);

  std::printf("%-14s %-6s %8s %7s %7s %9s %9s %9s %7s %9s %6s\n", "shape (B L)", "mode", "walkers", "wholes", "ctas",
              "plan", "one split", "T / Z", "plan/TZ", "shares", "s");
  std::stringstream list(shapes);
  std::string item;
  while (std::getline(list, item, '|')) {
    int batch = 0, len = 0;
    if (std::sscanf(item.c_str(), "%d %d", &batch, &len) != 2 || batch < 1 || len < 1) {
      std::fprintf(stderr, "xqajit_plan_model: shape '%s': expected \"B L\", both at least 1\n", item.c_str());
      return 2;
    }
    const std::vector<std::int32_t> lengths =
        ragged ? xqajit::testing::ragged_lengths(batch, len) : std::vector<std::int32_t>(batch, len);
    std::vector<int> tiles(batch);
    for (int b = 0; b < batch; ++b) tiles[b] = (lengths[b] + tile - 1) / tile;
    std::vector<int> space(4 * static_cast<std::size_t>(batch) + 1);
    const xqajit::mla::BalancedPlan plan =
        xqajit::mla::balanced_plan_serial(tiles.data(), batch, parts, space.data());

    std::vector<double> planned, one_split;
    int busy = 0;
    for (int x = 0; x < parts + batch; ++x) {
      xqajit::mla::BalancedPiece pieces[2];
      xqajit::mla::balanced_pieces(plan, x, pieces);
      double c = 0.0;
      for (const xqajit::mla::BalancedPiece& p : pieces)
        if (p.b >= 0) c += cost.fixed + p.num_tiles + (p.splits > 1 ? cost.merge : 0.0);
      busy += c > 0.0 ? 1 : 0;
      planned.push_back(c > 0.0 ? c : cost.leave);
    }
    for (int t : tiles) one_split.push_back(cost.fixed + t);
    const double ideal = static_cast<double>(plan.total()) / parts;
    const double plan_end = list_schedule(planned, parts);
    const std::string key = std::to_string(batch) + " " + std::to_string(len) + (ragged ? "r" : "");
    std::printf("%-14s %-6s %8d %7d %7d %9.1f %9.1f %9.1f %7.2f", key.c_str(), plan.walks() ? "walk" : "lpt",
                plan.walks() ? plan.walkers() : 0, plan.walks() ? plan.num_wholes : batch, busy, plan_end,
                list_schedule(one_split, parts), ideal, ideal > 0 ? plan_end / ideal : 0.0);
    if (batch <= kXqajitMlaSharesMaxBatch && batch <= parts) {
      std::vector<int> first(batch), pieces(batch);
      const int share = xqajit::mla::share_plan_serial(tiles.data(), batch, parts, first.data(), pieces.data());
      double end = 0.0;
      for (int b = 0; b < batch; ++b)
        end = std::max(end, cost.fixed + (tiles[b] + pieces[b] - 1) / pieces[b] + (pieces[b] > 1 ? cost.merge : 0.0));
      std::printf(" %9.1f %6d", end, share);
    }
    std::printf("\n");
  }
  return 0;
}
