#pragma once
// The decode cases the GPU grid runs (tests/gpu/test_decode.cpp): the family and the
// features, with random lengths and scales drawn from the session's rng().

#include <random>
#include <vector>

#include "gpu/decode_problem.hpp"
#include "gpu/gpu_session.hpp"

namespace xqajit::testing {

/// `batch` lengths in [1, max_len]; one of them 0 when `with_zero`.
inline std::vector<int> random_lens(int batch, int max_len, bool with_zero) {
  std::uniform_int_distribution<int> u(1, max_len);
  std::vector<int> v(batch);
  for (int& x : v) x = u(rng());
  if (with_zero) v[rng()() % batch] = 0;
  return v;
}

// Random scales (q always; kv where the cache is fp8: a 16-bit cache ignores it).
inline void draw_scales(DecodeCase& c) {
  c.q_scale = 0.5f + static_cast<float>(rng()() % 100) / 100.f;
  if (c.kv == DType::fp8) c.kv_scale = 0.1f + static_cast<float>(rng()() % 50) / 100.f;
}
// A request holds at least its draft tokens (speculative decoding).
inline void fit_draft_lengths(DecodeCase& c) {
  for (int& len : c.seq_lens)
    if (len > 0 && len < c.q_len) len = c.q_len;
}

/// The family: dtypes x fp8 cache x head dims x page sizes, groups, KV heads, layouts and
/// lengths varied across it.
inline std::vector<DecodeCase> family_cases() {
  std::vector<DecodeCase> out;
  const int groups[] = {1, 2, 4, 8, 16};
  int i = 0;
  for (DType in : {DType::fp16, DType::bf16})
    for (bool fp8 : {false, true})
      for (int D : {64, 128, 256})
        for (int P : {16, 32, 64, 128}) {
          DecodeCase c;
          c.input = in;
          c.kv = fp8 ? DType::fp8 : in;
          c.output = in;
          c.head_dim = D;
          c.page_size = P;
          c.group = groups[i % 5];
          c.num_kv_heads = 1 + static_cast<int>(rng()() % 3);
          c.seq_lens = random_lens(1 + static_cast<int>(rng()() % 5), 1200, i % 2 == 0);
          c.layout = i % 3 == 0 ? KvLayout::hnd : KvLayout::nhd;
          c.scale_ptrs = i % 4 == 1;
          draw_scales(c);
          c.extra_pages = i % 2;
          out.push_back(c);
          ++i;
        }
  return out;
}

/// Each feature over a few shapes: large groups, fp8 output, windows, sinks, speculative
/// decoding, peaked softmaxes, forced and automatic splits, wide and empty batches.
inline std::vector<DecodeCase> feature_cases() {
  std::vector<DecodeCase> out;
  DecodeCase base;
  base.seq_lens = {300, 0, 1025, 64};
  for (int g : {32, 64}) {  // the large groups
    DecodeCase c = base;
    c.group = g;
    c.num_kv_heads = 1;
    out.push_back(c);
  }
  for (DType in : {DType::fp16, DType::bf16}) {  // fp8 output
    DecodeCase c = base;
    c.input = in;
    c.kv = c.output = DType::fp8;
    c.kv_scale = 0.3f;
    c.rcp_out_scale = 4.f;
    c.scale_ptrs = in == DType::bf16;
    out.push_back(c);
  }
  for (int w : {1, 100, 256, 5000}) {  // sliding windows, one wider than any sequence
    DecodeCase c = base;
    c.window = w;
    c.seq_lens = {2000, 0, 257, 1};
    c.layout = KvLayout::hnd;
    out.push_back(c);
  }
  {
    DecodeCase c = base;  // sinks and lse ([B, Hq, q_len]), with and without splits
    c.sinks = true;
    c.lse_layout = 2;
    out.push_back(c);
    c.num_splits = 5;
    out.push_back(c);
  }
  for (int q : {2, 4, 7}) {  // speculative decoding
    DecodeCase c = base;
    c.q_len = q;
    c.group = q == 7 ? 4 : 8;
    c.seq_lens = {q, 0, 500, 77};
    out.push_back(c);
  }
  {
    DecodeCase c = base;  // spec-dec with a window and fp8
    c.q_len = 3;
    c.window = 50;
    c.kv = DType::fp8;
    c.kv_scale = 0.25f;
    out.push_back(c);
  }
  for (int i = 0; i < 6; ++i) {  // speculative decoding over fp8 at 20-32 query rows (the hopper backend's
    DecodeCase c = base;         // 32-column CTAs at 128-key tiles), randomized
    c.kv = DType::fp8;
    c.input = rng()() % 2 ? DType::bf16 : DType::fp16;
    c.output = rng()() % 3 == 0 ? DType::fp8 : c.input;
    c.group = rng()() % 2 ? 4 : 8;
    c.q_len = c.group == 4 ? 5 + static_cast<int>(rng()() % 4) : 3 + static_cast<int>(rng()() % 2);
    c.page_size = 16 << (rng()() % 4);
    c.layout = rng()() % 2 ? KvLayout::hnd : KvLayout::nhd;
    c.window = rng()() % 3 == 0 ? 64 + static_cast<int>(rng()() % 400) : 0;
    c.num_splits = rng()() % 2 ? 0 : 2 + static_cast<int>(rng()() % 4);
    c.sinks = rng()() % 4 == 0;
    c.lse_layout = static_cast<int>(rng()() % 3);
    c.scale_ptrs = rng()() % 2 == 0;
    draw_scales(c);
    c.seq_lens = random_lens(1 + static_cast<int>(rng()() % 4), 2500, i % 2 == 0);
    fit_draft_lengths(c);
    out.push_back(c);
  }
  for (DType kv : {DType::bf16, DType::fp8}) {  // a peaked softmax: later tiles raise the running
    DecodeCase c = base;  // max far past any rescale slack (score std ~14 in log2 units)
    c.kv = kv;
    c.q_scale = 30.f;
    c.kv_scale = 0.5f;
    c.seq_lens = {3000, 700, 129, 64};
    out.push_back(c);
    c.num_splits = 3;
    out.push_back(c);
    c.q_len = 8;  // the same over 32-column speculative-decoding CTAs, a window on the bf16 one
    c.group = 4;
    c.num_splits = 0;
    c.window = kv == DType::bf16 ? 900 : 0;
    c.seq_lens = {2500, 8, 300};
    out.push_back(c);
  }
  for (int splits : {2, 3, 16}) {  // forced split-KV
    DecodeCase c = base;
    c.num_splits = splits;
    c.seq_lens = {3000, 0, 17, 1500};
    c.head_dim = splits == 16 ? 256 : 128;
    out.push_back(c);
  }
  {
    DecodeCase c;  // long single request, automatic splits
    c.seq_lens = {32768};
    c.num_kv_heads = 1;
    c.page_size = 16;
    out.push_back(c);
    c.kv = DType::fp8;  // and with fp8, HND
    c.layout = KvLayout::hnd;
    c.kv_scale = 0.5f;
    c.seq_lens = {20000};
    out.push_back(c);
  }
  {
    DecodeCase c;  // wide batch of ragged short requests, strided Q/out
    c.seq_lens = random_lens(64, 300, true);
    c.group = 4;
    c.num_kv_heads = 2;
    c.padded_q = true;
    out.push_back(c);
  }
  {
    DecodeCase c;  // every request empty, with splits
    c.seq_lens = {0, 0, 0};
    c.num_splits = 4;
    c.sinks = true;
    out.push_back(c);
  }
  return out;
}

}  // namespace xqajit::testing
