#pragma once
// Moving registers between the warpgroups of a warp-specialized CTA (sm_90a
// setmaxnreg): a kernel launched with N threads gets 64K / N registers a thread;
// a producer warpgroup that needs few gives some back, and the math warpgroups
// take them. Every thread of a warpgroup executes the same call (.sync.aligned);
// counts are multiples of 8 in [24, 256]. ptxas allocates the code after each call
// with its count.

namespace xqajit {

template <int kRegs>
__device__ __forceinline__ void warpgroup_release_registers() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void warpgroup_claim_registers() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace xqajit
