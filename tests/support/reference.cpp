#include "support/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "support/softmax_reference.hpp"

namespace xqajit::testing {
namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

float half_to_float(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(man, -24);
  else if (exp == 31) v = man ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else v = std::ldexp(1024 + man, exp - 25);
  return static_cast<float>(sign ? -v : v);
}

float bf16_to_float(std::uint16_t h) { return float_of(static_cast<std::uint32_t>(h) << 16); }

float e4m3_to_float(std::uint8_t x) {
  const int sign = x >> 7, exp = (x >> 3) & 0xf, man = x & 7;
  double v;
  if (exp == 15 && man == 7) v = std::numeric_limits<double>::quiet_NaN();
  else if (exp == 0) v = std::ldexp(man, -9);
  else v = std::ldexp(8 + man, exp - 10);
  return static_cast<float>(sign ? -v : v);
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = bits_of(f);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(u >> 16);
}

std::uint16_t float_to_half(float f) {
  // Exhaustive search would be slow; round through the binade arithmetic instead.
  if (std::isnan(f)) return 0x7e00;
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14)) {  // subnormal: multiples of 2^-24
    const double q = std::nearbyint(a * std::ldexp(1.0, 24));
    return sign | static_cast<std::uint16_t>(q);
  }
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const double q = std::nearbyint(std::ldexp(a, 11 - e));  // 11 significant bits
  std::uint32_t mant = static_cast<std::uint32_t>(q);
  int exp = e - 1 + 15;
  if (mant == 2048) {
    mant = 1024;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00;
  return sign | static_cast<std::uint16_t>((exp << 10) | (mant - 1024));
}

std::uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  // Nearest of the 127 non-negative finite values (ties to even mantissa).
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::min(std::fabs(static_cast<double>(f)), 448.0);
  std::uint8_t best = 0;
  double best_err = INFINITY;
  for (int c = 0; c < 127; ++c) {
    const double err = std::fabs(e4m3_to_float(static_cast<std::uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = static_cast<std::uint8_t>(c);
      best_err = err;
    }
  }
  return sign | best;
}

double load_element(DType dtype, const void* base, std::int64_t i) {
  switch (dtype) {
    case DType::fp16: return half_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::fp8:
    case DType::fp8ds: return e4m3_to_float(static_cast<const std::uint8_t*>(base)[i]);
  }
  return 0;
}

void store_element(DType dtype, void* base, std::int64_t i, double v) {
  switch (dtype) {
    case DType::fp16: static_cast<std::uint16_t*>(base)[i] = float_to_half(static_cast<float>(v)); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::fp8:
    case DType::fp8ds: static_cast<std::uint8_t*>(base)[i] = float_to_e4m3(static_cast<float>(v)); break;
  }
}

std::vector<double> reference_decode(const DecodeParams& p, std::vector<double>* lse) {
  const int B = p.batch, Q = p.q_len, Hq = p.num_q_heads, Hk = p.num_kv_heads, D = p.head_dim;
  const int P = p.page_size, group = Hq / Hk;
  auto pick = [](std::int64_t v, std::int64_t d) { return v != 0 ? v : d; };
  const bool nhd = p.kv_layout == KvLayout::nhd;
  const std::int64_t q_h = pick(p.q_stride_head, D), q_t = pick(p.q_stride_token, std::int64_t(Hq) * D),
                     q_b = pick(p.q_stride_batch, std::int64_t(Q) * Hq * D);
  const std::int64_t kv_t = nhd ? std::int64_t(Hk) * D : D, kv_h = nhd ? D : std::int64_t(P) * D;
  const std::int64_t k_p = pick(p.k_stride_page, std::int64_t(P) * Hk * D), k_t = pick(p.k_stride_token, kv_t),
                     k_h = pick(p.k_stride_head, kv_h);
  const std::int64_t v_p = pick(p.v_stride_page, std::int64_t(P) * Hk * D), v_t = pick(p.v_stride_token, kv_t),
                     v_h = pick(p.v_stride_head, kv_h);
  const std::int64_t bt_stride = p.block_table_stride ? p.block_table_stride : p.max_pages_per_seq;
  const bool fp8_kv = p.kv == DType::fp8, fp8_out = p.output == DType::fp8;
  const double q_scale = p.q_scale_ptr ? *p.q_scale_ptr : p.q_scale;
  const double kv_scale = fp8_kv ? (p.kv_scale_ptr ? *p.kv_scale_ptr : p.kv_scale) : 1.0;
  const double rcp_out = fp8_out ? (p.rcp_out_scale_ptr ? *p.rcp_out_scale_ptr : p.rcp_out_scale) : 1.0;
  const double qk_scale = q_scale * kv_scale / std::sqrt(double(D));
  const double out_scale = kv_scale * rcp_out;
  const int mask_words = (Q + 31) / 32;

  std::vector<double> out(std::size_t(B) * Q * Hq * D, 0.0);
  if (lse) lse->assign(std::size_t(B) * Q * Hq, INFINITY);
  auto work = [&](int b, int h) {
    int L = p.seq_lens[b];
    L = std::clamp(L, 0, p.max_pages_per_seq * P);
    std::vector<const void*> dummy;
    auto k_index = [&](int j, int d) {
      const std::int64_t page = p.block_table[b * bt_stride + j / P];
      return page * k_p + std::int64_t(j % P) * k_t + std::int64_t(h) * k_h + d;
    };
    auto v_index = [&](int j, int d) {
      const std::int64_t page = p.block_table[b * bt_stride + j / P];
      return page * v_p + std::int64_t(j % P) * v_t + std::int64_t(h) * v_h + d;
    };
    std::vector<double> scores(L), qv(D), acc(D);
    for (int g = 0; g < group; ++g) {
      const int hq = h * group + g;
      for (int t = 0; t < Q; ++t) {
        for (int d = 0; d < D; ++d)
          qv[d] = load_element(p.input, p.q, b * q_b + t * q_t + hq * q_h + d);
        const int pos = L - Q + t;  // this query's position; the drafts are keys L-Q..L-1
        auto visible = [&](int j) {
          if (p.sliding_window > 0 && j < pos - p.sliding_window + 1) return false;
          if (Q > 1 && j >= L - Q) {
            const int bit = j - (L - Q);
            const std::uint32_t word = p.spec_mask[(std::int64_t(b) * Q + t) * mask_words + bit / 32];
            if (!((word >> (bit % 32)) & 1u)) return false;
          }
          return true;
        };
        auto dot = [&](int j) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += qv[d] * load_element(p.kv, p.k_cache, k_index(j, d));
          return s;
        };
        const double m = masked_scores(L, visible, dot, qk_scale, scores);
        double* o = &out[((std::size_t(b) * Q + t) * Hq + hq) * D];
        if (m == -INFINITY) continue;  // no visible key: zeros
        auto value = [&](int j, int d) { return load_element(p.kv, p.v_cache, v_index(j, d)); };
        double denom = softmax_weighted_sum(L, scores, m, D, value, acc);
        if (lse) (*lse)[(std::size_t(b) * Q + t) * Hq + hq] = m + std::log(denom);  // the sink not included
        if (p.sinks) denom += std::exp(double(p.sinks[hq]) - m);
        for (int d = 0; d < D; ++d) o[d] = acc[d] / denom * out_scale;
      }
    }
  };
  const int jobs = B * Hk;
  const int threads = std::max(1, std::min<int>(jobs, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (int i = w; i < jobs; i += threads) work(i / Hk, i % Hk);
    });
  for (auto& th : pool) th.join();
  return out;
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) || std::isinf(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

}  // namespace xqajit::testing
