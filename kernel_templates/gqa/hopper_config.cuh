#pragma once
// Compile-time constants of the hopper GQA backend, from the spec's -D flags and
// gqa/hopper_geometry.h (the host's launch plan reads the same geometry), and its
// shared-memory map. Every gqa/hopper_*.cuh piece reads them from here.
//
// Every namespace-scope constexpr of these headers is emitted into the PTX as a .global
// in declaration order: a restructure that adds one or reorders them changes the PTX
// (tools/ptx_snapshot.sh) though not the code. Keep their order config -> layout -> math.

#include "common/types.cuh"
#include "gqa/hopper_geometry.h"
#include "gqa/spec_flags.cuh"
#include "xqajit/decode_args.h"

namespace xqajit {
namespace gqa_hopper {

using namespace ::xqajit::gqa_flags;  // the spec flags (kHeadDim, kTile, kFp8Cache, ...)

constexpr XqajitDecodeGeometry kGeo =
    xqajit_gqa_hopper_geometry(kHeadDim, kGroup, kQLen, kTile, kCacheBytes, 90, kCtaRows);
constexpr int kRows = kGeo.rows;
constexpr int kN = kGeo.rows_per_cta;  // query rows of the CTA = wgmma N
constexpr int kRowBlocks = kGeo.row_blocks;
constexpr int kThreads = kGeo.threads;
constexpr int kStages = kGeo.stages;
constexpr int kMBlocks = kTile / 64;     // wgmma M blocks of keys per tile
constexpr int kDBlocks = kHeadDim / 64;  // 64-wide head-dim blocks (128-byte swizzle atoms)
constexpr int kRegs = kN / 2;            // accumulator registers of one m64nN block
constexpr int kCols = kN / 4;            // query rows a thread holds: 2 per 8 columns
constexpr int kMergeStride = kHeadDim + 4;  // fp32 row stride of the merge buffer (bank spread)
constexpr int kRawChunks = kHeadDim * kCacheBytes / 16;  // 16-byte chunks of one cached row
constexpr int kVBytes = 2 * kDBlocks;                    // fp8: head dims a thread owns in O^T

// Shared-memory map (offsets from the 1024-aligned base; gqa/hopper_geometry.h).
constexpr int kQOff = 0;
constexpr int kPOff = kQOff + kN * kHeadDim * 2;
constexpr int kXchgOff = kPOff + kN * kTile * 2;
constexpr int kPipeOff = kGeo.q_bytes;

static_assert(kStages >= 2, "this spec is not built by the hopper backend (sm_90a, kv_tile 64/128)");
static_assert(kHeadDim % 64 == 0 && kTile % 64 == 0, "64-wide swizzle atoms");
static_assert(kPOff % 1024 == 0 && kPipeOff % 1024 == 0, "swizzle atoms are 1024-aligned");

}  // namespace gqa_hopper
}  // namespace xqajit
