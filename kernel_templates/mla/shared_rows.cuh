#pragma once
// MLA pieces both backends use: which keys a (query token, head) row sees, and
// the final bf16 store of one output row segment.
//
// Rows of a request are token-major: row r is query token r / H, head r % H.
// The last q_len keys are the drafts; without a mask, token t sees drafts 0..t.

#include "common/memory.cuh"
#include "common/row_lse.cuh"
#include "common/types.cuh"
#include "xqajit/mla_args.h"

namespace xqajit {
namespace mla {

// Row r of a CTA of row block rb is the request's row rb * kRowStride + r: kRowStride is
// the CTA's kR rows, or fewer where the rest of its tile is padding (hopper sparse: a query
// token's heads a CTA). A row is loaded and stored only if it is one of the CTA's and exists.
template <int kR, int kRowStride, int kRows>
__device__ __forceinline__ bool real_row(int r, int row) {
  return (kRowStride == kR || r < kRowStride) && row < kRows;
}

// Per-row visibility of draft keys: a bit mask over the last q_len keys.
__device__ __forceinline__ unsigned draft_bits(const XqajitMlaArgs& args, int b, int t, int q_len) {
  if (args.spec_mask != nullptr) return args.spec_mask[(long long)b * q_len + t];
  return (2u << t) - 1u;  // causal: drafts 0..t
}

__device__ __forceinline__ bool key_visible(int key, int end, int draft_begin, unsigned bits) {
  return key < end && (key < draft_begin || ((bits >> (key - draft_begin)) & 1u));
}

// Stores `n` (even) consecutive output values of row `row` starting at dim `d`,
// scaled by `scale` (kv_scale / sum, or 0 for a row that saw no key), as bf16.
template <int kHeads>
__device__ __forceinline__ void store_out_pair(const XqajitMlaArgs& args, int b, int row, int d, float o0, float o1,
                                               float scale) {
  const int t = row / kHeads, h = row % kHeads;
  u16* const out = static_cast<u16*>(args.out) + (long long)b * args.o_stride_batch +
                   (long long)t * args.o_stride_token + (long long)h * args.o_stride_head + d;
  *reinterpret_cast<u32*>(out) = pack_f32x2<false>(o0 * scale, o1 * scale);
}

// 16 bytes (8 bf16, `chunk` of the row's 64) of request b's output row `row`.
template <int kHeads>
__device__ __forceinline__ void store_out_chunk(const XqajitMlaArgs& args, int b, int row, int chunk, const U32x4& v) {
  const int t = row / kHeads, h = row % kHeads;
  u16* const out = static_cast<u16*>(args.out) + (long long)b * args.o_stride_batch +
                   (long long)t * args.o_stride_token + (long long)h * args.o_stride_head + chunk * 8;
  *reinterpret_cast<U32x4*>(out) = v;
}

// The output scale of a finished row: kv_scale / sum, zeros when nothing was seen.
__device__ __forceinline__ float row_out_scale(float row_max, float row_sum, float kv_scale) {
  return row_max == -__int_as_float(0x7f800000) ? 0.f : kv_scale / row_sum;
}

// The optional outputs of a finished row (args.lse, args.attn_sink), shared by every
// epilogue: writes the row's lse (when `store_lse`) and returns `scale` times the sink's
// factor exp(lse) / (exp(lse) + exp(sink)) = 1 / (1 + exp(sink - lse)). A row that saw
// nothing keeps its scale of 0 (an +inf sink against an +inf lse must not make NaN).
// `sink(h)`: head h's sink, called only where args.attn_sink is set (the overload below reads
// it there; the merge launches hand one asked for early, merged_row_finish).
template <int kHeads, class Sink>
__device__ __forceinline__ float row_extras(const XqajitMlaArgs& args, int b, int row, float row_max, float row_sum,
                                            float scale, bool store_lse, Sink&& sink) {
  if (args.lse == nullptr && args.attn_sink == nullptr) return scale;
  const int t = row / kHeads, h = row % kHeads;
  const float lse = row_lse(row_max, row_sum);
  if (store_lse && args.lse != nullptr)
    args.lse[(long long)b * args.lse_stride_batch + (long long)t * args.lse_stride_token +
             (long long)h * args.lse_stride_head] = lse;
  if (args.attn_sink == nullptr || row_max == -__int_as_float(0x7f800000)) return scale;
  return scale / (1.f + fast_exp2((sink(h) - lse) * kLog2e));
}

template <int kHeads>
__device__ __forceinline__ float row_extras(const XqajitMlaArgs& args, int b, int row, float row_max, float row_sum,
                                            float scale, bool store_lse) {
  return row_extras<kHeads>(args, b, row, row_max, row_sum, scale, store_lse,
                            [&](int h) { return args.attn_sink[h]; });
}

}  // namespace mla
}  // namespace xqajit
