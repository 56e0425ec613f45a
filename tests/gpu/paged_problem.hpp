#pragma once
// What every op's random GPU test problem shares (DecodeProblem, MlaProblem, ...): NaN
// poison and random element codes, a shuffled page table (optionally with a shared
// prefix), a causal draft mask with random holes, the Q/out row strides, the buffers
// every op's params point at on the host and on the device, the workspace (zeroed
// once) and the output read back as doubles. An op's problem adds its caches and its
// own fields. Unused cache slots hold NaN, so a masked key that leaks shows.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/gpu_buffers.hpp"
#include "support/reference.hpp"

namespace xqajit::testing {

inline std::vector<std::uint8_t> nan_bytes(DType dt, std::size_t elems) {
  std::vector<std::uint8_t> v(elems * dtype_bytes(dt));
  if (dt == DType::fp8) std::fill(v.begin(), v.end(), 0x7f);
  else if (dt == DType::fp8ds)  // 0xff: NaN as e4m3, bf16 and float32 alike (the row's three parts)
    std::fill(v.begin(), v.end(), 0xff);
  else {
    const std::uint16_t nan = dt == DType::fp16 ? 0x7e00 : 0x7fc0;
    for (std::size_t i = 0; i < elems; ++i) std::memcpy(&v[i * 2], &nan, 2);
  }
  return v;
}

template <class Case, class = void>
struct HasSeqLens : std::false_type {};
template <class Case>
struct HasSeqLens<Case, std::void_t<decltype(std::declval<const Case&>().seq_lens)>> : std::true_type {};

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

/// A case's request count: one request per length where it draws lengths (`seq_lens`),
/// else its `batch` (a case without a block table, as sparse MLA's).
template <class Case>
int case_batch(const Case& c) {
  if constexpr (HasSeqLens<Case>::value)
    return static_cast<int>(c.seq_lens.size());
  else
    return c.batch;
}

/// The params fields every op's case (DecodeCase, MlaCase, ...) names alike: dtypes,
/// batch (case_batch), q_len, page size, scales, split count, backend.
template <class Params, class Case>
Params shared_params(const Case& c) {
  Params p;
  p.input = c.input;
  p.kv = c.kv;
  p.batch = case_batch(c);
  p.q_len = c.q_len;
  p.page_size = c.page_size;
  p.q_scale = c.q_scale;
  p.kv_scale = c.kv_scale;
  p.num_splits = c.num_splits;
  p.backend = c.backend;
  return p;
}

/// Each request's pages, drawn from a shuffled pool with 3 pages nobody owns.
struct PageTable {
  std::vector<std::int32_t> table;  ///< [batch, columns]; unused entries hold `unused`
  int columns = 1;                  ///< max_pages_per_seq
  int num_pages = 0;
  int page_size = 0;
  int shared = 0;  ///< request 0's first full pages, shared by requests long enough

