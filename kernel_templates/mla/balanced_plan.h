#pragma once
// The MLA balanced plan (m77; hopper: the seesaw specs' batches of one wave), a tile scheduler
// as FlashMLA's write-up describes one, computed by every CTA from seq_lens (so a graph replay
// with new lengths stays balanced). The code is ours.
//
// Lay the batch's tiles end to end, request after request: T tiles in all, request b's at
// [P_b, P_b + T_b). The grid is (row blocks, Z + B). Walker z < Z takes the tiles
// [start(z), start(z + 1)), start(z) = floor(z T / Z), so every walker does the same work
// (a row block's CTAs of one wave: Z = the SMs a row block gets). A walker's range meets
// requests as pieces; it runs two at most, the request its range starts in and the one it
// ends in, straight through (a loop around the seesaw spills, m69/m77 probes). A request
// that neither starts nor ends a range (wholly inside one, between its first and last) is
// run whole by CTA Z + b instead, after the walkers; so is an empty one, which writes zeros.
//
// Where the batch's lengths are even enough that a CTA a request wastes little (BalancedPlan::
// walks), CTA b < B runs request b whole instead and the rest leave: the one-split grid's work.
//
// A request cut into pieces merges them: piece i of request b, in walker z0(b) + i, stores
// its partial rows in slot z0(b) + b + i of the row block's Z + B (a request's pieces sit
// in adjacent slots, and slots of different requests never meet), and the last piece to
// arrive folds them into its own (mla/hopper_epilogue.cuh, the request's counter).

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
  int first_slot;  // the slot of the request's first piece (of the row block's Z + B)
};

// The plan every CTA computes alike: P_b in shared memory (`prefix`, B + 1 ints) and the
// ranges' bounds.
struct BalancedPlan {
  const int* prefix;  // [B + 1]: P_b, P_B = T
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
  // The request that holds tile t (t < T): the largest b with P_b <= t (empty requests before
  // it share its P_b).
  XQAJIT_MLA_BALANCED_FN int request_of(int t) const {
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (prefix[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
  // Request b's tiles [t0, t1) (global, t0 < t1), run by walker z.
  XQAJIT_MLA_BALANCED_FN BalancedPiece piece(int b, int t0, int t1, int z) const {
    const int p = prefix[b], z0 = walker_of(p);
    return BalancedPiece{b, t0 - p, t1 - t0, walker_of(prefix[b + 1] - 1) - z0 + 1, z - z0, z0 + b};
  }
  // Request b whole, in a CTA of its own.
  XQAJIT_MLA_BALANCED_FN BalancedPiece whole(int b) const {
    return BalancedPiece{b, 0, prefix[b + 1] - prefix[b], 1, 0, 0};
  }
  // A request no range starts or ends in: its own CTA runs it (an empty one too).
  XQAJIT_MLA_BALANCED_FN bool runs_whole(int b) const {
    const int p = prefix[b], e = prefix[b + 1];
    if (p == e) return true;
    const int z0 = walker_of(p);
    return walker_of(e - 1) == z0 && start(z0) != p && start(z0 + 1) != e;
  }
};

// The pieces of CTA x (walker x < Z, else request x - Z's own CTA), in the order it runs them.
XQAJIT_MLA_BALANCED_FN void balanced_pieces(const BalancedPlan& plan, int x, BalancedPiece (&pieces)[2]) {
  pieces[0].b = pieces[1].b = -1;
  if (!plan.walks()) {  // a CTA a request: CTA b runs request b whole, as the one-split grid would
    if (x < plan.batch) pieces[0] = plan.whole(x);
    return;
  }
  if (x >= plan.parts) {
    const int b = x - plan.parts;
    if (plan.runs_whole(b)) pieces[0] = plan.whole(b);
    return;
  }
  if (x >= plan.walkers()) return;
  const int s = plan.start(x), e = plan.start(x + 1);
  const int first = plan.request_of(s), last = plan.request_of(e - 1);
  const int first_end = plan.prefix[first + 1] < e ? plan.prefix[first + 1] : e;
  pieces[0] = plan.piece(first, s, first_end, x);
  if (last != first) pieces[1] = plan.piece(last, plan.prefix[last], e, x);
}

}  // namespace mla
}  // namespace xqajit
