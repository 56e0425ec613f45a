#pragma once
// The MLA balanced plan (m77; hopper: the seesaw specs' batches of one wave), a tile scheduler
// as FlashMLA's write-up describes one, computed by every CTA from seq_lens (so a graph replay
// with new lengths stays balanced). The code is ours.
//
// Lay the batch's tiles end to end, the longest request first (m78; ties by index, so every
// CTA lays them alike): T tiles in all, the request at position r of that order (order[r])
// at [P_r, P_r + T_r). The grid is (row blocks, Z + B). Walker z < Z takes the tiles
// [start(z), start(z + 1)), start(z) = floor(z T / Z), so every walker does the same work
// (a row block's CTAs of one wave: Z = the SMs a row block gets). A walker's range meets
// requests as pieces; it runs two at most, the request its range starts in and the one it
// ends in, straight through (a loop around the seesaw spills, m69/m77 probes). A request
// that neither starts nor ends a range (wholly inside one, between its first and last) is
// run whole by a CTA of its own instead, after the walkers; so is an empty one, which writes
// zeros. Those requests take CTAs Z, Z + 1, ... in the layout's order (`wholes`), so the CTAs
// that find nothing to run are the grid's last: a run of them ahead of a request's CTA held
// the few SMs that free early, each for a plan's time (m78, run 1).
//
// Where the batch's lengths are even enough that a CTA a request wastes little (BalancedPlan::
// walks), CTA r < B runs the request at position r whole instead and the rest leave: the
// one-split grid's work, the longest requests launched first, so that a batch of more CTAs
// than SMs ends together (longest-processing-time-first list scheduling: an SM that finishes
// early takes the next longest, m78).
//
// A request cut into pieces merges them: piece i of the request at position r, in walker
// z0(r) + i, stores its partial rows in slot z0(r) + c(r) + i of the row block's 2 Z, c(r)
// the cut requests before it (a request's pieces sit in adjacent slots, and slots of
// different requests never meet: the next cut one starts at or after z0(r) + its pieces - 1,
// and c counts one more; a cut request holds one of the Z - 1 ranges' starts, so c < Z), and
// the last piece to arrive folds them into its own (mla/hopper_epilogue.cuh, the request's
// counter).

// Plain C++ the host's tests run too (tests/ops/test_mla_balanced_plan.cpp).

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define XQAJIT_MLA_BALANCED_FN __host__ __device__ __forceinline__
#else
#define XQAJIT_MLA_BALANCED_FN inline
#endif

namespace xqajit {
namespace mla {

// One piece of a CTA's work: request b's tiles [first_tile, first_tile + num_tiles).
struct BalancedPiece {
  int b;           // -1: no piece
  int first_tile;  // of the request's tiles
  int num_tiles;
  int splits;      // the request's pieces (1: this is all of it, final rows)
  int index;       // this piece's among them
  int first_slot;  // the slot of the request's first piece (of the row block's 2 Z)
};

// Request b's position in the layout: the requests with more tiles, then those with as many
// and a lower index, come before it (O(B): a CTA's threads take a few requests each).
XQAJIT_MLA_BALANCED_FN int balanced_position(const int* tiles, int batch, int b) {
  const int t = tiles[b];
  int r = 0;
  for (int c = 0; c < batch; ++c) r += (tiles[c] > t || (tiles[c] == t && c < b)) ? 1 : 0;
  return r;
}

// The plan every CTA computes alike: the layout (`order`, B ints), P_r over it (`prefix`,
// B + 1 ints) and, where it walks, c(r) (`cuts`, B ints) and the positions its own CTAs run
// (`wholes`, B ints) in shared memory, and the ranges' bounds.
struct BalancedPlan {
  const int* prefix;  // [B + 1]: P_r, P_B = T
  const int* order;   // [B]: the request at position r
  const int* cuts;    // [B]: c(r), the cut requests before position r (where it walks)
  const int* wholes;  // [num_wholes]: the positions that run_whole (where it walks), in order
  int num_wholes;
  int batch, parts;   // B, Z
  int longest;        // the most tiles a request has

