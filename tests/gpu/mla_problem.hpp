#pragma once
// A random paged-latent MLA decode problem on the host and the device, shared
// by the GPU tests and bench_mla. Unused cache slots (the tail of each
// request's last page, pages nobody owns, the padding between rows of a pooled
// cache) hold NaN, so a masked key that leaks shows. Requests may share a
// prefix of pages (prefix caching), as serving engines do.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "gpu/decode_problem.hpp"
#include "support/mla_reference.hpp"
#include "xqajit/ops/mla_decode.hpp"

namespace xqajit::testing {

struct MlaCase {
  DType input = DType::bf16, kv = DType::bf16;
  int heads = 16, page_size = 64, q_len = 1;
  std::vector<int> seq_lens = {100};
  Backend backend = Backend::automatic;
  bool scale_ptrs = false;    // scales through device pointers
  bool padded = false;        // strided Q/out heads and a pooled cache (row and page padding)
  bool explicit_mask = false; // q_len > 1: a packed mask instead of the implicit causal one
  int shared_prefix_pages = 0;  // requests whose length allows it share request 0's first pages
  bool pages_unknown = false;   // num_pages = 0 (allowed: it only bounds the checks and the tensor map)
  int num_splits = 0;
  float sm_scale = 0.0721687836f;  // 1/sqrt(192)
  float q_scale = 1.f, kv_scale = 1.f;
};

struct MlaProblem {
  static constexpr int kQk = 576, kV = 512;
  MlaCase c;
  MlaDecodeParams host, dev;
  std::vector<std::uint8_t> q, kv;
  std::vector<std::int32_t> table, lens;
  std::vector<float> scales;  // q, kv
  std::vector<std::uint32_t> mask;
  DeviceBuffer d_q, d_out, d_kv, d_table, d_lens, d_scales, d_mask, d_ws;
  std::size_t out_elems = 0;

  MlaProblem(const MlaCase& cs, std::mt19937& rng, const DeviceInfo& device) : c(cs) {
    const int B = static_cast<int>(c.seq_lens.size()), H = c.heads, P = c.page_size, Q = c.q_len;
    lens = c.seq_lens;
    int max_pages = 1;
    for (int L : lens) max_pages = std::max(max_pages, (L + P - 1) / P);
    const int shared = std::min(c.shared_prefix_pages, lens[0] / P);  // full pages of request 0 only
    std::int64_t own_pages = 0;
    for (int b = 0; b < B; ++b) {
      const int need = (lens[b] + P - 1) / P;
      own_pages += (b > 0 && lens[b] / P >= shared) ? need - shared : need;
    }
    const int num_pages = static_cast<int>(own_pages) + 3;
    std::vector<int> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    // Unused entries point far outside the cache: reading one is an illegal access.
    table.assign(std::size_t(B) * max_pages, 1 << 28);
    int next = 0;
    for (int b = 0; b < B; ++b)
      for (int pg = 0; pg < (lens[b] + P - 1) / P; ++pg) {
        const bool share = b > 0 && pg < shared && lens[b] / P >= shared;
        table[std::size_t(b) * max_pages + pg] = share ? table[pg] : perm[next++];
      }

    const std::int64_t q_head = c.padded ? kQk + 32 : kQk, o_head = c.padded ? kV + 64 : kV;
    const std::int64_t kv_tok = c.padded ? kQk + 64 : kQk, kv_page = P * kv_tok + (c.padded ? 128 : 0);
    const std::size_t q_elems = std::size_t(B) * Q * H * q_head;
    q = nan_bytes(c.input, q_elems);
    for (std::size_t r = 0; r < std::size_t(B) * Q * H; ++r)
      for (int d = 0; d < kQk; ++d) random_element(c.input, q.data(), std::int64_t(r) * q_head + d, 1.f, rng);
    kv = nan_bytes(c.kv, std::size_t(num_pages) * kv_page);
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < lens[b]; ++j) {
        const std::int64_t base = std::int64_t(table[std::size_t(b) * max_pages + j / P]) * kv_page + (j % P) * kv_tok;
        if (b > 0 && j / P < shared && lens[b] / P >= shared) continue;  // request 0 wrote it
        for (int d = 0; d < kQk; ++d) random_element(c.kv, kv.data(), base + d, 1.f, rng);
      }
    scales = {c.q_scale, c.kv_scale};
    if (Q > 1 && c.explicit_mask) {  // causal with random holes (the diagonal always on)
      mask.assign(std::size_t(B) * Q, 0);
      for (auto& w : mask) {
        const int t = static_cast<int>(&w - mask.data()) % Q;
        for (int j = 0; j <= t; ++j)
          if (j == t || rng() % 3 != 0) w |= 1u << j;
      }
    }

