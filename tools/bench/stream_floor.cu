// stream_floor: how fast a grid of a given shape can only *read* a decode's KV bytes
// into shared memory -- the floor under any split-KV decode kernel of that grid,
// before its math and its merge (docs/KERNEL_NOTES.md, session 14).
//
// Each CTA streams an equal, contiguous share of the bytes through a ring of
// `stages` slots of `stage_kb` KB per warpgroup (a CTA of 256 threads runs two
// independent warpgroups, each with its own ring and half the share), touching one
// word per thread per slot so nothing is dead. Two loaders:
//   cpasync -- every thread issues 16-byte cp.async (the GQA kernels' loader);
//   bulk    -- one thread per warpgroup issues 16 KB cp.async.bulk copies that
//              complete on an mbarrier (the TMA engine generates the requests).
// Timing as bench_decode: a CUDA graph of back-to-back launches rotating among
// buffers that together exceed L2, median per-launch microseconds of 10 replays,
// with programmatic dependent launch (each grid waits, then lets the next launch)
// and without.
//
// Build on the dev host, run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernel_templates -o stream_floor tools/bench/stream_floor.cu
//   ./stream_floor            # prints one row per (bytes, grid, loader)
#include "common/tma.cuh"  // the kernels' mbarrier helpers
#include "cuda_check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/mma.cuh"  // the GQA kernels' cp.async and shared-address helpers
#include "common/pdl.cuh"

using xqajit::cp_async_16;
using xqajit::cp_async_commit;
using xqajit::cp_async_wait;
using xqajit::pdl_launch_dependents;
using xqajit::pdl_wait;
using xqajit::smem_addr;

