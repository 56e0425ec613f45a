#pragma once
// The MLA balanced plan (m77-m79; hopper: the seesaw specs' batches up to
// kXqajitMlaBalancedMaxBatch), a tile scheduler as FlashMLA's write-up describes one, computed
// by every CTA from seq_lens (so a graph replay with new lengths stays balanced). The code is
// ours.
//
// Lay the batch's tiles end to end, the longest request first (m78; ties by index, so every
// CTA lays them alike): T tiles in all, the request at position r of that order (order[r])
// at [P_r, P_r + T_r). The grid is (row blocks, Z + B), Z = the SMs a row block gets.
//
// Where the lengths are uneven, or SMs would idle (BalancedPlan::walks), the requests of a
// walker's share T / Z or more, positions [0, s), are walked: walker z < Z' takes their tiles
// [start(z), start(z + 1)), start(z) = floor(z W / Z'), W = P_s, so every walker does the same
// work. A walker's range meets requests as pieces; it runs two at most, the request its range
// starts in and the one it ends in, straight through (a loop around the seesaw spills,
// m69/m77 probes). The shorter requests (and empty ones, which write zeros) run whole, a CTA
// each, the longest first, on the Z - Z' SMs the walkers leave them (m79: Z' is chosen so that
// both sides end together); so does a walked request that neither starts nor ends a range.
// They take CTAs Z', Z' + 1, ... (`wholes`), so the CTAs that find nothing to run are the
// grid's last: a run of them ahead of a request's CTA held the few SMs that free early, each
// for a plan's time (m78, run 1).
//
// Where the lengths are even enough that a CTA a request wastes little, CTA r < B runs the
// request at position r whole instead and the rest leave: the one-split grid's work, the
// longest requests launched first, so that a batch of more CTAs than SMs ends together
// (longest-processing-time-first list scheduling: an SM that finishes early takes the next
// longest, m78).
//
// A request cut into pieces merges them: piece i of the request at position r, in walker
// z0(r) + i, stores its partial rows in slot z0(r) + c(r) + i of the row block's 2 Z, c(r)
// the cut requests before it (a request's pieces sit in adjacent slots, and slots of
// different requests never meet: the next cut one starts at or after z0(r) + its pieces - 1,
// and c counts one more; a cut request holds one of the Z' - 1 ranges' starts, so c < Z'), and
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
  int num_long = 0;     // where it walks, s: positions [0, s) are walked (choose_walkers)
  int num_walkers = 0;  // Z' <= Z walkers over them

  // Whether to walk (m77d): a walker's share, with the cut requests' partial rows and merges
  // (~1/8 of it, session 41 runs 6-9), against the longest request, which bounds a CTA a
  // request. Equal lengths run a CTA a request, a ragged batch or idle SMs walk.
  XQAJIT_MLA_BALANCED_FN bool walks() const {
    const int w = max_walkers();
    return w > 0 && 8ll * longest > 9ll * ((total() + w - 1) / w);
  }

  XQAJIT_MLA_BALANCED_FN int total() const { return prefix[batch]; }
  // Z, or one a tile where the batch has fewer (so that every walker's range holds a tile, and
  // a request's pieces sit in consecutive walkers).
  XQAJIT_MLA_BALANCED_FN int max_walkers() const { return parts < total() ? parts : total(); }

  // The walkers take only the requests of a share T / Z or more (m79); the shorter ones, the
  // layout's tail, run whole from the start on the SMs the walkers leave them (Z - Z'), where
  // m78 ran them after the walkers: Z' = Z x the long requests' tiles / (T + the short ones'
  // CTAs at kShortCtaTiles each), so both sides end together. A request of a share or more is
  // never wholly inside a walker's range of about a share, so walkers keep two pieces at most.
  static constexpr int kShortCtaTiles = 8;  // a CTA's prologue and epilogue, in tiles (~13 us)
  XQAJIT_MLA_BALANCED_FN void choose_walkers() {
    const long long w = max_walkers(), t = total();
    int lo = 0, hi = batch;  // the first position shorter than T / Z (the layout is longest first)
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if ((long long)(prefix[mid + 1] - prefix[mid]) * w >= t) lo = mid + 1;
      else hi = mid;
    }
    num_long = lo;
    const long long walked_tiles = prefix[lo], share = t + (long long)kShortCtaTiles * (batch - lo);
    long long z = share > 0 ? (2 * w * walked_tiles + share) / (2 * share) : 0;  // rounded
    z = z < w ? z : w;
    z = z < walked_tiles ? z : walked_tiles;
    num_walkers = (int)(z > 1 ? z : 1);
  }

  // The tiles the walkers share: the long requests', laid end to end from 0.
  XQAJIT_MLA_BALANCED_FN int walked() const { return prefix[num_long]; }
  XQAJIT_MLA_BALANCED_FN int walkers() const { return num_walkers; }
  // The first tile of walker z's range (start(walkers()) = walked()).
  XQAJIT_MLA_BALANCED_FN int start(int z) const { return (int)((long long)z * walked() / walkers()); }
  // The walker whose range holds tile t (t < walked()): the largest z with start(z) <= t.
  XQAJIT_MLA_BALANCED_FN int walker_of(int t) const {
    return (int)(((long long)(t + 1) * walkers() - 1) / walked());
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
    return r < num_long && p < e && walker_of(p) != walker_of(e - 1);
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
  // A short request, or one no range starts or ends in: its own CTA runs it (an empty one too).
  XQAJIT_MLA_BALANCED_FN bool runs_whole(int r) const {
    const int p = prefix[r], e = prefix[r + 1];
    if (r >= num_long || p == e) return true;
    const int z0 = walker_of(p);
    return walker_of(e - 1) == z0 && start(z0) != p && start(z0 + 1) != e;
  }
};

