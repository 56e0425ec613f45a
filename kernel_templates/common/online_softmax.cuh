#pragma once
// Online softmax over score tiles held in the tensor-core accumulator layout
// (mma.sync m16n8 and wgmma m64nN share it per warp): each thread holds two
// rows, e = 0,1 of row quad_row and e = 2,3 of row quad_row + 8, spread over
// the 4 threads of a quad. Scores are in log2 units (the scale folded log2(e)),
// masked keys are -inf.

#include "common/types.cuh"

namespace xqajit {

// Lazy rescaling: the running max `old` takes the tile's `m` (>= old) only where it passes old
// by more than kLazyLog2 (log2 units; 0: always). -inf + k is -inf, so a row's first visible key
// always moves it.
template <int kLazyLog2>
__device__ __forceinline__ float lazy_max(float m, float old) {
  if constexpr (kLazyLog2 > 0)
    if (!(m > old + kLazyLog2)) m = old;
  return m;
}

// The default of online_softmax_tile's `combine`: the quad holds all of the tile's columns.
struct QuadHoldsTile {
  static constexpr bool kActive = false;
  __device__ void operator()(float (&)[2]) const {}
};

// Exponentiates `s` in place against the running max, updates (row_max,
// row_sum) and returns in `corr` the factor the running output must be
// multiplied by. A row that has seen only masked keys keeps max -inf and never
// computes -inf - -inf.
//
// Where other threads hold the rest of the tile's columns (the hopper MLA kernel
// splits S's keys between its two warpgroups), `combine` (kActive = true) folds
// their max into the quad's before it is used; row_sum then sums this thread's
// columns only, and the holders' sums add up at the end.
//
// kLazyLog2 > 0 (lazy rescaling): the running max moves only where the tile's exceeds it by
// more than kLazyLog2 (log2 units); otherwise it stays, corr is 1 (rescale_rows skips the
// rows) and this tile's exponentials reach up to 2^kLazyLog2. The sum and the output stay
// relative to the same max, so the result is the same softmax; only callers whose P tolerates
// values above 1 (bf16 P: any magnitude at the same relative precision) may ask for it.
template <int kLazyLog2 = 0, int kN, class Combine = QuadHoldsTile>
__device__ __forceinline__ void online_softmax_tile(float (&s)[kN][4], float (&row_max)[2], float (&row_sum)[2],
                                                    float (&corr)[2], const Combine& combine = {}) {
  const float kInf = __int_as_float(0x7f800000);
  float tile_max[2] = {row_max[0], row_max[1]};
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    tile_max[0] = fmaxf(tile_max[0], fmaxf(s[n][0], s[n][1]));
    tile_max[1] = fmaxf(tile_max[1], fmaxf(s[n][2], s[n][3]));
  }
  float base[2], tile_sum[2] = {0.f, 0.f};
  auto settle = [&](int half) {
    tile_max[half] = lazy_max<kLazyLog2>(tile_max[half], row_max[half]);
    base[half] = tile_max[half] == -kInf ? 0.f : tile_max[half];
    corr[half] = fast_exp2(row_max[half] - base[half]);
    row_max[half] = tile_max[half];
  };
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 1));
    tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 2));
    if constexpr (!Combine::kActive) settle(half);
  }
  if constexpr (Combine::kActive) {
    combine(tile_max);
    settle(0);
    settle(1);
  }
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = fast_exp2(s[n][e] - base[e >> 1]);
      tile_sum[e >> 1] += s[n][e];
    }
  }
  row_sum[0] = row_sum[0] * corr[0] + tile_sum[0];
  row_sum[1] = row_sum[1] * corr[1] + tile_sum[1];
}

// acc *= corr per row. Once the running max settles corr is exactly 1, so the
// multiply is skipped (warp-uniform branch).
template <int kN>
__device__ __forceinline__ void rescale_rows(float (&acc)[kN][4], const float (&corr)[2]) {
  if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      acc[i][0] *= corr[0]; acc[i][1] *= corr[0];
      acc[i][2] *= corr[1]; acc[i][3] *= corr[1];
    }
  }
}

// Sums a row statistic over the 4 threads of a quad (the row's owners).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

}  // namespace xqajit
