#pragma once
// Sparse MLA index lists as an indexer's top-k gives them, for the scratch problems that
// time sparse launches (xqajit tune's, bench_mla --sparse): uniform draws from the whole
// pool repeated a third of a B=1 list's slots, which real top-k lists never do.

#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

namespace xqajit {

/// int32 [batch, q_len, topk], contiguous: each token's list names `topk` distinct keys of its
/// request (0 .. keys - 1, keys >= topk) in random order, entry = slot(b, key) (the key's cache
/// slot, page * page_size + offset, through the request's pages), or -1 where skip() says so
/// (called once an entry, after its key is drawn).
template <class Rng, class Slot, class Skip>
std::vector<std::int32_t> topk_index_lists(int batch, int q_len, int topk, int keys, Rng& rng, Slot&& slot,
                                           Skip&& skip) {
  std::vector<std::int32_t> lists(static_cast<std::size_t>(batch) * q_len * topk);
  std::vector<int> order(static_cast<std::size_t>(keys));
  std::size_t at = 0;
  for (int b = 0; b < batch; ++b) {
    std::iota(order.begin(), order.end(), 0);
    for (int t = 0; t < q_len; ++t)
      for (int k = 0; k < topk; ++k) {  // a partial Fisher-Yates shuffle: order[0, topk) distinct
        std::swap(order[k], order[std::uniform_int_distribution<int>(k, keys - 1)(rng)]);
        lists[at++] = skip() ? -1 : slot(b, order[k]);
      }
  }
  return lists;
}

}  // namespace xqajit
