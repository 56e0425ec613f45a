// wgmma_rate: what one SM's tensor cores give a chain of m64nNk16 bf16 wgmmas (both
// operands from shared memory, as the hopper GQA kernel's S^T and O^T) at N = 8..64,
// with 1, 2 or 4 warpgroups per SM, each running its own dependent chain -- is the
// decode kernel's per-tile chain bound by latency (more warpgroups per SM would help)
// or by the tensor pipe's rate per instruction (they would not)? docs/KERNEL_NOTES.md,
// session 14.
//
// Each warpgroup repeats: fence, 8 wgmmas into one accumulator (one 64-key tile's
// S^T at D=128), commit, wait -- the kernel's pattern; SS rows (bf16, both operands from
// shared memory: the 16-bit cache) and RS rows (fp16 A from registers: the fp8 cache). One CTA of 128 threads per
// warpgroup, 132 x W CTAs, shared memory sized so W fit per SM.
//
// Build on the dev host, run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernel_templates --expt-relaxed-constexpr -o wgmma_rate tools/bench/wgmma_rate.cu
#include "cuda_check.cuh"

#include <cstdio>
#include <cstdlib>

#include "common/mma.cuh"
#include "common/wgmma.cuh"

using namespace xqajit;

constexpr int kSteps = 8;  // wgmmas per commit group: one tile's S^T (D = 128)

// kRs: A from registers (fp16, the fp8 path's RS form: only B is read from shared memory).
template <int kN, bool kRs>
__global__ void __launch_bounds__(128) chain(int iters, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  // A: 64 x 128 bf16 (16 KB), B: kN x 128 (kN * 256 B), both in 128-byte-swizzled atoms.
  for (int i = threadIdx.x; i < (16384 + kN * 256) / 4; i += 128)
    reinterpret_cast<unsigned*>(smem)[i] = 0x3c003c00u ^ (i * 2654435761u & 0x00ff00ffu);
  fence_proxy_async();
  __syncthreads();
  const u32 a = smem_addr(smem), b = a + 16384;
  u32 frag[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) frag[i] = 0x3c003c00u ^ ((threadIdx.x * 4 + i) * 2654435761u & 0x00ff00ffu);
  float acc[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.f;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      const u64 da = wgmma_desc_sw128(a + (kk >> 2) * 64 * 128 + (kk & 3) * 32, 16, 1024);
      const u64 db = wgmma_desc_sw128(b + (kk >> 2) * kN * 128 + (kk & 3) * 32, 16, 1024);
      if constexpr (kRs) {
        WgmmaRSF16<kN>::run(acc, frag, db);
      } else {
        WgmmaSS<kN, false, 0>::run(acc, da, db, 1);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(acc);
  }
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) s += acc[i];
  if (threadIdx.x == 0) sink[blockIdx.x * 2] = (float)(t1 - t0);
  if (s == 1234.5f) sink[blockIdx.x * 2 + 1] = s;  // keeps the chain
}

template <int kN, bool kRs>
void row(int per_sm, int sms, float* sink) {
  const int smem_per_cta = 227 * 1024 / per_sm - 1024;  // exactly per_sm CTAs fit
  CHECK(cudaFuncSetAttribute(chain<kN, kRs>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_per_cta));
  const int iters = 4000;
  chain<kN, kRs><<<sms * per_sm, 128, smem_per_cta>>>(100, sink);
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventRecord(e0));
  chain<kN, kRs><<<sms * per_sm, 128, smem_per_cta>>>(iters, sink);
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  CHECK(cudaGetLastError());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  float cycles = 0;
  CHECK(cudaMemcpy(&cycles, sink, sizeof(float), cudaMemcpyDeviceToHost));
  const double per_wgmma_cycles = cycles / (double(iters) * kSteps);  // one warpgroup's chain
  const double wgmma_per_sm_us = double(iters) * kSteps * per_sm / (ms * 1e3);
  const double tflops = double(iters) * kSteps * per_sm * sms * 64.0 * kN * 16 * 2 / (ms * 1e-3) / 1e12;
  std::printf("%s N=%-3d warpgroups/SM %d: %7.1f cycles per wgmma in a chain, %7.1f wgmma per SM per us, %7.1f TFLOP/s\n",
              kRs ? "RS" : "SS", kN, per_sm, per_wgmma_cycles, wgmma_per_sm_us, tflops);
  std::fflush(stdout);
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  float* sink;
  CHECK(cudaMalloc(&sink, 8192 * sizeof(float)));
  const int sms = prop.multiProcessorCount;
  for (int per_sm : {1, 2, 4}) {
    row<8, false>(per_sm, sms, sink);
    row<16, false>(per_sm, sms, sink);
    row<32, false>(per_sm, sms, sink);
    row<64, false>(per_sm, sms, sink);
    row<8, true>(per_sm, sms, sink);
    row<32, true>(per_sm, sms, sink);
  }
  return 0;
}
