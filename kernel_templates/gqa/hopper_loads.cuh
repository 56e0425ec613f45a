#pragma once
// The hopper GQA kernel's K/V traffic into shared memory: one 16-byte chunk of a
// cached row into the cp.async pipeline, in the layout its wgmmas (16-bit cache) or
// its fp8 fragment reads expect (gqa/hopper_layout.cuh). The fp8 fragment builds
// stay in the kernel's loop: as functions they compile to the same code but not to
// the same PTX text (register numbering), and the restructure kept PTX byte-identical.

#include "common/fp8.cuh"
#include "common/mma.cuh"
#include "common/types.cuh"
#include "gqa/hopper_config.cuh"
#include "gqa/hopper_layout.cuh"

namespace xqajit {
namespace gqa_hopper {

// One chunk of key row `tok` (K and V alike). 16-bit cache: straight into the
// wgmma layout. fp8: raw [key][D] bytes, chunks swizzled for the fragment reads
// (no conversion pass).
__device__ __forceinline__ void copy_kv_chunk(u32 k_dst, u32 v_dst, int tok, int chunk, const unsigned char* k_src,
                                              const unsigned char* v_src, bool valid) {
  constexpr int kRawRowBytes = kHeadDim * kCacheBytes;  // local: a namespace constant would enter the PTX
  if constexpr (kFp8Cache) {  // raw rows, chunks swizzled for the fragment reads
    cp_async_16(k_dst + (u32)(tok * kRawRowBytes + ((chunk ^ fp8_k_chunk_swizzle<kRawChunks>(tok)) << 4)),
                k_src, valid);
    cp_async_16(v_dst + (u32)(tok * kRawRowBytes + ((chunk ^ fp8_v_swizzle(tok)) << 4)),
                v_src, valid);
  } else {
    const u32 off = atom_off(tok, chunk, kTile);
    cp_async_16(k_dst + off, k_src, valid);
    cp_async_16(v_dst + off, v_src, valid);
  }
}

}  // namespace gqa_hopper
}  // namespace xqajit
