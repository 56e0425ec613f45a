#pragma once
// Compile-time constants of the portable MLA backend, from the spec's -D flags
// and mla/portable_geometry.h (the plan the host launches with). Every
// mla/portable_*.cuh piece reads them from here.

#include "common/arch.cuh"
#include "common/types.cuh"
#include "mla/portable_geometry.h"
#include "mla/shared_flags.cuh"
#include "xqajit/mla_args.h"


namespace xqajit {
namespace mla_portable {

using namespace ::xqajit::mla;  // the spec flags (kHeads, kTile, kFp8Cache, ...)
constexpr int kArch = target_arch();

// Sparse: a CTA's rows share one query token (its index list), see portable_geometry.h.
constexpr XqajitMlaPortablePlan kPlan =
    xqajit_mla_portable_plan(kHeads, MLA_SPARSE ? 1 : kQLen, kTile, kRawRowBytes, kArch);
constexpr XqajitMlaGeometry kGeo = xqajit_mla_portable_geometry(kHeads, kQLen, kTile, kRawRowBytes,
                                                                kFp8Q ? 1 : 2, kArch, MLA_SPARSE ? 1 : 0);
constexpr int kRows = kGeo.rows;
constexpr int kR = kGeo.rows_per_cta;
constexpr int kRowTiles = kR / 16;
constexpr int kThreads = kXqajitMlaPortableThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kStages = kGeo.stages;
constexpr bool kOverlap = kStages >= 3;          // one barrier per tile, phase B(i) then phase A(i+1)
constexpr int kBuffers = kOverlap ? 2 : 1;       // S and converted-tile buffers
constexpr int kCtasPerSm = kPlan.ctas_per_sm;

// Phase A: units of (row tile, 16 keys, k-part); phase B: warp = (row tile, slice of the 512 dims).
constexpr int kKParts = kPlan.k_parts;
constexpr int kKSteps = kQk / 16 / kKParts;      // k-steps of one unit
constexpr int kKeyGroups = kTile / 16;
constexpr int kUnits = kRowTiles * kKeyGroups * kKParts;
constexpr int kSlices = kWarps / kRowTiles;
constexpr int kSliceDims = kV / kSlices;
constexpr int kDimTiles = kSliceDims / 8;

constexpr int kRowBytes = kQk * 2;               // a bf16 latent or Q row in shared memory
constexpr int kTile16Bytes = kTile * kRowBytes;
constexpr int kSStride = kTile + 8;              // floats per S row (+8: 2-way, not 8-way, bank conflicts)
constexpr int kSPlane = kR * kSStride;           // floats of one k-part's S
constexpr int kSBuffer = kKParts * kSPlane;      // floats of one S buffer

// Shared-memory map (bytes).
constexpr int kRawOff = 0;
constexpr int kTile16Off = kStages * kStageBytes;                             // fp8 only
constexpr int kQOff = kTile16Off + (kFp8Cache ? kBuffers * kTile16Bytes : 0);
constexpr int kSOff = kQOff + kR * kRowBytes;
constexpr int kSmemEnd = kSOff + kBuffers * kSBuffer * 4;

static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64 || kHeads == 128, "HEAD_GRP_SIZE: 16, 32, 64, 128");
static_assert(kQLen >= 1 && kQLen <= 4, "SPEC_Q_SEQ_LEN: 1 to 4");
static_assert(kTile % 16 == 0 && kTile <= 128, "KV_TILE_TOKENS: 16, 32, 64 or 128");
static_assert(kPageSize == 16 || kPageSize == 32 || kPageSize == 64 || kPageSize == 128,
              "TOKENS_PER_PAGE: 16, 32, 64 or 128");
static_assert(kStages >= 2, "this spec's KV tiles do not fit in shared memory: lower kv_tile");
static_assert(kSmemEnd == kGeo.smem_bytes, "the shared-memory map disagrees with mla/portable_geometry.h");
static_assert(kQk / 16 % kKParts == 0, "k-parts split the 36 k-steps evenly");
static_assert(kDimTiles % 2 == 0, "each warp's output slice is whole 16-dim ldmatrix steps");
static_assert(kWarps % kRowTiles == 0, "warps split evenly over the row tiles");
static_assert(CACHE_ELEM_ENUM == 0 || CACHE_ELEM_ENUM == 2, "CACHE_ELEM_ENUM: 0 (bf16) or 2 (fp8)");
static_assert(!kFp8Q || kFp8Cache, "an fp8 Q needs an fp8 cache");
static_assert(!MLA_SPARSE || kHeads % kR == 0, "sparse: a CTA's rows are one query token's heads");
static_assert(!MLA_FP8DS || (kFp8Cache && !kFp8Q),
              "MLA_FP8DS: an fp8 cache (CACHE_ELEM_ENUM=2) under a bf16 Q");
static_assert(kRawRowBytes % 16 == 0, "a cached row lands in whole 16-byte chunks");

}  // namespace mla_portable
}  // namespace xqajit
