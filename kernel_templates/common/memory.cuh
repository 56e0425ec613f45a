#pragma once
// Plain vector loads/stores, byte stores to shared memory, and L2-coherent accesses for the
// split-KV workspace.

#include "common/types.cuh"

namespace xqajit {

struct alignas(16) U32x4 {
  u32 x, y, z, w;
};
struct alignas(8) U32x2 {
  u32 x, y;
};
struct alignas(16) F32x4 {
  float x, y, z, w;
};

// Read through L2 only: partial results written by other CTAs of this launch
// must not come from a stale L1 line.
__device__ __forceinline__ F32x4 load_cg(const float* p) {
  F32x4 v;
  asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}
// Four bf16 values read through L2 only (the hopper MLA backend's bf16 partial rows, m70): as
// loaded (two words), or widened.
__device__ __forceinline__ void load_cg_u32x2(const void* p, u32& lo, u32& hi) {
  asm volatile("ld.global.cg.v2.u32 {%0,%1}, [%2];" : "=r"(lo), "=r"(hi) : "l"(p));
}
__device__ __forceinline__ F32x4 widen_bf16x4(u32 lo, u32 hi) {
  F32x4 v;
  unpack_x2<false>(lo, v.x, v.y);
  unpack_x2<false>(hi, v.z, v.w);
  return v;
}
__device__ __forceinline__ F32x4 load_cg_bf16x4(const u16* p) {
  u32 lo, hi;
  load_cg_u32x2(p, lo, hi);
  return widen_bf16x4(lo, hi);
}
// One 32-bit word to shared memory by its shared-window address (the narrow QG path's P^T words).
__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v));
}

// Two adjacent floats (8-byte aligned) through L2 only: a split's (max, sum).
__device__ __forceinline__ void load_cg_f32x2(const float* p, float& x, float& y) {
  asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];" : "=f"(x), "=f"(y) : "l"(p));
}

}  // namespace xqajit
