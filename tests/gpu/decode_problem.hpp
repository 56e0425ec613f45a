#pragma once
// A random paged-KV decode problem on the host and the device, shared by the
// GPU tests and bench_decode. Unused cache slots (the tail of each request's
// last page, and pages nobody owns) hold NaN, so a masked key that leaks shows.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "support/gpu_buffers.hpp"
#include "support/reference.hpp"
#include "xqajit/ops/decode.hpp"

namespace xqajit::testing {

struct DecodeCase {
  DType input = DType::bf16, kv = DType::bf16, output = DType::bf16;
  int head_dim = 128, page_size = 64, group = 8, num_kv_heads = 2, q_len = 1;
  std::vector<int> seq_lens = {100};
  KvLayout layout = KvLayout::nhd;
  int window = 0;
  bool sinks = false;
  bool scale_ptrs = false;   // scales through device pointers
  bool padded_q = false;     // Q/out rows with extra stride (non-contiguous heads)
  int num_splits = 0;
  int cta_rows = 0;          // hopper rows per CTA; 0 = the plan's choice
  float q_scale = 1.f, kv_scale = 1.f, rcp_out_scale = 1.f;
  int extra_pages = 0;       // columns of block_table beyond what the longest request needs
  // auto unless XQAJIT_TEST_DECODE_BACKEND (auto|portable|hopper) forces one for every case.
  Backend backend = test_backend();

  static Backend test_backend() {
    const char* b = std::getenv("XQAJIT_TEST_DECODE_BACKEND");
    return b ? parse_backend(b) : Backend::automatic;
  }
};

inline std::vector<std::uint8_t> nan_bytes(DType dt, std::size_t elems) {
  std::vector<std::uint8_t> v(elems * dtype_bytes(dt));
  if (dt == DType::fp8) std::fill(v.begin(), v.end(), 0x7f);
  else {
    const std::uint16_t nan = dt == DType::fp16 ? 0x7e00 : 0x7fc0;
    for (std::size_t i = 0; i < elems; ++i) std::memcpy(&v[i * 2], &nan, 2);
  }
  return v;
}

// A random finite value of `dt`, roughly in [-range, range].
inline void random_element(DType dt, std::uint8_t* base, std::int64_t i, float range, std::mt19937& rng) {
  if (dt == DType::fp8) {
    // Codes with exponents 4..10 (values 2^-3 .. 2^4), and one in 8 with exponent 0
    // (zeros and subnormals, which the in-register dequantisation must keep exact).
    // No NaN codes: NaN in live cache slots is not a valid input.
    const unsigned r = rng();
    const unsigned e = (r >> 1) % 8;
    base[i] = static_cast<std::uint8_t>(((r & 1) << 7) | ((e == 7 ? 0 : 4 + e) << 3) | ((r >> 4) & 7));
    return;
  }
  std::uniform_real_distribution<float> u(-range, range);
  store_element(dt, base, i, u(rng));
}

struct DecodeProblem {
  DecodeCase c;
  DecodeParams host;  // pointers into the host vectors below
  DecodeParams dev;   // the same on the device
  std::vector<std::uint8_t> q, k, v;
  std::vector<std::int32_t> table, lens;
  std::vector<float> sinks, scales;  // scales: q, kv, rcp_out
  std::vector<std::uint32_t> mask;
  DeviceBuffer d_q, d_out, d_k, d_v, d_table, d_lens, d_sinks, d_scales, d_mask, d_ws;
  std::size_t out_elems = 0;

  DecodeProblem(const DecodeCase& cs, std::mt19937& rng, const DeviceInfo& device) : c(cs) {
    const int B = static_cast<int>(c.seq_lens.size()), Hk = c.num_kv_heads, Hq = Hk * c.group;
    const int D = c.head_dim, P = c.page_size, Q = c.q_len;
    lens = c.seq_lens;
    int max_pages = 1;
    std::int64_t used_pages = 0;
    for (int L : lens) {
      max_pages = std::max(max_pages, (L + P - 1) / P);
      used_pages += (L + P - 1) / P;
    }
    max_pages += c.extra_pages;
    const int num_pages = static_cast<int>(used_pages) + 3;
    std::vector<int> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(std::size_t(B) * max_pages, -1);  // unused entries must never be read
    int next = 0;
    for (int b = 0; b < B; ++b)
      for (int pg = 0; pg < (lens[b] + P - 1) / P; ++pg) table[std::size_t(b) * max_pages + pg] = perm[next++];

    const std::int64_t q_head_stride = c.padded_q ? D + 16 : D;
    const std::size_t q_elems = std::size_t(B) * Q * Hq * q_head_stride;
    q = nan_bytes(c.input, q_elems);  // padding between heads is NaN too
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Q; ++t)
        for (int h = 0; h < Hq; ++h)
          for (int d = 0; d < D; ++d)
            random_element(c.input, q.data(), ((std::int64_t(b) * Q + t) * Hq + h) * q_head_stride + d, 2.f, rng);

