// Which kernels a spec's launches may use: the measured backend rule (planned_backend),
// rows per CTA (planned_cta_rows), and every variant a launch of a spec may pick
// (launch_variants: what prewarm and bundle packing compile). spec.cpp holds the spec itself.

#include <algorithm>
#include <vector>

#include "spec/arch_rules.hpp"
#include "xqajit/error.hpp"
#include "xqajit/spec/spec.hpp"

namespace xqajit {

using detail::default_backend;
using detail::default_cta_rows;
using detail::has_hopper;

std::vector<Backend> backends_for(Kind kind, const Arch& arch) {
  // The first entry is default_backend: GQA's spec resolves auto to it and its launch
  // plan then picks per call where both run (planned_backend); MLA's is hopper on sm_90a.
  if (!has_hopper(arch)) return {Backend::portable};
  if (kind == Kind::mla) return {Backend::hopper, Backend::portable};
  return {Backend::portable, Backend::hopper};
}

Backend planned_backend(const KernelSpec& spec, bool split_launch) {
  if (spec.backend != Backend::automatic) return spec.backend;
  if (spec.kind == Kind::mla) return default_backend(spec.kind, spec.arch);
  // GQA on sm_90a, the measured rule (H200, same-run A/B, docs/KERNEL_NOTES.md h3-h7, h15).
  // An fp8 cache: hopper (session 5 run 5: 64x4096 129.9 vs 130.8 us for portable's
  // t128, 16x4096 38.6 vs 39.9, D=256 70.2 vs 74.0, B=1 L=8192 11.9 vs 12.4, page 16
  // 130 vs 136.5, speculative decoding q_len 8 200 vs 215 (run 4: 205-207 vs 209-219);
  // portable is 1-4 % ahead at 128x8192 (497 vs 507), Hq 64 and B=1 L=65536 -- margins
  // the tuner, whose table overrides this per bucket, resolves better than a rule).
  // 16-bit caches, head_dim 128, one query token: hopper where the launch splits the
  // sequence (session 8 run 3: B=1 L=8192 13.3 vs 13.7 us, L=65536 66.4 vs 67.3, 16x4096
  // 65.6 vs 66.4; sessions 6-7 alike), portable for one-split grids (equal within 0.5 %:
  // 128x8192 955 vs 958). Hopper at head_dim 256 and for speculative decoding at 128
  // (session 16 run 5, H100, `xqajit tune` over batch {1,8,32,64} x length {1k..32k},
  // groups 4 and 8, hopper's own split rule against this rule's portable choice): D=256
  // faster in all 32 buckets (0.55-0.89 x the time at B=1, 0.98-0.997 x from B=32), q_len 8
  // in 30 of 32 (0.85-0.996 x; B=1 group 8 at L=4096-8192 1.02-1.04 x); the session-14
  // bench agrees on H200 (D=256 B=32 125.4 vs 128.3 us).
  // Hopper needs tiles of >= 64 keys.
  const bool hopper_arch = spec.kind == Kind::gqa && has_hopper(spec.arch) && (spec.kv_tile == 0 || spec.kv_tile >= 64);
  const bool fp8 = spec.kv == DType::fp8;
  const bool hopper_16bit = !fp8 && ((spec.head_dim == 128 && (spec.q_len > 1 || split_launch)) ||
                                     (spec.head_dim == 256 && spec.q_len == 1));
  return hopper_arch && (fp8 || hopper_16bit) ? Backend::hopper : default_backend(spec.kind, spec.arch);
}

int planned_cta_rows(const KernelSpec& spec, long long batch_kv_heads, int sm_count, long long keys) {
  // Measured at head_dim 128, and 256 with an fp8 cache (h46: B=1 L=8192 q_len 4 35.1 -> 22.6 us,
  // q_len 8 33.6 -> 29.4); at 64 blocks of 8 lost 3-4 % at B=1 (16 won q_len 8 by 13 %: the tuner's).
  const bool measured = spec.head_dim == 128 || (spec.head_dim == 256 && spec.kv == DType::fp8);
  if (spec.cta_rows != 0 || spec.kind != Kind::gqa || spec.backend != Backend::hopper || spec.q_len == 1 || !measured)
    return spec.cta_rows;
  // Speculative decoding at small batch (H200, bench_decode --spec-rows, KERNEL_NOTES h43):
  // the plan keeps 32+ rows' splits to one cluster of 8 (h41), so a KV head's rows in one
  // CTA leave SMs idle where batch x KV heads is small, and a 64-row CTA's chain is slow at
  // any batch below 16. Four row blocks (two for 16 rows) where batch x KV heads <= SMs / 16
  // (B=1, Hkv 8: fp8 16 / 32 / 64 rows 16.1 -> 13.6, 22.0 -> 21.7, 31.1 -> 21.7 us; bf16
  // 18.0 -> 16.9, 22.4 -> 21.6, 31.1 -> 25.3); 64 rows as two blocks of 32 up to SMs / 2
  // (B=2-8: fp8 40.9 -> 29.2, 53.7 -> 42.9, 78.7 -> 66.7; bf16 39.3 -> 34.3, 59.3 -> 52.9,
  // 89.1 -> 87.4), and with an fp8 cache up to SMs (H100, runs 4 and 7: B=16 L=4096 73.3-73.4
  // -> 64.6-64.8; bf16 there 99.4-99.8 -> 102.7-103.4, and both lose at B=64: 243 -> 269-271,
  // 364 -> 387). Fewer rows keep one block past B=2: at B=4-8 smaller blocks lost up to 2 x.
  const int n = default_cta_rows(spec);
  // Long sequences (more than 256 keys per query row of a KV head: L > 8192 at 32 rows, > 16384
  // at 64) take two blocks, not four: every block re-reads its KV head's keys, and a long
  // sequence's splits fill the SMs without more blocks (H100, session 18 run 6, bench_decode
  // --spec-long, head_dim 128, four blocks -> two: B=1 32 rows L=16384 bf16 37.1 -> 35.2 us, fp8
  // 29.3 -> 27.3, L=65536 127.3 -> 111.8, 89.3 -> 64.4; 64 rows L=65536 136.7 -> 120.2, fp8 104.9
  // -> 75.8, L=32768 fp8 58.3 -> 47.6 (run 4); at L=16384 64 rows keep four: 41.5 vs 42.9, fp8
  // 34.2 vs 39.1; and at B=2, where one block ran before, 32 rows fp8 L=32768 75.9 -> 62.1, bf16
  // 109.4 -> 108.8).
  const bool long_seq = spec.head_dim == 128 && keys > 256LL * spec.group * spec.q_len;
  if (n >= 32 && long_seq && batch_kv_heads * 8 <= sm_count) return n / 2;
  if (n >= 16 && batch_kv_heads * 16 <= sm_count) return std::max(8, n / 4);
  // 32 rows of an fp8 cache over short sequences at B=2-8 (Hkv 8): two blocks of 16 with
  // 128-key tiles (default_kv_tile) up to batch x KV heads <= SMs / 2 (H100, session 19: the
  // tuner timed as serving runs, then bench_decode --spec-rows, group 4 q_len 8, L=8192, one
  // block of 64-key tiles -> two of 128: B=2 27.0 -> 22.6 us, B=4 37.0 -> 34.9, B=8 64.1 ->
  // 57.0; L=4096 B=8 40.4 -> 32.4). Long sequences past h47's batch keep one block (L=32768
  // B=8: two blocks 206 us against one's 204).
  if (n == 32 && spec.kv == DType::fp8 && spec.head_dim == 128 && !long_seq && batch_kv_heads * 2 <= sm_count)
    return 16;
  const long long sms_per_kv_head = spec.kv == DType::fp8 ? 1 : 2;
  if (n == 64 && batch_kv_heads * sms_per_kv_head <= sm_count) return 32;
  return 0;
}

namespace {
// Every cta_rows planned_cta_rows may pick for `spec` (hopper), whatever the launch.
std::vector<int> cta_rows_variants(const KernelSpec& spec) {
  std::vector<int> out;
  // One KV head on 16 SMs: the small-batch form, short and long; on 2: the 64-row one.
  for (const auto& [sm_count, keys] : {std::pair{16, 0LL}, std::pair{16, 1LL << 30}, std::pair{2, 0LL}}) {
    const int rows = planned_cta_rows(spec, 1, sm_count, keys);
    if (rows != 0 && std::find(out.begin(), out.end(), rows) == out.end()) out.push_back(rows);
  }
  return out;
}
}  // namespace

std::vector<Backend> launch_backends(const KernelSpec& spec) {
  if (spec.backend != Backend::automatic) return {spec.backend};
  std::vector<Backend> out{default_backend(spec.kind, spec.arch)};
  for (const bool split : {false, true}) {
    const Backend planned = planned_backend(spec, split);
    if (std::find(out.begin(), out.end(), planned) == out.end()) out.push_back(planned);
  }
  return out;
}

std::vector<KernelSpec> launch_variants(const std::vector<KernelSpec>& specs) {
  std::vector<KernelSpec> out;
  out.reserve(specs.size());
  for (const KernelSpec& spec : specs) {
    // An invalid spec passes through unchanged: whoever compiles it reports why.
    std::vector<Backend> backends{spec.backend};
    try {
      validate(spec);
      backends = launch_backends(spec);
    } catch (const SpecError&) {
    }
    for (const Backend backend : backends) {
      KernelSpec variant = spec;
      if (backends.size() > 1) variant.backend = backend;
      out.push_back(variant);
      if (backend != Backend::hopper) continue;
      variant.backend = Backend::hopper;
      for (const int rows : cta_rows_variants(variant)) {
        KernelSpec rows_variant = variant;
        rows_variant.cta_rows = rows;
        out.push_back(rows_variant);
      }
    }
  }
  return out;
}

}  // namespace xqajit
