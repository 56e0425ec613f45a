#pragma once
// The request lengths of a ragged batch (`bench_mla --ragged`, `xqajit_plan_model --ragged`):
// uniform on [1, len] from a generator seeded by the shape, so that a peer's bench can draw the
// same ones (B x 7919 + L into std::mt19937, std::uniform_int_distribution<int>(1, L)).

#include <cstdint>
#include <random>
#include <vector>

namespace xqajit::testing {

inline std::vector<std::int32_t> ragged_lengths(int batch, int len) {
  std::mt19937 g(static_cast<unsigned>(batch) * 7919u + static_cast<unsigned>(len));
  std::uniform_int_distribution<int> u(1, len);
  std::vector<std::int32_t> lengths(static_cast<std::size_t>(batch));
  for (std::int32_t& l : lengths) l = u(g);
  return lengths;
}

}  // namespace xqajit::testing