    MlaDecodeParams p;
    p.input = c.input;
    p.kv = c.kv;
    p.batch = B;
    p.q_len = Q;
    p.num_heads = H;
    p.page_size = P;
    p.num_pages = c.pages_unknown ? 0 : num_pages;
    p.max_pages_per_seq = max_pages;
    p.q_stride_head = q_head;
    p.q_stride_token = H * q_head;
    p.q_stride_batch = std::int64_t(Q) * H * q_head;
    p.out_stride_head = o_head;
    p.out_stride_token = H * o_head;
    p.out_stride_batch = std::int64_t(Q) * H * o_head;
    p.kv_stride_token = kv_tok;
    p.kv_stride_page = kv_page;
    p.sm_scale = c.sm_scale;
    p.q_scale = c.q_scale;
    p.kv_scale = c.kv_scale;
    p.backend = c.backend;
    p.num_splits = c.num_splits;
    out_elems = std::size_t(B) * Q * H * o_head;

    host = p;
    host.q = q.data();
    host.kv_cache = kv.data();
    host.block_table = table.data();
    host.seq_lens = lens.data();
    host.spec_mask = mask.empty() ? nullptr : mask.data();

    d_q = to_device(q);
    d_out = DeviceBuffer(out_elems * 2 + 16);
    d_kv = to_device(kv);
    d_table = to_device(table);
    d_lens = to_device(lens);
    d_scales = to_device(scales);
    d_mask = to_device(mask);
    dev = p;
    dev.q = d_q.get();
    dev.out = d_out.get();
    dev.kv_cache = d_kv.get();
    dev.block_table = d_table.get<std::int32_t>();
    dev.seq_lens = d_lens.get<std::int32_t>();
    dev.spec_mask = mask.empty() ? nullptr : d_mask.get<std::uint32_t>();
    if (c.scale_ptrs) {
      dev.q_scale_ptr = d_scales.get<float>();
      dev.kv_scale_ptr = d_scales.get<float>() + 1;
      dev.q_scale = dev.kv_scale = -7.f;  // must be ignored
      host.q_scale_ptr = scales.data();
      host.kv_scale_ptr = scales.data() + 1;
    }
    const std::size_t ws = mla_decode_workspace_size(dev, device);
    if (ws > 0) {
      d_ws = DeviceBuffer(ws);
      d_ws.fill(0);  // once, at allocation
      dev.workspace = d_ws.get();
      dev.workspace_bytes = ws;
    }
  }

  /// Device output as doubles in [B, q_len, H, 512] order (padding dropped).
  std::vector<double> output() const {
    std::vector<std::uint8_t> raw(out_elems * 2);
    d_out.download(raw.data(), raw.size());
    const std::int64_t hs = dev.out_stride_head;
    std::vector<double> o(out_elems / hs * kV);
    for (std::size_t r = 0; r < out_elems / hs; ++r)
      for (int d = 0; d < kV; ++d) o[r * kV + d] = load_element(DType::bf16, raw.data(), r * hs + d);
    return o;
  }
};

}  // namespace xqajit::testing
