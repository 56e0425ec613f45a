#pragma once
// Per-stage time markers of a kernel's dependent chain. The kernels ship with
// the no-op StageTrace below: every call inlines to nothing.
// tools/bench/make_breakdown_variants.sh (its tpl_diag_trace) drops
// tools/bench/stage_trace_on.cuh into a copy of the templates (common/), whose
// StageTrace sums clock64() per stage and prints the sums of a few CTAs once per
// process: where one CTA's time goes (docs/KERNEL_NOTES.md), without a profiler.

namespace xqajit {

// The stages of the GQA loop, in chain order. A mark(s) closes stage s: the time
// since the previous mark is added to it.
enum TraceStage {
  kTracePrologue,  // pdl_wait to the loop: seq_len, page lookups, first copies, Q
  kTraceTileWait,  // waiting for the tile's copies (and the CTA barrier)
  kTraceIssue,     // issuing the copies of a later tile, its page lookups
  kTraceKFrag,     // fp8: K fragments built in registers
  kTraceSMma,      // S^T = K Q^T issued and retired
  kTraceMax,       // scale, mask, the thread's column max and whether a key leads
  kTraceP,         // exp2, P to shared memory (barrier); where a key leads, the max across
                   // the warps (barrier), O rescale and P again (barrier)
  kTraceVFrag,     // fp8: V^T fragments built in registers
  kTraceOMma,      // O^T += V^T P^T issued and retired
  kTraceEpilogue,  // row sums, the CTA's rows to shared memory
  kTraceStore,     // output or partial rows stored
  kTraceArrive,    // split-KV: fence and arrival counter
  kTraceMerge,     // split-KV: the last CTA's merge
  kTraceStages
};

#if __has_include("common/stage_trace_on.cuh")
#include "common/stage_trace_on.cuh"
#else
struct StageTrace {
  __device__ __forceinline__ void mark(TraceStage) {}
  __device__ __forceinline__ void finish(int /*tiles*/) {}
};
#endif

}  // namespace xqajit