  // Whether to walk (m77d): a walker's share, with the cut requests' partial rows and merges
  // (~1/8 of it, session 41 runs 6-9), against the longest request, which bounds a CTA a
  // request (the one-split grid, B x row blocks within one wave). Equal lengths run a CTA a
  // request, a ragged batch or idle SMs walk.
  XQAJIT_MLA_BALANCED_FN bool walks() const {
    const int w = walkers();
    return w > 0 && 8ll * longest > 9ll * ((total() + w - 1) / w);
  }

  XQAJIT_MLA_BALANCED_FN int total() const { return prefix[batch]; }
  // The walkers with work: all Z, or one a tile where the batch has fewer (so that every
  // walker's range holds a tile, and a request's pieces sit in consecutive walkers).
  XQAJIT_MLA_BALANCED_FN int walkers() const { return parts < total() ? parts : total(); }
  // The first tile of walker z's range (start(walkers()) = T).
  XQAJIT_MLA_BALANCED_FN int start(int z) const { return (int)((long long)z * total() / walkers()); }
  // The walker whose range holds tile t (t < T): the largest z with start(z) <= t.
  XQAJIT_MLA_BALANCED_FN int walker_of(int t) const {
    return (int)(((long long)(t + 1) * walkers() - 1) / total());
  }
  // The position that holds tile t (t < T): the largest r with P_r <= t (empty requests before
  // it share its P_r).
  XQAJIT_MLA_BALANCED_FN int position_of(int t) const {
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (prefix[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
  // Whether the request at position r is cut: its tiles lie in two walkers' ranges or more.
  XQAJIT_MLA_BALANCED_FN bool cut(int r) const {
    const int p = prefix[r], e = prefix[r + 1];
    return p < e && walker_of(p) != walker_of(e - 1);
  }
  // The tiles [t0, t1) (global, t0 < t1) of the request at position r, run by walker z.
  XQAJIT_MLA_BALANCED_FN BalancedPiece piece(int r, int t0, int t1, int z) const {
    const int p = prefix[r], z0 = walker_of(p);
    return BalancedPiece{order[r], t0 - p, t1 - t0, walker_of(prefix[r + 1] - 1) - z0 + 1, z - z0, z0 + cuts[r]};
  }
  // The request at position r whole, in a CTA of its own.
  XQAJIT_MLA_BALANCED_FN BalancedPiece whole(int r) const {
    return BalancedPiece{order[r], 0, prefix[r + 1] - prefix[r], 1, 0, 0};
  }
  // A request no range starts or ends in: its own CTA runs it (an empty one too).
  XQAJIT_MLA_BALANCED_FN bool runs_whole(int r) const {
    const int p = prefix[r], e = prefix[r + 1];
    if (p == e) return true;
    const int z0 = walker_of(p);
    return walker_of(e - 1) == z0 && start(z0) != p && start(z0 + 1) != e;
  }
};

// The pieces of CTA x (walker x < Z, else the (x - Z)-th request that runs whole), in the order
// it runs them.
XQAJIT_MLA_BALANCED_FN void balanced_pieces(const BalancedPlan& plan, int x, BalancedPiece (&pieces)[2]) {
  pieces[0].b = pieces[1].b = -1;
  if (!plan.walks()) {  // a CTA a request, the longest first
    if (x < plan.batch) pieces[0] = plan.whole(x);
    return;
  }
  if (x >= plan.parts) {
    if (x - plan.parts < plan.num_wholes) pieces[0] = plan.whole(plan.wholes[x - plan.parts]);
    return;
  }
  if (x >= plan.walkers()) return;
  const int s = plan.start(x), e = plan.start(x + 1);
  const int first = plan.position_of(s), last = plan.position_of(e - 1);
  const int first_end = plan.prefix[first + 1] < e ? plan.prefix[first + 1] : e;
  pieces[0] = plan.piece(first, s, first_end, x);
  if (last != first) pieces[1] = plan.piece(last, plan.prefix[last], e, x);
}

}  // namespace mla
}  // namespace xqajit
