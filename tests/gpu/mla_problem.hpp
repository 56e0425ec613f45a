#pragma once
// A random paged-latent MLA decode problem on the host and the device, shared
// by the GPU tests and bench_mla. Unused cache slots (the tail of each
// request's last page, pages nobody owns, the padding between rows of a pooled
// cache) hold NaN, so a masked key that leaks shows. Requests may share a
// prefix of pages (prefix caching), as serving engines do. kv=fp8ds caches hold
// DeepSeek-V3.2's 656-byte rows (random_fp8ds_row), poisoned bytes NaN in every reading.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/paged_problem.hpp"
#include "mla/hopper_geometry.h"
#include "support/mla_reference.hpp"
#include "xqajit/ops/mla_decode.hpp"

namespace xqajit::testing {

constexpr int kFp8dsRowBytes = 656;  // 512 e4m3, 4 float32 scales, 64 bf16 (kv=fp8ds)

/// Elements of one cached latent row: 576 values, or an fp8ds row's 656 bytes.
inline std::int64_t mla_row_elems(DType kv) { return kv == DType::fp8ds ? kFp8dsRowBytes : 576; }

/// One group scale of an fp8ds row: mostly FlashMLA's powers of two (its quantiser's ue8m0
/// scales), often any float, sometimes tiny (the group all but vanishes) or large.
inline float random_fp8ds_scale(std::mt19937& rng) {
  const unsigned r = rng() % 16;
  if (r == 0) return std::ldexp(1.f, -60);
  if (r == 1) return 6.f;
  if (r < 9) return std::ldexp(1.f, -static_cast<int>(rng() % 9));
  return 0.001f + static_cast<float>(rng() % 2000) / 1000.f;
}

/// A live fp8ds row at `row`: random e4m3 latent codes (subnormals and zeros included),
/// a random float32 scale per 128 of them, 64 random bf16 rope values.
inline void random_fp8ds_row(std::uint8_t* row, std::mt19937& rng) {
  for (int d = 0; d < 512; ++d) random_element(DType::fp8, row, d, 1.f, rng);
  for (int g = 0; g < 4; ++g) {
    const float s = random_fp8ds_scale(rng);
    std::memcpy(row + 512 + 4 * g, &s, 4);
  }
  for (int d = 0; d < 64; ++d) random_element(DType::bf16, row + 528, d, 1.f, rng);
}

/// A live cache row of `kv` at element `base` of `cache`.
inline void random_mla_row(DType kv, std::uint8_t* cache, std::int64_t base, std::mt19937& rng) {
  if (kv == DType::fp8ds) return random_fp8ds_row(cache + base, rng);
  for (int d = 0; d < 576; ++d) random_element(kv, cache, base + d, 1.f, rng);
}

struct MlaCase {
  DType input = DType::bf16, kv = DType::bf16;
  int heads = 16, page_size = 64, q_len = 1;
  std::vector<int> seq_lens = {100};
  Backend backend = Backend::automatic;
  bool scale_ptrs = false;    // scales through device pointers
  bool padded = false;        // strided Q/out heads and a pooled cache (row and page padding)
  bool explicit_mask = false; // q_len > 1: a packed mask instead of the implicit causal one
  int shared_prefix_pages = 0;  // requests whose length allows it share request 0's first pages
  int extra_pages = 0;          // columns of block_table beyond what the longest request needs
  bool pages_unknown = false;   // num_pages = 0 (allowed: it only bounds the checks and the tensor map)
  int num_splits = 0;
  float sm_scale = 0.0721687836f;  // 1/sqrt(192)
  float q_scale = 1.f, kv_scale = 1.f;

