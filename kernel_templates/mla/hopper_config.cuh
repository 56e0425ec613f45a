#pragma once
// Compile-time constants of the hopper MLA backend, from the spec's -D flags
// and mla/hopper_geometry.h. Every mla/hopper_*.cuh piece reads them from here.

#include "common/types.cuh"
#include "mla/hopper_geometry.h"
#include "mla/shared_flags.cuh"
#include "xqajit/mla_args.h"


namespace xqajit {
namespace mla_hopper {

using namespace ::xqajit::mla;  // the spec flags (kHeads, kTile, kFp8Cache, ...)

constexpr XqajitMlaGeometry kGeo =
    xqajit_mla_hopper_geometry(kHeads, kQLen, kTile, kRawRowBytes, kFp8Q ? 1 : 2, 90, MLA_SPARSE);
constexpr int kRows = kGeo.rows;
constexpr int kR = kGeo.rows_per_cta;  // 64: one wgmma M tile
// Row block rb's rows are the request's rows rb * kRowStride + r for r < kRowStride: kR, or a
// sparse CTA per query token below 64 heads (mla/hopper_geometry.h); the rest of the tile
// is padding. kCtaRows: the real rows of a CTA, what picks its schedule (16: the narrow ones).
constexpr int kRowStride = kGeo.row_stride;
constexpr int kCtaRows = xqajit_mla_hopper_cta_rows(kHeads, kQLen, MLA_SPARSE);
constexpr int kThreads = kXqajitMlaHopperThreads;  // the two math warpgroups
constexpr int kBlockThreads = kGeo.threads;        // and the producer's, where there is one
constexpr int kStages = kGeo.stages;
constexpr int kRawStageBytes = kTile * kRawRowBytes;
constexpr int kWgDims = kV / 2;        // output dims of one warpgroup (the wgmma N of P V)
// bf16 tiles of a block table's pages by TMA; gathered rows (sparse) by a producer
// warpgroup where xqajit_mla_hopper_producer says so (mla/hopper_producer.cuh), else, and
// dense fp8 rows, by cp.async from the math threads (mla/hopper_loads.cuh).
constexpr bool kTma = xqajit_mla_hopper_tma(kCacheBytes, MLA_SPARSE);
// A plain fp8 cache: the fp8 tensor cores (m35, m37, mla/hopper_qgmma.cuh; 16 rows: the narrow
// schedule, m43, mla/hopper_narrow_qg.cuh), raw tiles by TMA; a bf16 Q split into two e4m3
// planes (m39), as P then is too.
constexpr bool kQgmma = xqajit_mla_hopper_qgmma(kHeads, kQLen, kRawRowBytes, kFp8Q ? 1 : 2, MLA_SPARSE);
constexpr bool kQgSplit = kQgmma && !kFp8Q;
constexpr bool kProducer = kBlockThreads > kThreads;
// H=128 sparse: the token's two row blocks are one cluster and split each tile's gather.
constexpr int kRowCluster = xqajit_mla_hopper_row_cluster(kHeads, MLA_SPARSE);
// Registers a thread under setmaxnreg: the producer gives back what the math warpgroups
// need for O (128 fp32 a thread), S, P and the operand descriptors. setmaxnreg moves
// registers within the CTA's launch allocation (64K / threads a thread, in 8s); counts
// that sum past it block forever (session 24, m20).
constexpr int kLaunchRegs = (65536 / kBlockThreads) & ~7;  // 168 at 384 threads
// The split math (more than 16 rows: mla/hopper_split_pv.cuh) gives warpgroup 0 208 and 1 160
// inside its loops (184 each around them) and the producer 136.
constexpr bool kSplitPv = kProducer && kCtaRows != 16;
constexpr int kMathRegs = kSplitPv ? 184 : 176, kProducerRegs = kSplitPv ? 136 : 152;
static_assert(!kProducer || 2 * 128 * kMathRegs + 128 * kProducerRegs <= kBlockThreads * kLaunchRegs,
              "the warpgroups' registers fit the CTA's launch allocation");

// The producer's fp8ds tiles hold every value times kDsTileUnit (m100: the latent converted by
// bf16 bits as e4m3 x 2^-120, times the group's scale x 2^120 x kDsTileUnit rounded to bf16; the
// rope times it exactly), which the split math's logit scale and rows divide out. 2^-56 keeps
// scale x 2^120 x kDsTileUnit finite in bf16 for scales below 2^64 and flushes values below
// ~2^-77 (bf16's normals end at 2^-126) to subnormals.
constexpr int kDsTileLog2 = kProducer && MLA_FP8DS ? 56 : 0;
constexpr float kDsTileUnit = 1.f / static_cast<float>(1ull << kDsTileLog2);
constexpr u32 kDsTileUnitBf16x2 = ((127u - kDsTileLog2) << 7) * 0x10001u;  // kDsTileUnit in both bf16 halves

// Bytes of one 128-byte-swizzled bf16 operand block of `rows` rows x 576.
constexpr int kColBlock = kXqajitMlaHopperBoxCols;  // bf16 elements of one 128-byte swizzle row
constexpr int kColBlocks = kQk / kColBlock;      // 9
constexpr int kQBytes = kR * kQk * 2;
constexpr int kTile16Bytes = kTile * kQk * 2;

// The QGMMA schedule's operands: 576 e4m3 a row in 128-byte column blocks (the last half zeros).
constexpr int kQ8Blocks = kXqajitMlaHopperQ8Blocks;
constexpr int kK8Bytes = kQ8Blocks * kTile * 128;  // one raw tile
constexpr int kP8Bytes = kR * 128;                 // one P (64 rows x 64 keys, 128-byte rows)

// Shared-memory map (bytes from the 1024-aligned base).
constexpr int kQOff = 0;
constexpr int kRawOff = kQOff + kQBytes;
// The QGMMA schedule's own map over the same memory (its specs' short splits run the
// per-tile schedule on the map above): Q's planes, the raw tile buffers, three P, the row
// stats (and a split Q's row scales).
constexpr int kQgPlanes = xqajit_mla_hopper_qgmma_planes(kFp8Q ? 1 : 2, kCtaRows);
constexpr int kQgBuffers = xqajit_mla_hopper_qgmma_buffers(kFp8Q ? 1 : 2, kCtaRows);
constexpr int kQ8PlaneBytes = kQ8Blocks * kR * 128;
// 16 rows on the QGMMA map: the narrow schedule (m42, mla/hopper_narrow_qg.cuh), a split Q's
// lo plane in rows 16-31 of the one plane (the B operand of S^T is then both planes, N = 32).
constexpr bool kNarrowQg = kQgmma && kCtaRows == 16;
// Sparse on that map (fp8ds, m53): each warpgroup gathers its own tiles' rows by cp.async into
// the boxes TMA would fill, every thread arriving on the boxes' barriers as its copies land.
constexpr bool kQgGather = kNarrowQg && MLA_SPARSE;
constexpr int kQgRawOff = kQgPlanes * kQ8PlaneBytes;
constexpr int kQgP8Off = kQgRawOff + kQgBuffers * kK8Bytes;  // P_a (own), P_a (rescaled), P_b
constexpr int kQgStatsOff = kQgP8Off + 3 * kP8Bytes;        // row max, scale0, scale1 (, 2^-e of Q's rows)
constexpr int kQgEnd = kQgStatsOff + xqajit_mla_hopper_qgmma_row_stats(kFp8Q ? 1 : 2) * kR * 4;
// One pipeline stage: a raw tile as it lands, or (producer) a bf16 tile buffer.
constexpr int kBufBytes = kProducer ? kTile16Bytes : kRawStageBytes;
constexpr int kTile16Off = kRawOff + kStages * kBufBytes;  // fp8 cache, cp.async path only
constexpr int kXchgOff = kTile16Off + (kFp8Cache && !kProducer ? kTile16Bytes : 0);  // the warpgroups' exchange
constexpr int kP0Off = kTile16Off;                                      // bf16: the seesaw's P0 and row stats
constexpr int kStatsOff = kP0Off + kR * kTile * 2;
constexpr int kTileSmemEnd =
    kTma ? kP0Off + xqajit_mla_hopper_seesaw_bytes(kTile) : kXchgOff + xqajit_mla_hopper_exchange_bytes(kTile);
constexpr int kSmemEnd = kQgmma && kQgEnd > kTileSmemEnd ? kQgEnd : kTileSmemEnd;

// bf16 and two row blocks or more (the compute-bound MLA: each tile is read by two CTAs,
// the second from L2): a split of more tiles than kSeesawMinTiles runs the seesaw, a
// shorter one the per-tile schedule. One row block (H <= 64 at q_len 1) is memory-bound
// and keeps the per-tile schedule, whose whole tile of copy lead reads closer to the
// copy rate on an H100 (session 21 runs 1-2, docs/MLA_HOPPER_NOTES.md m13).
constexpr bool kSeesaw = kTma && kRows >= 2 * kR;
constexpr int kSeesawMinTiles = kXqajitMlaSeesawMinTiles;
// Lazy rescaling (m75, common/online_softmax.cuh): where P is bf16, the running max moves only
// by more than 2^8, so O's rescale (128 multiplies a thread, on the chain before P V) is
// skipped on almost every tile. The fp8 tensor cores' P (e4m3, stored x 2^8) keeps 0.
constexpr int kLazyLog2 = 8;
// The QGMMA schedule (kQgmma) over the per-tile one with its bf16 conversion (m38), from this
// many tiles a split: at 2 an fp8 Q lost (H=128 B=1 L=8192 41.4 against 35.1 us), at exactly 8
// it wins (B=1 L=32768 59.0 against 60.6 us, B=4 L=8192 58.5 against 60.0); a split Q, whose
// step does twice the tensor work, loses there (77.1 against 59.9) and keeps "more than 8"
// (session 29 run 1).
constexpr int kQgMinTiles = kQgSplit ? kSeesawMinTiles + 1 : kSeesawMinTiles;
static_assert(!kTma || kXchgOff + xqajit_mla_hopper_exchange_bytes(kTile) <= kSmemEnd,
              "the per-tile schedule's exchange fits in the seesaw's shared state");

static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64 || kHeads == 128, "HEAD_GRP_SIZE: 16, 32, 64, 128");
static_assert(kQLen >= 1 && kQLen <= 4, "SPEC_Q_SEQ_LEN: 1 to 4");
static_assert(kTile == 64, "the hopper backend builds KV_TILE_TOKENS = 64 only (S is one m64n64 wgmma chain)");
static_assert(kPageSize == 16 || kPageSize == 32 || kPageSize == 64 || kPageSize == 128,
              "TOKENS_PER_PAGE: 16, 32, 64 or 128");
static_assert(!kQgmma || kNarrowQg || (kStages == 2 && !kProducer),
              "a QGMMA spec's short splits: the per-tile schedule's two raw stages");
static_assert(kStages == 2 || (kStages == 1 && !kTma),
              "this spec does not fit the hopper backend (sm_90, kv_tile 64)");
static_assert(kSmemEnd + 1024 == kGeo.smem_bytes, "the shared-memory map disagrees with mla/hopper_geometry.h");
static_assert(kThreads == 256 && kR == 64, "two math warpgroups on one 64-row tile");
static_assert(kRowCluster == 1 || (kProducer && kR * kRowCluster == kHeads), "a row cluster is one token's heads");
static_assert(kTile == 64, "each warpgroup's S is 32 keys: half of a 64-key tile");
static_assert(CACHE_ELEM_ENUM == 0 || CACHE_ELEM_ENUM == 2, "CACHE_ELEM_ENUM: 0 (bf16) or 2 (fp8)");
static_assert(!kFp8Q || kFp8Cache, "an fp8 Q needs an fp8 cache");
static_assert(!MLA_SPARSE || kHeads % kRowStride == 0 || kQLen == 1,
              "sparse: a CTA's rows are one query token's heads");
static_assert(kRowStride == kR || (MLA_SPARSE && kRowStride == kHeads),
              "padding rows: a sparse token's CTA only");

// Byte offset of 16-byte chunk `chunk` (of 72) of row `row` in a swizzled operand
// block of `rows` rows: [column block][row][128 B], chunk ^ (row & 7) in the atom.
__device__ __forceinline__ u32 sw128_offset(int row, int chunk, int rows) {
  return (u32)((chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

}  // namespace mla_hopper
}  // namespace xqajit