// The pieces of CTA x (walker x < Z', else the (x - Z')-th request that runs whole), in the
// order it runs them.
XQAJIT_MLA_BALANCED_FN void balanced_pieces(const BalancedPlan& plan, int x, BalancedPiece (&pieces)[2]) {
  pieces[0].b = pieces[1].b = -1;
  if (!plan.walks()) {  // a CTA a request, the longest first
    if (x < plan.batch) pieces[0] = plan.whole(x);
    return;
  }
  if (x >= plan.walkers()) {
    if (x - plan.walkers() < plan.num_wholes) pieces[0] = plan.whole(plan.wholes[x - plan.walkers()]);
    return;
  }
  const int s = plan.start(x), e = plan.start(x + 1);
  const int first = plan.position_of(s), last = plan.position_of(e - 1);
  const int first_end = plan.prefix[first + 1] < e ? plan.prefix[first + 1] : e;
  pieces[0] = plan.piece(first, s, first_end, x);
  if (last != first) pieces[1] = plan.piece(last, plan.prefix[last], e, x);
}

// Small batches (m84): where the launcher would cut every request into splits of the seesaw, the
// grid is (row blocks, Z) and request b gets k_b = share_pieces(t_b, s) pieces of at most s
// tiles, s the least share whose pieces fit the Z CTAs (least_share). A piece is a CTA; request
// b's are CTAs [x_b, x_b + k_b), x_b = k_0 + ... + k_(b-1), piece i its tiles
// [i t_b / k_b, (i + 1) t_b / k_b), stored in slot x_b + i, and a second launch merges them (a
// request of one piece stores its final rows). Even lengths get the launcher's splits (k = Z /
// B); on ragged ones the longest request no longer sets the time (B=20 L <= 32768: 3 splits of
// the longest 32768 keys against shares of the batch's mean).
XQAJIT_MLA_BALANCED_FN int share_pieces(int tiles, int share) {
  return tiles > share ? (tiles + share - 1) / share : 1;  // an empty request's CTA writes zeros
}

// The least share s >= 1 with pieces(s) = sum_b share_pieces(t_b, s) <= parts (B <= Z), between
// ceil(T / Z) and the smaller of the longest request (where pieces = B) and ceil(T / (Z - B))
// (where pieces <= T / s + B <= Z): a few steps of `pieces`, which sums over the batch.
template <class Pieces>
XQAJIT_MLA_BALANCED_FN int least_share(int total, int longest, int batch, int parts, Pieces&& pieces) {
  int lo = (total + parts - 1) / parts, hi = longest;
  if (parts > batch) {
    const int fits = (total + parts - batch - 1) / (parts - batch);
    hi = fits < hi ? fits : hi;
  }
  lo = lo > 1 ? lo : 1;
  while (lo < hi) {
    const int mid = lo + ((hi - lo) >> 1);
    if (pieces(mid) <= parts) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// The first tile of piece i of a request of `tiles` tiles cut into k (32-bit: the host plans
// shares only where kXqajitMlaSharesMaxTiles x 64 pieces fit in 32 bits).
XQAJIT_MLA_BALANCED_FN int share_first_tile(int tiles, int k, int i) {
  return (int)((unsigned)i * (unsigned)tiles / (unsigned)k);
}

#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
// The plan laid out by one thread (the host's tests and plan model; a CTA lays it out in
// parallel, mla/hopper_balanced.cuh's balanced_plan, to the same result): `space` holds
// 4 B + 1 ints (order, P_r, c(r), the positions run whole).
inline BalancedPlan balanced_plan_serial(const int* tiles, int batch, int parts, int* space) {
  int* const order = space;
  int* const prefix = order + batch;
  int* const cuts = prefix + batch + 1;
  int* const wholes = cuts + batch;
  int longest = 0;
  for (int b = 0; b < batch; ++b) {
    order[balanced_position(tiles, batch, b)] = b;
    longest = tiles[b] > longest ? tiles[b] : longest;
  }
  prefix[0] = 0;
  for (int r = 0; r < batch; ++r) prefix[r + 1] = prefix[r] + tiles[order[r]];
  BalancedPlan plan{prefix, order, cuts, wholes, 0, batch, parts, longest};
  if (plan.walks()) {
    plan.choose_walkers();
    for (int r = 0; r < batch; ++r) {
      cuts[r] = r == 0 ? 0 : cuts[r - 1] + (plan.cut(r - 1) ? 1 : 0);
      if (plan.runs_whole(r)) wholes[plan.num_wholes++] = r;
    }
  }
  return plan;
}

// The shares of a small batch (m84) by one thread: `first` and `pieces` (B ints each) get x_b
// and k_b; returns s.
inline int share_plan_serial(const int* tiles, int batch, int parts, int* first, int* pieces) {
  int total = 0, longest = 0;
  for (int b = 0; b < batch; ++b) {
    total += tiles[b];
    longest = tiles[b] > longest ? tiles[b] : longest;
  }
  const int share = least_share(total, longest, batch, parts, [&](int s) {
    int n = 0;
    for (int b = 0; b < batch; ++b) n += share_pieces(tiles[b], s);
    return n;
  });
  for (int b = 0, x = 0; b < batch; ++b) {
    first[b] = x;
    pieces[b] = share_pieces(tiles[b], share);
    x += pieces[b];
  }
  return share;
}
#endif

}  // namespace mla
}  // namespace xqajit
