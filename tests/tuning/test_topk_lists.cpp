// The scratch index lists of sparse MLA timings (src/tuning/topk_lists.hpp): distinct keys of
// the token's own request, mapped through its slot function, -1 where skip() says so.
#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "tuning/topk_lists.hpp"

using namespace xqajit;

TEST_CASE("topk index lists name distinct keys of each request, through its slots", "[tuning]") {
  constexpr int kBatch = 3, kQLen = 2, kTopk = 50, kKeys = 64;
  std::mt19937 rng(7);
  const auto slot = [](int b, int key) { return 1000 * b + key; };  // a request's keys apart
  const std::vector<std::int32_t> lists =
      topk_index_lists(kBatch, kQLen, kTopk, kKeys, rng, slot, [] { return false; });
  REQUIRE(lists.size() == std::size_t(kBatch) * kQLen * kTopk);
  for (int b = 0; b < kBatch; ++b)
    for (int t = 0; t < kQLen; ++t) {
      std::set<std::int32_t> seen;
      for (int k = 0; k < kTopk; ++k) {
        const std::int32_t e = lists[(std::size_t(b) * kQLen + t) * kTopk + k];
        CHECK(e / 1000 == b);
        CHECK(e % 1000 < kKeys);
        seen.insert(e);
      }
      CHECK(seen.size() == std::size_t(kTopk));
    }

  // topk == keys: every key once; skip() marks entries -1, called once an entry.
  int calls = 0;
  const std::vector<std::int32_t> skipped =
      topk_index_lists(1, 1, kKeys, kKeys, rng, slot, [&] { return ++calls % 4 == 0; });
  CHECK(calls == kKeys);
  std::set<std::int32_t> kept;
  int minus = 0;
  for (std::int32_t e : skipped) {
    if (e < 0)
      ++minus;
    else
      kept.insert(e);
  }
  CHECK(minus == kKeys / 4);
  CHECK(kept.size() == std::size_t(kKeys - kKeys / 4));
}
