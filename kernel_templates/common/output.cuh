#pragma once
// The decode kernel's final store: one 4-wide vector of one output row,
// normalised (softmax denominator, attention sink) and scaled, and the row's lse.

#include "common/memory.cuh"
#include "common/row_lse.cuh"
#include "common/types.cuh"
#include "xqajit/decode_args.h"

namespace xqajit {

// `row` is a CTA-relative (query token, head) row: token row / kGroup, Q head
// h * kGroup + row % kGroup. `sink(hq)`: Q head hq's attention sink, read only where
// args.sinks is set (the overload below reads it from there; a kernel may hand a copy).
template <int kGroup, bool kFp8Out, bool kFp16, class Sink>
__device__ __forceinline__ void store_output_vec(const XqajitDecodeArgs& args, int b, int h, int row, int d,
                                                 const float (&o)[4], float row_max, float row_sum,
                                                 float out_scale, Sink&& sink) {
  const int t = row / kGroup;
  const int hq = h * kGroup + row % kGroup;
  const float kInf = __int_as_float(0x7f800000);
  float scale = 0.f;  // no visible key (seq_len 0): zeros, never 0/0
  if (row_max != -kInf) {
    float denom = row_sum;
    if (args.sinks != nullptr) denom += exp2f(sink(hq) * kLog2e - row_max);
    scale = out_scale / denom;
  }
  // The row's log-sum-exp, once a row (every merge path stores through here): row_max is
  // in log2 units and row_sum is relative to it.
  if (args.lse != nullptr && d == 0)
    args.lse[(long long)b * args.lse_stride_batch + (long long)t * args.lse_stride_token +
             (long long)hq * args.lse_stride_head] = row_lse(row_max, row_sum);
  const long long off = (long long)b * args.o_stride_batch + (long long)t * args.o_stride_token +
                        (long long)hq * args.o_stride_head + d;
  if constexpr (kFp8Out) {
    const u32 lo = f32x2_to_e4m3x2(o[0] * scale, o[1] * scale);
    const u32 hi = f32x2_to_e4m3x2(o[2] * scale, o[3] * scale);
    *reinterpret_cast<u32*>(static_cast<unsigned char*>(args.out) + off) = lo | (hi << 16);
  } else {
    U32x2 v;
    v.x = pack_f32x2<kFp16>(o[0] * scale, o[1] * scale);
    v.y = pack_f32x2<kFp16>(o[2] * scale, o[3] * scale);
    *reinterpret_cast<U32x2*>(static_cast<u16*>(args.out) + off) = v;
  }
}

template <int kGroup, bool kFp8Out, bool kFp16>
__device__ __forceinline__ void store_output_vec(const XqajitDecodeArgs& args, int b, int h, int row, int d,
                                                 const float (&o)[4], float row_max, float row_sum,
                                                 float out_scale) {
  store_output_vec<kGroup, kFp8Out, kFp16>(args, b, h, row, d, o, row_max, row_sum, out_scale,
                                           [&](int hq) { return args.sinks[hq]; });
}

}  // namespace xqajit