  /// Whether page `pg` of request `b` (of `len` keys) is request 0's (written once, by it).
  bool borrowed(int b, int pg, int len) const { return b > 0 && pg < shared && len / page_size >= shared; }
};

/// `extra_columns` beyond what the longest request needs; `shared_prefix` of request 0's
/// full pages reused by the later requests whose length allows it (prefix caching).
inline PageTable random_page_table(const std::vector<int>& lens, int P, int extra_columns, int shared_prefix,
                                   std::int32_t unused, std::mt19937& rng) {
  PageTable t;
  t.page_size = P;
  const int B = static_cast<int>(lens.size());
  for (int L : lens) t.columns = std::max(t.columns, (L + P - 1) / P);
  t.columns += extra_columns;
  t.shared = std::min(shared_prefix, lens[0] / P);
  std::int64_t own_pages = 0;
  for (int b = 0; b < B; ++b) {
    const int need = (lens[b] + P - 1) / P;
    own_pages += (b > 0 && lens[b] / P >= t.shared) ? need - t.shared : need;
  }
  t.num_pages = static_cast<int>(own_pages) + 3;
  std::vector<int> perm(t.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  t.table.assign(std::size_t(B) * t.columns, unused);
  int next = 0;
  for (int b = 0; b < B; ++b)
    for (int pg = 0; pg < (lens[b] + P - 1) / P; ++pg)
      t.table[std::size_t(b) * t.columns + pg] = t.borrowed(b, pg, lens[b]) ? t.table[pg] : perm[next++];
  return t;
}

/// [batch, q_len] one-word rows: causal over the drafts (the diagonal always on), each
/// earlier bit off with probability 1 / hole_one_in.
inline std::vector<std::uint32_t> random_causal_mask(int batch, int q_len, unsigned hole_one_in,
                                                     std::mt19937& rng) {
  std::vector<std::uint32_t> mask(std::size_t(batch) * q_len, 0);
  for (std::size_t i = 0; i < mask.size(); ++i) {
    const int t = static_cast<int>(i % q_len);
    for (int j = 0; j <= t; ++j)
      if (j == t || rng() % hole_one_in != 0) mask[i] |= 1u << j;
  }
  return mask;
}

/// Dense rows of `q_head` / `out_head` elements per head (padding past the row allowed).
template <class Params>
void set_row_strides(Params& p, int heads, std::int64_t q_head, std::int64_t out_head) {
  p.q_stride_head = q_head;
  p.q_stride_token = heads * q_head;
  p.q_stride_batch = std::int64_t(p.q_len) * heads * q_head;
  p.out_stride_head = out_head;
  p.out_stride_token = heads * out_head;
  p.out_stride_batch = std::int64_t(p.q_len) * heads * out_head;
}

/// The tensors every op's params name alike, on the host and on the device.
struct PagedBuffers {
  std::vector<std::uint8_t> q;
  std::vector<std::int32_t> table, lens;
  std::vector<float> scales;  // q, kv, then the op's own
  std::vector<std::uint32_t> mask;
  DeviceBuffer d_q, d_out, d_table, d_lens, d_scales, d_mask, d_ws;
  std::size_t out_elems = 0;

  /// Uploads the host vectors and allocates out (16 bytes of slack past its end).
  void upload(std::size_t out_bytes) {
    d_q = to_device(q);
    d_out = DeviceBuffer(out_bytes + 16);
    d_table = to_device(table);
    d_lens = to_device(lens);
    d_scales = to_device(scales);
    d_mask = to_device(mask);
  }

  /// host and dev = `p`, then pointed at the host vectors and at their device copies
  /// (no mask: null); the op points them at its own tensors.
  template <class Params>
  void bind(const Params& p, Params& host, Params& dev) const {
    host = p;
    dev = p;
    host.q = q.data();
    host.block_table = table.data();
    host.seq_lens = lens.data();
    host.spec_mask = mask.empty() ? nullptr : mask.data();
    dev.q = d_q.get();
    dev.out = d_out.get();
    dev.block_table = d_table.get<std::int32_t>();
    dev.seq_lens = d_lens.get<std::int32_t>();
    dev.spec_mask = mask.empty() ? nullptr : d_mask.get<std::uint32_t>();
  }

  /// The workspace a split launch needs, zeroed once at allocation (the counters reset themselves).
  template <class Params>
  void attach_workspace(Params& dev, std::size_t bytes) {
    if (bytes == 0) return;
    d_ws = DeviceBuffer(bytes);
    d_ws.fill(0);
    dev.workspace = d_ws.get();
    dev.workspace_bytes = bytes;
  }

  /// Device output as doubles in [B, q_len, heads, row] order (padding dropped).
  std::vector<double> output_rows(DType dt, std::int64_t head_stride, int row) const {
    std::vector<std::uint8_t> raw(out_elems * dtype_bytes(dt));
    d_out.download(raw.data(), raw.size());
    std::vector<double> o(out_elems / head_stride * row);
    for (std::size_t r = 0; r < out_elems / head_stride; ++r)
      for (int d = 0; d < row; ++d) o[r * row + d] = load_element(dt, raw.data(), r * head_stride + d);
    return o;
  }
};

}  // namespace xqajit::testing
