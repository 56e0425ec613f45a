#pragma once
// Element types and conversions, written with inline PTX so the templates need
// no toolkit headers (<cuda_fp16.h> & co. would cost NVRTC time and tie the
// embedded templates to a toolkit layout). 16-bit values travel as raw bits.

namespace xqajit {

typedef unsigned short u16;
typedef unsigned int u32;

constexpr float kLog2e = 1.4426950408889634f;

// 2^x on the special-function unit, subnormal results flushed to 0 (exp2f adds
// range fix-ups around the same instruction). 2^-inf = +0, so masked keys vanish.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two fp32 -> packed 16-bit pair (lo in the low half), round to nearest.
template <bool kFp16>
__device__ __forceinline__ u32 pack_f32x2(float lo, float hi) {
  u32 r;
  if constexpr (kFp16) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// Packed 16-bit pair -> two fp32.
template <bool kFp16>
__device__ __forceinline__ void unpack_x2(u32 v, float& lo, float& hi) {
  if constexpr (kFp16) {
    u16 l = (u16)(v & 0xffffu), h = (u16)(v >> 16);
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(l));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(h));
  } else {
    lo = __uint_as_float(v << 16);
    hi = __uint_as_float(v & 0xffff0000u);
  }
}

// Two e4m3 bytes (low 16 bits of v) -> packed 16-bit pair. e4m3 is exact in
// both fp16 and bf16, so the dequantization itself loses nothing.
template <bool kFp16>
__device__ __forceinline__ u32 e4m3x2_to_x2(u16 v) {
  u32 h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(v));
  if constexpr (kFp16) {
    return h2;
  } else {
    float lo, hi;
    unpack_x2<true>(h2, lo, hi);
    return pack_f32x2<false>(lo, hi);
  }
}

// Two fp32 -> two e4m3 bytes (lo in the low byte), saturating to +-448.
__device__ __forceinline__ u16 f32x2_to_e4m3x2(float lo, float hi) {
  u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace xqajit
