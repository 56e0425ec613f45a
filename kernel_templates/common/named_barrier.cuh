#pragma once
// Named CTA barriers (bar.sync / bar.arrive with an id and a thread count): how
// two warpgroups hand work to each other without stopping the whole CTA. A
// producer arrives (does not wait), a consumer syncs (waits for count threads:
// the producers' arrivals plus its own). Id 0 is __syncthreads'; each kernel
// names the ids it uses.

namespace xqajit {

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace xqajit
