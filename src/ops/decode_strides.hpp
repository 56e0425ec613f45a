#pragma once
// The element strides of a decode call with the caller's zeros resolved to the dense
// layout (NHD or HND): what the plan (its L2 warm-up), the cache-span query and the
// launch (the kernel's args) all read, so they agree by construction.

#include <cstdint>

#include "xqajit/ops/decode.hpp"

namespace xqajit::ops {

struct DecodeStrides {
  std::int64_t q_b, q_t, q_h, o_b, o_t, o_h, k_p, k_t, k_h, v_p, v_t, v_h;
};

inline DecodeStrides resolved_strides(const DecodeParams& p) {
  auto pick = [](std::int64_t v, std::int64_t dflt) { return v != 0 ? v : dflt; };
  const std::int64_t D = p.head_dim, Hq = p.num_q_heads, Hk = p.num_kv_heads, P = p.page_size;
  const bool nhd = p.kv_layout == KvLayout::nhd;
  const std::int64_t kv_t = nhd ? Hk * D : D, kv_h = nhd ? D : P * D;
  DecodeStrides s{};
  s.q_h = pick(p.q_stride_head, D);
  s.q_t = pick(p.q_stride_token, Hq * D);
  s.q_b = pick(p.q_stride_batch, p.q_len * Hq * D);
  s.o_h = pick(p.out_stride_head, D);
  s.o_t = pick(p.out_stride_token, Hq * D);
  s.o_b = pick(p.out_stride_batch, p.q_len * Hq * D);
  s.k_p = pick(p.k_stride_page, P * Hk * D);
  s.k_t = pick(p.k_stride_token, kv_t);
  s.k_h = pick(p.k_stride_head, kv_h);
  s.v_p = pick(p.v_stride_page, P * Hk * D);
  s.v_t = pick(p.v_stride_token, kv_t);
  s.v_h = pick(p.v_stride_head, kv_h);
  return s;
}


}  // namespace xqajit::ops
