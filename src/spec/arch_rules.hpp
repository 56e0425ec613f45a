#pragma once
// What an arch offers and what a spec defaults to there: shared by the spec's
// validation (spec.cpp) and the launch-variant rules (variants.cpp). These allocate
// nothing: launch plans normalize and validate a spec on every call.

#include "gqa/hopper_geometry.h"
#include "xqajit/spec/spec.hpp"

namespace xqajit::detail {

// The hopper backends use wgmma (MLA also setmaxnreg): sm_90a only.
inline bool has_hopper(const Arch& arch) { return arch.number() == 90 && arch.accel; }

// backends_for's first entry: what backend=auto resolves to in a spec, and MLA's launch plan.
// MLA is hopper on sm_90a at every shape. Session 18 sent up to 16 rows per request (H=16, one
// token: DeepSeek-V3 at tensor-parallel 8), and 32 with a bf16 cache, to the portable kernel,
// whose rows fit the request where the hopper CTA pays for a 64-row wgmma tile. Since m4-m5 (the
// hopper kernel's S split between its warpgroups, one page lookup per row) hopper wins those too
// (H100, session 19 run 11, bench_mla, us hopper / portable): H=16 B=64 L=8192 236.9 / 252.8
// bf16, 260.9 / 308.0 fp8; B=128 L=4096 235.6 / 248.0; B=32 L=4096 71.5 / 75.7, 75.2 / 88.6; H=32
// B=32 74.3 / 97.2, B=64 244.3 / 315.9; H=16 q_len 2 B=64 244.6 / 319.2 -- all but one request
// over a short sequence at 16 rows (H=16 B=1 L=8192 18.6 / 17.0 bf16, 18.8 / 17.8 fp8; L=32768
// 41.4 / 41.7, 43.2 / 47.0): the tuner's to pick there, not a rule from one shape.
inline Backend default_backend(Kind kind, const Arch& arch) {
  return kind == Kind::mla && has_hopper(arch) ? Backend::hopper : Backend::portable;
}

// The hopper kernel's own N for the spec's rows (hopper_geometry.h).
inline int default_cta_rows(const KernelSpec& s) { return xqajit_gqa_hopper_n(s.group * s.q_len, s.head_dim); }


}  // namespace xqajit::detail
