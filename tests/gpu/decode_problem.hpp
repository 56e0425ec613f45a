#pragma once
// A random paged-KV decode problem on the host and the device, shared by the
// GPU tests. Unused cache slots (the tail of each request's last page, and pages
// nobody owns) hold NaN, so a masked key that leaks shows. What every op's problem
// shares is gpu/paged_problem.hpp's.

#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "gpu/lse_checks.hpp"
#include "gpu/paged_problem.hpp"
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
  int lse_layout = 0;        // 0: no lse output, 1: [B, q_len, Hq], 2: [B, Hq, q_len] (op_checks.hpp)
  // auto unless XQAJIT_TEST_DECODE_BACKEND (auto|portable|hopper) forces one for every case.
  Backend backend = test_backend();

  static Backend test_backend() {
    const char* b = std::getenv("XQAJIT_TEST_DECODE_BACKEND");
    return b ? parse_backend(b) : Backend::automatic;
  }

  /// The params' dtypes, shapes, scales and knobs (no pointers, no pages, dense strides).
  DecodeParams params() const {
    DecodeParams p = shared_params<DecodeParams>(*this);
    p.output = output;
    p.num_q_heads = group * num_kv_heads;
    p.num_kv_heads = num_kv_heads;
    p.head_dim = head_dim;
    p.kv_layout = layout;
    p.rcp_out_scale = rcp_out_scale;
    p.sliding_window = window;
    p.cta_rows = cta_rows;
    return p;
  }
};

struct DecodeProblem : PagedBuffers {
  DecodeCase c;
  DecodeParams host;  // pointers into the host vectors below
  DecodeParams dev;   // the same on the device
  std::vector<std::uint8_t> k, v;
  std::vector<float> sinks;  // (PagedBuffers::scales: q, kv, rcp_out)
  DeviceBuffer d_k, d_v, d_sinks, d_lse;

  DecodeProblem(const DecodeCase& cs, std::mt19937& rng, const DeviceInfo& device) : c(cs) {
    const int B = static_cast<int>(c.seq_lens.size()), Hk = c.num_kv_heads, Hq = Hk * c.group;
    const int D = c.head_dim, P = c.page_size, Q = c.q_len;
    lens = c.seq_lens;
    // Unused entries must never be read.
    const PageTable pages = random_page_table(lens, P, c.extra_pages, 0, -1, rng);
    const int max_pages = pages.columns, num_pages = pages.num_pages;
    table = pages.table;

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
    if (Q > 1) mask = random_causal_mask(B, Q, 4, rng);  // causal over the drafts, with random holes

    DecodeParams p = c.params();
    p.num_pages = num_pages;
    p.max_pages_per_seq = max_pages;
    set_row_strides(p, Hq, q_head_stride, q_head_stride);
    out_elems = q_elems;

    upload(out_elems * dtype_bytes(c.output));
    d_k = to_device(k);
    d_v = to_device(v);
    d_sinks = to_device(sinks);
    bind(p, host, dev);
    host.k_cache = k.data();
    host.v_cache = v.data();
    host.sinks = c.sinks ? sinks.data() : nullptr;
    dev.k_cache = d_k.get();
    dev.v_cache = d_v.get();
    dev.sinks = c.sinks ? d_sinks.get<float>() : nullptr;
    if (c.scale_ptrs) {
      dev.q_scale_ptr = d_scales.get<float>();
      dev.kv_scale_ptr = d_scales.get<float>() + 1;
      dev.rcp_out_scale_ptr = d_scales.get<float>() + 2;
      dev.q_scale = dev.kv_scale = dev.rcp_out_scale = -7.f;  // must be ignored
    }
    if (c.lse_layout) {
      d_lse = DeviceBuffer(std::size_t(B) * Q * Hq * 4);
      dev.lse = d_lse.get<float>();
      lse_strides(c.lse_layout, Q, Hq, dev.lse_stride_batch, dev.lse_stride_token, dev.lse_stride_head);
    }
    attach_workspace(dev, decode_workspace_size(dev, device));
  }

  /// The device lse as [B, q_len, Hq] (empty without an lse output).
  std::vector<double> lse() const {
    if (!c.lse_layout) return {};
    return download_lse(d_lse, c.lse_layout, static_cast<int>(c.seq_lens.size()), c.q_len, c.group * c.num_kv_heads);
  }

  /// Device output as doubles in [B, q_len, Hq, D] order (padding dropped).
  std::vector<double> output() const { return output_rows(c.output, dev.out_stride_head, c.head_dim); }
};

}  // namespace xqajit::testing