  /// The params' dtypes, shapes, scales and knobs (no pointers, no pages, dense strides).
  MlaDecodeParams params() const {
    MlaDecodeParams p = shared_params<MlaDecodeParams>(*this);
    p.num_heads = heads;
    p.sm_scale = sm_scale;
    return p;
  }
};

/// How the kernel a case runs dequantises an fp8ds cache (the reference models it): the
/// hopper backend's CTAs of 16 real rows (mla/hopper_narrow_qg_ds.cuh: H=16 at q_len 1, dense
/// and, since m53, sparse; sparse H=16 at every q_len since session 35, a CTA a query token)
/// keep the e4m3 values exact and multiply the scales in fp32; its sparse producer specs
/// (m100) round value x (scale rounded to bf16) to bf16; every other path rounds value x scale
/// to bf16.
inline Fp8dsValues fp8ds_values(Backend backend, int heads, int q_len, bool sparse) {
  if (backend != Backend::hopper) return Fp8dsValues::bf16;
  if (xqajit_mla_hopper_cta_rows(heads, q_len, sparse ? 1 : 0) == 16) return Fp8dsValues::exact;
  return sparse && xqajit_mla_hopper_producer(heads, q_len, XQAJIT_MLA_FP8DS_ROW_BYTES, 2, 1) ? Fp8dsValues::bf16_scale
                                                                                             : Fp8dsValues::bf16;
}

/// The dtype mix of random MLA case `i`: bf16 Q and cache, bf16 Q over an fp8 cache, fp8 Q
/// and cache, bf16 Q over the fp8-with-scales cache in turn; always the first where the
/// GPU has no fp8.
template <class Case>
void cycle_dtypes(Case& c, int i, bool has_fp8) {
  switch (has_fp8 ? i % 4 : 0) {
    case 0:
      c.input = c.kv = DType::bf16;
      break;
    case 1:
      c.input = DType::bf16;
      c.kv = DType::fp8;
      break;
    case 2:
      c.input = c.kv = DType::fp8;
      break;
    default:  // DeepSeek-V3.2's fp8-with-scales cache
      c.input = DType::bf16;
      c.kv = DType::fp8ds;
      break;
  }
}

/// Random scales: q_scale and kv_scale in [0.05, 0.45) for the fp8 operands (an fp8ds
/// cache: its own per-row scales, and half the time an extra kv_scale in [0.5, 1.5)),
/// sm_scale within [0.5, 1.5) x 1/sqrt(192).
template <class Case>
void random_scales(Case& c, std::mt19937& rng) {
  if (c.input == DType::fp8) c.q_scale = 0.05f + static_cast<float>(rng() % 40) / 100.f;
  if (c.kv == DType::fp8) c.kv_scale = 0.05f + static_cast<float>(rng() % 40) / 100.f;
  if (c.kv == DType::fp8ds && rng() % 2) c.kv_scale = 0.5f + static_cast<float>(rng() % 100) / 100.f;  // extra
  c.sm_scale = 0.0721687836f * (0.5f + static_cast<float>(rng() % 100) / 100.f);
}

struct MlaProblem : PagedBuffers {
  static constexpr int kQk = 576, kV = 512;
  MlaCase c;
  MlaDecodeParams host, dev;
  std::vector<std::uint8_t> kv;  // (PagedBuffers::scales: q, kv)
  DeviceBuffer d_kv;

  MlaProblem(const MlaCase& cs, std::mt19937& rng, const DeviceInfo& device) : c(cs) {
    const int B = static_cast<int>(c.seq_lens.size()), H = c.heads, P = c.page_size, Q = c.q_len;
    lens = c.seq_lens;
    // Unused entries point far outside the cache: reading one is an illegal access.
    const PageTable pages = random_page_table(lens, P, c.extra_pages, c.shared_prefix_pages, 1 << 28, rng);
    const int max_pages = pages.columns, num_pages = pages.num_pages;
    table = pages.table;

    const std::int64_t q_head = c.padded ? kQk + 32 : kQk, o_head = c.padded ? kV + 64 : kV;
    const std::int64_t row = mla_row_elems(c.kv);
    const std::int64_t kv_tok = c.padded ? row + 64 : row, kv_page = P * kv_tok + (c.padded ? 128 : 0);
    const std::size_t q_elems = std::size_t(B) * Q * H * q_head;
    q = nan_bytes(c.input, q_elems);
    for (std::size_t r = 0; r < std::size_t(B) * Q * H; ++r)
      for (int d = 0; d < kQk; ++d) random_element(c.input, q.data(), std::int64_t(r) * q_head + d, 1.f, rng);
    kv = nan_bytes(c.kv, std::size_t(num_pages) * kv_page);
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < lens[b]; ++j) {
        const std::int64_t base = std::int64_t(table[std::size_t(b) * max_pages + j / P]) * kv_page + (j % P) * kv_tok;
        if (pages.borrowed(b, j / P, lens[b])) continue;  // request 0 wrote it
        random_mla_row(c.kv, kv.data(), base, rng);
      }
    scales = {c.q_scale, c.kv_scale};
    if (Q > 1 && c.explicit_mask) mask = random_causal_mask(B, Q, 3, rng);  // else the implicit causal one

    MlaDecodeParams p = c.params();
    p.num_pages = c.pages_unknown ? 0 : num_pages;
    p.max_pages_per_seq = max_pages;
    set_row_strides(p, H, q_head, o_head);
    p.kv_stride_token = kv_tok;
    p.kv_stride_page = kv_page;
    out_elems = std::size_t(B) * Q * H * o_head;

    upload(out_elems * 2);
    d_kv = to_device(kv);
    bind(p, host, dev);
    host.kv_cache = kv.data();
    dev.kv_cache = d_kv.get();
    if (c.scale_ptrs) {
      dev.q_scale_ptr = d_scales.get<float>();
      dev.kv_scale_ptr = d_scales.get<float>() + 1;
      dev.q_scale = dev.kv_scale = -7.f;  // must be ignored
      host.q_scale_ptr = scales.data();
      host.kv_scale_ptr = scales.data() + 1;
    }
    attach_workspace(dev, mla_decode_workspace_size(dev, device));
  }

  /// Device output as doubles in [B, q_len, H, 512] order (padding dropped).
  std::vector<double> output() const { return output_rows(DType::bf16, dev.out_stride_head, kV); }
};

}  // namespace xqajit::testing
