#pragma once
// The CTA's query rows, shared by the GQA kernels: loaded from global memory
// into registers right after griddepcontrol, before the page-table walk, so
// their round trip overlaps the sequence length's and the table's instead of
// following the first tiles' copies; stored to shared memory (prescaled where
// an fp8 cache takes a bf16 Q as fp16) once those copies are issued. H200, B=1
// L=8192 (docs/KERNEL_NOTES.md h9): 14.2 -> 13.4 us bf16, 11.9 -> 11.1 fp8.
// Where a thread would hold more than two 16-byte chunks (speculative decoding's
// wider row blocks) the registers cost more than the overlap buys: the load
// stays where the store is (kEarly false).

#include "common/types.cuh"
#include "xqajit/decode_args.h"

namespace xqajit {

template <int kRowsPerCta, int kHeadDim, int kThreads>
struct QRows {
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks of a row
  static constexpr int kCount = kRowsPerCta * kChunks;
  static constexpr int kSlots = (kCount + kThreads - 1) / kThreads;
  static constexpr bool kEarly = kSlots <= 2;
  U32x4 v[kSlots];

  // Loads chunk `chunk` of row `row0 + r` (rows past `rows` are zeros) for r < kRowsPerCta,
  // `gather(q_row, chunk)` returning it from the row's first element.
  template <int kGroup, typename Gather>
  __device__ __forceinline__ void load(const XqajitDecodeArgs& args, int b, int h, int row0, int rows,
                                       Gather&& gather) {
    const u16* const q = static_cast<const u16*>(args.q);
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int i = (int)threadIdx.x + j * kThreads;
      v[j] = U32x4{0, 0, 0, 0};
      if (kSlots * kThreads != kCount && i >= kCount) break;
      const int row = row0 + i / kChunks;
      if (row < rows) {
        const int t = row / kGroup, hq = h * kGroup + row % kGroup;
        v[j] = gather(q + (long long)b * args.q_stride_batch + (long long)t * args.q_stride_token +
                          (long long)hq * args.q_stride_head,
                      i % kChunks);
      }
    }
  }

  // Calls put(r, chunk, value) for each loaded chunk; with `prescale`, a bf16 value
  // becomes fp16 times `scale`, clamped to fp16's range (no inf).
  template <typename Put>
  __device__ __forceinline__ void store(bool prescale, float scale, Put&& put) const {
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int i = (int)threadIdx.x + j * kThreads;
      if (kSlots * kThreads != kCount && i >= kCount) break;
      U32x4 x = v[j];
      if (prescale) {
        u32* w = &x.x;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          float lo, hi;
          unpack_x2<false>(w[k], lo, hi);
          lo = fminf(fmaxf(lo * scale, -65504.f), 65504.f);
          hi = fminf(fmaxf(hi * scale, -65504.f), 65504.f);
          w[k] = pack_f32x2<true>(lo, hi);
        }
      }
      put(i / kChunks, i % kChunks, x);
    }
  }
};

}  // namespace xqajit
