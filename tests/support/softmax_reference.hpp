#pragma once
// The float64 softmax every op's CPU reference computes for one query row (reference.cpp,
// mla_reference.cpp, ...): scores of the visible keys, then the weighted sum of their
// values. An op supplies which keys a row sees, its dot product and its value rows.

#include <algorithm>
#include <cmath>
#include <vector>

namespace xqajit::testing {

/// scores[j] = dot(j) * scale for every key j < L that `visible(j)`, -inf for the others;
/// returns the largest score (-inf when no key is visible: the row's output is zeros).
template <class Visible, class Dot>
double masked_scores(int L, Visible&& visible, Dot&& dot, double scale, std::vector<double>& scores) {
  double m = -INFINITY;
  for (int j = 0; j < L; ++j) {
    if (!visible(j)) {
      scores[j] = -INFINITY;
      continue;
    }
    scores[j] = dot(j) * scale;
    m = std::max(m, scores[j]);
  }
  return m;
}

/// acc[d] = sum over the visible keys of exp(scores[j] - m) * value(j, d), d < dim;
/// returns the sum of the weights (the softmax denominator, before any sink).
template <class Value>
double softmax_weighted_sum(int L, const std::vector<double>& scores, double m, int dim, Value&& value,
                            std::vector<double>& acc) {
  double denom = 0;
  std::fill(acc.begin(), acc.end(), 0.0);
  for (int j = 0; j < L; ++j) {
    if (scores[j] == -INFINITY) continue;
    const double w = std::exp(scores[j] - m);
    denom += w;
    for (int d = 0; d < dim; ++d) acc[d] += w * value(j, d);
  }
  return denom;
}

}  // namespace xqajit::testing