    const std::size_t kv_elems = std::size_t(num_pages) * P * Hk * D;
    k = nan_bytes(c.kv, kv_elems);
    v = nan_bytes(c.kv, kv_elems);
    const bool nhd = c.layout == KvLayout::nhd;
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < lens[b]; ++j) {
        const std::int64_t page = table[std::size_t(b) * max_pages + j / P];
        for (int h = 0; h < Hk; ++h) {
          const std::int64_t base = page * P * Hk * D +
                                    (nhd ? (std::int64_t(j % P) * Hk + h) * D : (std::int64_t(h) * P + j % P) * D);
          for (int d = 0; d < D; ++d) {
            random_element(c.kv, k.data(), base + d, 2.f, rng);
            random_element(c.kv, v.data(), base + d, 2.f, rng);
          }
        }
      }
    if (c.sinks) {
      std::uniform_real_distribution<float> u(-2.f, 4.f);
      for (int h = 0; h < Hq; ++h) sinks.push_back(u(rng));
    }
    scales = {c.q_scale, c.kv_scale, c.rcp_out_scale};
    if (Q > 1) {  // causal over the drafts, with random holes
      mask.assign(std::size_t(B) * Q, 0);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < Q; ++t) {
          std::uint32_t w = 0;
          for (int j = 0; j <= t; ++j)
            if (j == t || rng() % 4 != 0) w |= 1u << j;
          mask[std::size_t(b) * Q + t] = w;
        }
    }

    DecodeParams p;
    p.input = c.input;
    p.kv = c.kv;
    p.output = c.output;
    p.batch = B;
    p.q_len = Q;
    p.num_q_heads = Hq;
    p.num_kv_heads = Hk;
    p.head_dim = D;
    p.page_size = P;
    p.num_pages = num_pages;
    p.max_pages_per_seq = max_pages;
    p.kv_layout = c.layout;
    p.q_stride_head = q_head_stride;
    p.q_stride_token = Hq * q_head_stride;
    p.q_stride_batch = std::int64_t(Q) * Hq * q_head_stride;
    p.out_stride_head = q_head_stride;
    p.out_stride_token = Hq * q_head_stride;
    p.out_stride_batch = std::int64_t(Q) * Hq * q_head_stride;
    p.q_scale = c.q_scale;
    p.kv_scale = c.kv_scale;
    p.rcp_out_scale = c.rcp_out_scale;
    p.sliding_window = c.window;
    p.num_splits = c.num_splits;
    p.cta_rows = c.cta_rows;
    p.backend = c.backend;
    out_elems = q_elems;

    host = p;
    host.q = q.data();
    host.k_cache = k.data();
    host.v_cache = v.data();
    host.block_table = table.data();
    host.seq_lens = lens.data();
    host.sinks = c.sinks ? sinks.data() : nullptr;
    host.spec_mask = Q > 1 ? mask.data() : nullptr;

    d_q = to_device(q);
    d_out = DeviceBuffer(out_elems * dtype_bytes(c.output) + 16);
    d_k = to_device(k);
    d_v = to_device(v);
    d_table = to_device(table);
    d_lens = to_device(lens);
    d_sinks = to_device(sinks);
    d_scales = to_device(scales);
    d_mask = to_device(mask);
    dev = p;
    dev.q = d_q.get();
    dev.out = d_out.get();
    dev.k_cache = d_k.get();
    dev.v_cache = d_v.get();
    dev.block_table = d_table.get<std::int32_t>();
    dev.seq_lens = d_lens.get<std::int32_t>();
    dev.sinks = c.sinks ? d_sinks.get<float>() : nullptr;
    dev.spec_mask = Q > 1 ? d_mask.get<std::uint32_t>() : nullptr;
    if (c.scale_ptrs) {
      dev.q_scale_ptr = d_scales.get<float>();
      dev.kv_scale_ptr = d_scales.get<float>() + 1;
      dev.rcp_out_scale_ptr = d_scales.get<float>() + 2;
      dev.q_scale = dev.kv_scale = dev.rcp_out_scale = -7.f;  // must be ignored
    }
    const std::size_t ws = decode_workspace_size(dev, device);
    if (ws > 0) {
      d_ws = DeviceBuffer(ws);
      d_ws.fill(0);  // once, at allocation
      dev.workspace = d_ws.get();
      dev.workspace_bytes = ws;
    }
  }

  /// Device output as doubles in [B, q_len, Hq, D] order (padding dropped).
  std::vector<double> output() const {
    std::vector<std::uint8_t> raw(out_elems * dtype_bytes(c.output));
    d_out.download(raw.data(), raw.size());
    const int D = c.head_dim;
    const std::int64_t hs = dev.out_stride_head;
    std::vector<double> o(out_elems / hs * D);
    for (std::size_t r = 0; r < out_elems / hs; ++r)
      for (int d = 0; d < D; ++d) o[r * D + d] = load_element(c.output, raw.data(), r * hs + d);
    return o;
  }
};

}  // namespace xqajit::testing
