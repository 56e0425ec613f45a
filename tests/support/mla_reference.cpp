#include "support/mla_reference.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>

#include "support/reference.hpp"
#include "support/softmax_reference.hpp"

namespace xqajit::testing {

namespace {
constexpr int kQk = 576, kV = 512;
constexpr int kFp8dsRow = 656, kFp8dsGroup = 128;
}  // namespace

double fp8ds_row_value(const unsigned char* row, int d, Fp8dsValues values) {
  if (d >= kV) {  // rope: bf16 after the latent bytes and the four scales
    std::uint16_t h;
    std::memcpy(&h, row + kV + 16 + 2 * (d - kV), 2);
    return bf16_to_float(h);
  }
  // The e4m3 value times its group's scale in float32: exact (the hopper kernel's 16-row
  // CTAs), or rounded to bf16 as FlashMLA's dequantisation (tests/quant.py) and our kernels'
  // bf16 tiles give it (exact for its power-of-two scales).
  float scale;
  std::memcpy(&scale, row + kV + 4 * (d / kFp8dsGroup), 4);
  if (values == Fp8dsValues::exact) return double(e4m3_to_float(row[d])) * scale;
  if (values == Fp8dsValues::bf16_scale) scale = bf16_to_float(float_to_bf16(scale));
  return bf16_to_float(float_to_bf16(e4m3_to_float(row[d]) * scale));
}

std::vector<double> reference_mla_decode(const MlaDecodeParams& p, std::vector<double>* lse_out,
                                         Fp8dsValues fp8ds_values) {
  const int B = p.batch, Q = p.q_len, H = p.num_heads, P = p.page_size;
  const bool sparse = p.indices != nullptr;
  auto pick = [](std::int64_t v, std::int64_t d) { return v != 0 ? v : d; };
  const std::int64_t q_h = pick(p.q_stride_head, kQk), q_t = pick(p.q_stride_token, std::int64_t(H) * kQk),
                     q_b = pick(p.q_stride_batch, std::int64_t(Q) * H * kQk);
  const bool fp8ds = p.kv == DType::fp8ds;  // strides in bytes then
  const std::int64_t kv_t = pick(p.kv_stride_token, fp8ds ? kFp8dsRow : kQk),
                     kv_p = pick(p.kv_stride_page, P * kv_t);
  const std::int64_t bt_stride = p.block_table_stride ? p.block_table_stride : p.max_pages_per_seq;
  const std::int64_t ix_t = pick(p.indices_stride_token, p.topk), ix_b = pick(p.indices_stride_batch, Q * ix_t);
  const double q_scale = p.q_scale_ptr ? *p.q_scale_ptr : p.q_scale;
  const double kv_scale = p.kv_scale_ptr ? *p.kv_scale_ptr : p.kv_scale;
  const double logit_scale = double(p.sm_scale) * q_scale * kv_scale;
  const std::int64_t num_slots = std::int64_t(p.num_pages) * P;

  std::vector<double> out(std::size_t(B) * Q * H * kV, 0.0);
  std::vector<double> lse(std::size_t(B) * Q * H, INFINITY);
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<double> kv;
  auto load_row = [&](std::int64_t row, int j) {
    const unsigned char* bytes = static_cast<const unsigned char*>(p.kv_cache) + row;
    for (int d = 0; d < kQk; ++d)
      kv[std::size_t(j) * kQk + d] =
          fp8ds ? fp8ds_row_value(bytes, d, fp8ds_values) : load_element(p.kv, p.kv_cache, row + d);
  };
  // Runs rows (t, h) for t in [t0, t1) over the n keys in `kv`; visible(t, j) says which each sees.
  auto run = [&](int b, int t0, int t1, int n, const std::function<bool(int, int)>& visible) {
    auto row = [&](int t, int h, std::vector<double>& scores, std::vector<double>& qv, std::vector<double>& acc) {
      for (int d = 0; d < kQk; ++d) qv[d] = load_element(p.input, p.q, b * q_b + t * q_t + h * q_h + d);
      auto dot = [&](int j) {
        const double* k = &kv[std::size_t(j) * kQk];
        double s = 0;
        for (int d = 0; d < kQk; ++d) s += qv[d] * k[d];
        return s;
      };
      const double m = masked_scores(n, [&](int j) { return visible(t, j); }, dot, logit_scale, scores);
      if (m == -INFINITY) return;  // no visible key: zeros, lse +inf
      // V is the first 512 values of each latent row.
      auto value = [&](int j, int d) { return kv[std::size_t(j) * kQk + d]; };
      const double denom = softmax_weighted_sum(n, scores, m, kV, value, acc);
      const double row_lse = m + std::log(denom);
      const std::size_t r = (std::size_t(b) * Q + t) * H + h;
      lse[r] = row_lse;
      // A sink is one more term of the denominator with no value: FlashMLA's
      // exp(lse) / (exp(lse) + exp(sink)); lse itself leaves it out.
      const double sink = p.attn_sink ? 1.0 / (1.0 + std::exp(double(p.attn_sink[h]) - row_lse)) : 1.0;
      double* o = &out[r * kV];
      for (int d = 0; d < kV; ++d) o[d] = acc[d] / denom * kv_scale * sink;
    };
    const int rows = (t1 - t0) * H;
    std::atomic<int> next{0};
    std::vector<std::thread> pool;
    for (int i = 0; i < std::min(threads, rows); ++i)
      pool.emplace_back([&] {
        std::vector<double> scores(std::max(n, 1)), qv(kQk), acc(kV);
        for (int r = next++; r < rows; r = next++) row(t0 + r / H, r % H, scores, qv, acc);
      });
    for (auto& th : pool) th.join();
  };

  for (int b = 0; b < B; ++b) {
    if (sparse) {
      const int n = p.topk_length ? std::clamp(p.topk_length[b], 0, p.topk) : p.topk;
      for (int t = 0; t < Q; ++t) {
        const std::int32_t* list = p.indices + b * ix_b + t * ix_t;
        kv.assign(std::size_t(n) * kQk, 0.0);  // token t's gathered rows, decoded once for all heads
        std::vector<char> valid(std::size_t(n), 0);
        for (int j = 0; j < n; ++j) {
          const std::int64_t slot = list[j];
          if (slot < 0 || slot >= num_slots) continue;
          valid[j] = 1;
          load_row((slot / P) * kv_p + (slot % P) * kv_t, j);
        }
        run(b, t, t + 1, n, [&](int, int j) { return valid[j] != 0; });
      }
      continue;
    }
    const int L = std::clamp(p.seq_lens[b], 0, p.max_pages_per_seq * P);
    kv.assign(std::size_t(L) * kQk, 0.0);  // this request's latent rows, decoded once for all heads
    for (int j = 0; j < L; ++j)
      load_row(std::int64_t(p.block_table[b * bt_stride + j / P]) * kv_p + std::int64_t(j % P) * kv_t, j);
    const int drafts = L - Q;  // keys drafts..L-1 are the q_len new tokens
    run(b, 0, Q, L, [&](int t, int j) {
      if (j < drafts) return true;
      const int bit = j - drafts;
      return p.spec_mask ? ((p.spec_mask[std::int64_t(b) * Q + t] >> bit) & 1u) != 0 : bit <= t;
    });
  }
  if (lse_out) *lse_out = std::move(lse);
  return out;
}

}  // namespace xqajit::testing
