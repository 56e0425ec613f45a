#pragma once
// A finished softmax row's log-sum-exp, as engines merge attention pieces with it
// (FlashMLA's softmax_lse): every op that returns lse writes this value.

namespace xqajit {

__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A finished row's log-sum-exp in natural-log units from its (max in log2 units, sum
// relative to that max): +inf when nothing was seen.
__device__ __forceinline__ float row_lse(float row_max, float row_sum) {
  const float kInf = __int_as_float(0x7f800000);
  return row_max == -kInf ? kInf : (row_max + fast_log2(row_sum)) * 0.69314718055994531f;
}

}  // namespace xqajit