namespace {

constexpr int kGroupThreads = 128;  // one warpgroup: the unit that owns a ring
constexpr int kBulkBytes = 16 * 1024;  // one HND page of one head (64 tokens x 256 B)

__device__ __forceinline__ void group_sync(int group) {
  asm volatile("bar.sync %0, %1;" ::"r"(group + 1), "r"(kGroupThreads) : "memory");
}
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// The bulk loader: thread 0 of each warpgroup issues its slots as 16 KB bulk copies that
// complete on the slot's mbarrier; every thread waits on the phase, then reads a word.
__global__ void stream_bulk(const unsigned char* src, long long group_bytes, int stages, int slot_bytes,
                            unsigned* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) unsigned long long bars[2][16];  // [warpgroup][stage]
  const int group = threadIdx.x / kGroupThreads, t = threadIdx.x % kGroupThreads;
  const int groups = blockDim.x / kGroupThreads;
  unsigned char* const ring = smem + (size_t)group * stages * slot_bytes;
  const unsigned char* const base = src + ((long long)blockIdx.x * groups + group) * group_bytes;
  const int slots = (int)(group_bytes / slot_bytes);
  if (t == 0)
    for (int s = 0; s < stages; ++s) xqajit::mbarrier_init(smem_addr(&bars[group][s]), 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  pdl_wait();
  pdl_launch_dependents();
  __syncthreads();
  auto issue = [&](int slot) {
    if (t != 0) return;
    const int s = slot % stages;
    const unsigned char* from = base + (long long)slot * slot_bytes;
    const uint32_t to = smem_addr(ring + (size_t)s * slot_bytes), bar = smem_addr(&bars[group][s]);
    xqajit::mbarrier_arrive_expect_tx(bar, slot_bytes);
    for (int off = 0; off < slot_bytes; off += kBulkBytes) bulk_copy(to + off, from + off, kBulkBytes, bar);
  };
  unsigned acc = 0;
  for (int s = 0; s < stages - 1 && s < slots; ++s) issue(s);
  for (int it = 0; it < slots; ++it) {
    xqajit::mbarrier_wait_parity(smem_addr(&bars[group][it % stages]), (it / stages) & 1);
    group_sync(group);  // slot it - 1 is consumed by every thread: its ring slot is free
    if (it + stages - 1 < slots) issue(it + stages - 1);
    acc ^= reinterpret_cast<const unsigned*>(ring + (size_t)(it % stages) * slot_bytes)[t * 7];
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // never true on random data: keeps the reads
}

// The cp.async loader (the GQA kernels'): every thread issues 16-byte copies; slot `it`
// is complete when at most kStages - 2 newer groups are pending (the tail commits empty
// groups to keep the count).
template <int kStages>
__global__ void stream_cpasync(const unsigned char* src, long long group_bytes, int slot_bytes, unsigned* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const int group = threadIdx.x / kGroupThreads, t = threadIdx.x % kGroupThreads;
  const int groups = blockDim.x / kGroupThreads;
  unsigned char* const ring = smem + (size_t)group * kStages * slot_bytes;
  const unsigned char* const base = src + ((long long)blockIdx.x * groups + group) * group_bytes;
  const int slots = (int)(group_bytes / slot_bytes);
  pdl_wait();
  pdl_launch_dependents();
  auto issue = [&](int slot) {
    const unsigned char* from = base + (long long)slot * slot_bytes;
    const uint32_t to = smem_addr(ring + (size_t)(slot % kStages) * slot_bytes);
    for (int off = t * 16; off < slot_bytes; off += kGroupThreads * 16) cp_async_16(to + off, from + off, true);
  };
  unsigned acc = 0;
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slots) issue(s);
    cp_async_commit();
  }
  for (int it = 0; it < slots; ++it) {
    cp_async_wait<kStages - 2>();
    group_sync(group);
    if (it + kStages - 1 < slots) issue(it + kStages - 1);
    cp_async_commit();
    acc ^= reinterpret_cast<const unsigned*>(ring + (size_t)(it % kStages) * slot_bytes)[t * 7];
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

struct Row {
  const char* what;
  long long bytes;
  int ctas, threads, stages, slot_kb;
  bool bulk;
};

void launch(cudaStream_t stream, const Row& r, const unsigned char* src, unsigned* sink, bool pdl) {
  const int groups = r.threads / kGroupThreads;
  const long long group_bytes = r.bytes / ((long long)r.ctas * groups);
  const int slot = r.slot_kb * 1024;
  const size_t smem = (size_t)groups * r.stages * slot;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(r.ctas);
  cfg.blockDim = dim3(r.threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (r.bulk) {
    CHECK(cudaLaunchKernelEx(&cfg, stream_bulk, src, group_bytes, r.stages, slot, sink));
  } else {
    switch (r.stages) {
      case 3: CHECK(cudaLaunchKernelEx(&cfg, stream_cpasync<3>, src, group_bytes, slot, sink)); break;
      case 4: CHECK(cudaLaunchKernelEx(&cfg, stream_cpasync<4>, src, group_bytes, slot, sink)); break;
      case 6: CHECK(cudaLaunchKernelEx(&cfg, stream_cpasync<6>, src, group_bytes, slot, sink)); break;
      default: std::fprintf(stderr, "cp.async rows take 3, 4 or 6 stages\n"); std::exit(1);
    }
  }
}

float graph_us(cudaStream_t stream, const Row& r, const std::vector<unsigned char*>& bufs, unsigned* sink,
               bool pdl) {
  constexpr int kLaunches = 40;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kLaunches; ++i) launch(stream, r, bufs[i % bufs.size()], sink, pdl);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> us;
  for (int rep = 0; rep < 10; ++rep) {
    CHECK(cudaEventRecord(a, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(1000.f * ms / kLaunches);
  }
  CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  CHECK(cudaFuncSetAttribute(stream_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CHECK(cudaFuncSetAttribute(stream_cpasync<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CHECK(cudaFuncSetAttribute(stream_cpasync<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CHECK(cudaFuncSetAttribute(stream_cpasync<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));

  const long long bf16_8k = 8192LL * 8 * 128 * 2 * 2;  // B=1 L=8192 Hk 8 D 128, K+V
  const long long fp8_8k = bf16_8k / 2;
  const long long bf16_64k = bf16_8k * 8;
  // The decode kernels' grids at B=1 (16 splits x 8 heads = 128 CTAs, 3 x 32 KB each)
  // and the fewer-CTA grids a cluster merge of 8 splits would need (64 CTAs).
  const std::vector<Row> rows = {
      {"launch only: 128 CTAs, no bytes", 0, 128, 128, 3, 32, false},
      {"bf16 L=8192 today: 128 CTAs, 3x32KB cp.async", bf16_8k, 128, 128, 3, 32, false},
      {"bf16 L=8192 256 CTAs (2/SM), 3x32KB cp.async", bf16_8k, 256, 128, 3, 32, false},
      {"bf16 L=8192 128 CTAs, 6x32KB cp.async", bf16_8k, 128, 128, 6, 32, false},
      {"bf16 L=8192 128 CTAs, 6x32KB bulk", bf16_8k, 128, 128, 6, 32, true},
      {"bf16 L=8192 64 CTAs, 6x32KB cp.async", bf16_8k, 64, 128, 6, 32, false},
      {"bf16 L=8192 64 CTAs x2 WG, 3x32KB each, cp.async", bf16_8k, 64, 256, 3, 32, false},
      {"bf16 L=8192 64 CTAs, 6x32KB bulk", bf16_8k, 64, 128, 6, 32, true},
      {"bf16 L=8192 64 CTAs x2 WG, 3x32KB each, bulk", bf16_8k, 64, 256, 3, 32, true},
      {"fp8 L=8192 128 CTAs, 3x32KB cp.async", fp8_8k, 128, 128, 3, 32, false},
      {"fp8 L=8192 256 CTAs (2/SM), 3x32KB cp.async", fp8_8k, 256, 128, 3, 32, false},
      {"fp8 L=8192 64 CTAs x2 WG, 3x32KB each, cp.async", fp8_8k, 64, 256, 3, 32, false},
      {"fp8 L=8192 64 CTAs, 6x32KB bulk", fp8_8k, 64, 128, 6, 32, true},
      {"bf16 L=65536 256 CTAs, 3x32KB cp.async", bf16_64k, 256, 128, 3, 32, false},
      // B=16 L=4096, 2 splits x 128 (request, head) pairs; bf16's bytes are B=1 L=65536's.
      {"fp8 B=16 L=4096: 256 CTAs (2/SM), 3x32KB cp.async", bf16_64k / 2, 256, 128, 3, 32, false},
      {"bf16 L=65536 128 CTAs, 6x32KB bulk", bf16_64k, 128, 128, 6, 32, true},
  };
  long long max_bytes = 0;
  for (const Row& r : rows) max_bytes = std::max(max_bytes, r.bytes);
  // Buffers rotated so together they exceed L2 (as bench_decode); random bytes.
  const int rotate = (int)std::clamp<long long>((512LL << 20) / max_bytes + 1, 2, 8);
  std::vector<unsigned char*> bufs(rotate);
  std::vector<unsigned> host(max_bytes / 4);
  uint32_t x = 12345;
  for (auto& w : host) w = (x = x * 1664525u + 1013904223u);
  for (auto& b : bufs) {
    CHECK(cudaMalloc(&b, max_bytes));
    CHECK(cudaMemcpy(b, host.data(), max_bytes, cudaMemcpyHostToDevice));
  }
  unsigned* sink;
  CHECK(cudaMalloc(&sink, 4096 * sizeof(unsigned)));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  // Copy bandwidth (read + write), as bench_decode counts it.
  float copy_ms = 0;
  {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaMemcpyAsync(bufs[1], bufs[0], max_bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaEventRecord(a, stream));
    for (int i = 0; i < 10; ++i) CHECK(cudaMemcpyAsync(bufs[1], bufs[0], max_bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&copy_ms, a, b));
  }
  const double copy_gbps = 2.0 * max_bytes * 10 / (copy_ms * 1e-3) / 1e9;
  std::printf("device: %s (%d SMs), copy bandwidth (read+write): %.0f GB/s\n", prop.name,
              prop.multiProcessorCount, copy_gbps);
  std::printf("%-52s %10s %8s %8s %8s\n", "grid (read only)", "MB", "us", "us_nopdl", "%copy");
  for (const Row& r : rows) {
    const float us = graph_us(stream, r, bufs, sink, true);
    const float us_plain = graph_us(stream, r, bufs, sink, false);
    // Bytes read: whole slots of each warpgroup's share (a share that is not a multiple of a
    // slot reads a little less than r.bytes).
    const int groups = r.threads / kGroupThreads;
    const long long slot = r.slot_kb * 1024LL, share = r.ctas ? r.bytes / ((long long)r.ctas * groups) : 0;
    const long long read = share / slot * slot * r.ctas * groups;
    const double gbps = read / (us * 1e-6) / 1e9;  // 0 for the launch-only row
    std::printf("%-52s %10.1f %8.2f %8.2f %7.1f%%\n", r.what, read / 1e6, us, us_plain, 100.0 * gbps / copy_gbps);
    std::fflush(stdout);
  }
  return 0;
}
