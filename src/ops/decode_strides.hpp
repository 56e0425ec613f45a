#pragma once
// The element strides of a decode call with the caller's zeros resolved to the dense
// layout (NHD or HND): what the plan (its L2 warm-up), the cache-span query and the
// launch (the kernel's args) all read, so they agree by construction.

#include <cstdint>

#include "ops/paged_op.hpp"
#include "xqajit/ops/decode.hpp"

namespace xqajit::ops {

struct DecodeStrides : RowStrides {
  std::int64_t k_p, k_t, k_h, v_p, v_t, v_h;
};

inline DecodeStrides resolved_strides(const DecodeParams& p) {
  auto pick = [](std::int64_t v, std::int64_t dflt) { return v != 0 ? v : dflt; };
  const std::int64_t D = p.head_dim, Hk = p.num_kv_heads, P = p.page_size;
  const bool nhd = p.kv_layout == KvLayout::nhd;
  const std::int64_t kv_t = nhd ? Hk * D : D, kv_h = nhd ? D : P * D;
  DecodeStrides s{};
  static_cast<RowStrides&>(s) = resolved_row_strides(p, p.num_q_heads, D, D);
  s.k_p = pick(p.k_stride_page, P * Hk * D);
  s.k_t = pick(p.k_stride_token, kv_t);
  s.k_h = pick(p.k_stride_head, kv_h);
  s.v_p = pick(p.v_stride_page, P * Hk * D);
  s.v_t = pick(p.v_stride_token, kv_t);
  s.v_h = pick(p.v_stride_head, kv_h);
  return s;
}

}  // namespace xqajit::ops
