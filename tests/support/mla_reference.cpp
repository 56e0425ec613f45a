#include "support/mla_reference.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <thread>

#include "support/reference.hpp"
#include "support/softmax_reference.hpp"

namespace xqajit::testing {

std::vector<double> reference_mla_decode(const MlaDecodeParams& p) {
  constexpr int kQk = 576, kV = 512;
  const int B = p.batch, Q = p.q_len, H = p.num_heads, P = p.page_size;
  auto pick = [](std::int64_t v, std::int64_t d) { return v != 0 ? v : d; };
  const std::int64_t q_h = pick(p.q_stride_head, kQk), q_t = pick(p.q_stride_token, std::int64_t(H) * kQk),
                     q_b = pick(p.q_stride_batch, std::int64_t(Q) * H * kQk);
  const std::int64_t kv_t = pick(p.kv_stride_token, kQk), kv_p = pick(p.kv_stride_page, P * kv_t);
  const std::int64_t bt_stride = p.block_table_stride ? p.block_table_stride : p.max_pages_per_seq;
  const double q_scale = p.q_scale_ptr ? *p.q_scale_ptr : p.q_scale;
  const double kv_scale = p.kv_scale_ptr ? *p.kv_scale_ptr : p.kv_scale;
  const double logit_scale = double(p.sm_scale) * q_scale * kv_scale;

  std::vector<double> out(std::size_t(B) * Q * H * kV, 0.0);
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<double> kv;
  for (int b = 0; b < B; ++b) {
    const int L = std::clamp(p.seq_lens[b], 0, p.max_pages_per_seq * P);
    kv.assign(std::size_t(L) * kQk, 0.0);  // this request's latent rows, decoded once for all heads
    for (int j = 0; j < L; ++j) {
      const std::int64_t row = std::int64_t(p.block_table[b * bt_stride + j / P]) * kv_p + std::int64_t(j % P) * kv_t;
      for (int d = 0; d < kQk; ++d) kv[std::size_t(j) * kQk + d] = load_element(p.kv, p.kv_cache, row + d);
    }
    const int drafts = L - Q;  // keys drafts..L-1 are the q_len new tokens
    auto row = [&](int t, int h, std::vector<double>& scores, std::vector<double>& qv, std::vector<double>& acc) {
      for (int d = 0; d < kQk; ++d) qv[d] = load_element(p.input, p.q, b * q_b + t * q_t + h * q_h + d);
      auto visible = [&](int j) {
        if (j < drafts) return true;
        const int bit = j - drafts;
        return p.spec_mask ? ((p.spec_mask[std::int64_t(b) * Q + t] >> bit) & 1u) != 0 : bit <= t;
      };
      auto dot = [&](int j) {
        const double* k = &kv[std::size_t(j) * kQk];
        double s = 0;
        for (int d = 0; d < kQk; ++d) s += qv[d] * k[d];
        return s;
      };
      const double m = masked_scores(L, visible, dot, logit_scale, scores);
      if (m == -INFINITY) return;  // no visible key: zeros
      // V is the first 512 values of each latent row.
      auto value = [&](int j, int d) { return kv[std::size_t(j) * kQk + d]; };
      const double denom = softmax_weighted_sum(L, scores, m, kV, value, acc);
      double* o = &out[((std::size_t(b) * Q + t) * H + h) * kV];
      for (int d = 0; d < kV; ++d) o[d] = acc[d] / denom * kv_scale;
    };
    std::atomic<int> next{0};
    std::vector<std::thread> pool;
    for (int i = 0; i < std::min(threads, Q * H); ++i)
      pool.emplace_back([&] {
        std::vector<double> scores(L), qv(kQk), acc(kV);
        for (int r = next++; r < Q * H; r = next++) row(r / H, r % H, scores, qv, acc);
      });
    for (auto& th : pool) th.join();
  }
  return out;
}

}  // namespace xqajit::testing
