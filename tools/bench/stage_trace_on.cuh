// Included inside namespace xqajit (no guard or namespace of its own).
// The active StageTrace, included by kernel_templates/common/stage_trace.cuh
// where a copy of the templates holds this file as common/stage_trace_on.cuh
// (tools/bench/make_breakdown_variants.sh, tpl_diag_trace). Thread 0
// of each CTA sums clock64() cycles per stage; on the 41st launch of the process
// (counted in CTAs: warm, and graph replays are launches too) the CTAs of KV
// head 0 with split < 2 at batch 0 and at batch B/2 print one line each:
//   xqtrace grid=X,Y,Z cta=x,z tiles=T ns=<globaltimer span> <stage>=<cycles> ...
// printf and the clock reads cost registers and issue slots: compare stages
// within one trace, not a traced kernel's time with an untraced one.

__device__ unsigned g_xqajit_trace_ctas;

__device__ __forceinline__ long long trace_clock() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned long long trace_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct StageTrace {
  long long last;
  long long acc[kTraceStages];
  unsigned long long start_ns;
  __device__ __forceinline__ StageTrace() : last(trace_clock()), start_ns(trace_ns()) {
#pragma unroll
    for (int s = 0; s < kTraceStages; ++s) acc[s] = 0;
  }
  __device__ __forceinline__ void mark(TraceStage s) {
    const long long now = trace_clock();
    acc[s] += now - last;
    last = now;
  }
  __device__ __forceinline__ void finish(int tiles) {
    if (threadIdx.x != 0) return;
    const unsigned long long end_ns = trace_ns();
    const unsigned ctas = gridDim.x * gridDim.y * gridDim.z;
    const unsigned n = atomicAdd(&g_xqajit_trace_ctas, 1u);
    if (n / ctas != 40 || blockIdx.y != 0 || blockIdx.x >= 2) return;
    if (blockIdx.z != 0 && blockIdx.z != gridDim.z / 2) return;
    printf("xqtrace grid=%u,%u,%u cta=%u,%u tiles=%d ns=%llu pro=%lld wait=%lld issue=%lld kfrag=%lld smma=%lld "
           "max=%lld p=%lld vfrag=%lld omma=%lld epi=%lld store=%lld arrive=%lld merge=%lld\n",
           gridDim.x, gridDim.y, gridDim.z, blockIdx.x, blockIdx.z, tiles, end_ns - start_ns, acc[0], acc[1],
           acc[2], acc[3], acc[4], acc[5], acc[6], acc[7], acc[8], acc[9], acc[10], acc[11], acc[12]);
  }
};

