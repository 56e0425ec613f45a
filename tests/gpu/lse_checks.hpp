#pragma once
// The lse output's layouts and its check against the float64 reference, for every op
// that returns lse (test_decode, test_mla_sparse): no session state, so a problem
// header can include it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/gpu_buffers.hpp"

namespace xqajit::testing {

/// Strides (floats) of an lse buffer in `layout`: 1 = [B, q_len, H], 2 = [B, H, q_len]
/// (FlashMLA's softmax_lse); every op with an lse output is checked in both.
inline void lse_strides(int layout, int Q, int H, std::int64_t& sb, std::int64_t& st, std::int64_t& sh) {
  if (layout == 2) {
    sh = Q, st = 1, sb = std::int64_t(H) * Q;
  } else {
    sh = 1, st = H, sb = std::int64_t(Q) * H;
  }
}

/// lse as [B, q_len, H] from a device buffer of `layout`.
inline std::vector<double> download_lse(const DeviceBuffer& buf, int layout, int B, int Q, int H) {
  std::vector<float> raw(std::size_t(B) * Q * H);
  buf.download(raw.data(), raw.size() * 4);
  std::int64_t sb, st, sh;
  lse_strides(layout, Q, H, sb, st, sh);
  std::vector<double> out(raw.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Q; ++t)
      for (int h = 0; h < H; ++h) out[(std::size_t(b) * Q + t) * H + h] = raw[b * sb + t * st + h * sh];
  return out;
}

/// The lse's absolute tolerance where a path computes logits from the bf16 Q itself.
constexpr double kLseAtol = 5e-3;

/// Rows whose lse misses the reference: a row with no visible key must be +inf; the
/// others within atol + 1e-3 |lse|. `worst` gets the largest |difference| of the finite ones;
/// `first_bad` (when not null) the index of the first row that misses.
inline int lse_mismatches(const std::vector<double>& got, const std::vector<double>& want, double& worst,
                          std::size_t* first_bad = nullptr, double atol = kLseAtol) {
  int bad = 0;
  for (std::size_t r = 0; r < got.size() && r < want.size(); ++r) {
    bool ok = true;
    if (std::isinf(want[r])) {
      ok = std::isinf(got[r]) && got[r] > 0;
    } else {
      const double d = std::fabs(got[r] - want[r]);
      worst = std::max(worst, d);
      ok = d <= atol + 1e-3 * std::fabs(want[r]);
    }
    if (!ok && bad++ == 0 && first_bad) *first_bad = r;
  }
  return bad;
}

}  // namespace xqajit::testing
