#pragma once
// The spec flags every MLA kernel reads, as constants of namespace xqajit::mla;
// each backend's config brings them into its own namespace.

#include "xqajit/mla_args.h"

#if !defined(HEAD_GRP_SIZE) || !defined(TOKENS_PER_PAGE) || !defined(CACHE_ELEM_ENUM) || !defined(KV_TILE_TOKENS)
#error "the MLA kernels need the spec flags (HEAD_GRP_SIZE, TOKENS_PER_PAGE, CACHE_ELEM_ENUM, KV_TILE_TOKENS, ...)"
#endif
#ifndef SPEC_Q_SEQ_LEN
#define SPEC_Q_SEQ_LEN 1
#endif
#ifndef INPUT_FP8
#define INPUT_FP8 0
#endif
#ifndef MLA_SPARSE
#define MLA_SPARSE 0
#endif
// 1: the DeepSeek-V3.2 "fp8 with scales" cache (CACHE_ELEM_ENUM=2 too): each row is
// XQAJIT_MLA_FP8DS_ROW_BYTES bytes (xqajit/mla_args.h). Tested as the macro, like MLA_SPARSE.
#ifndef MLA_FP8DS
#define MLA_FP8DS 0
#endif

namespace xqajit {
namespace mla {

constexpr int kHeads = HEAD_GRP_SIZE;
constexpr int kQLen = SPEC_Q_SEQ_LEN;
constexpr int kPageSize = TOKENS_PER_PAGE;
constexpr int kTile = KV_TILE_TOKENS;
constexpr bool kFp8Cache = CACHE_ELEM_ENUM == 2;
constexpr bool kFp8Q = INPUT_FP8 != 0;
// MLA_SPARSE (DSA: per-token index lists instead of a block table) is tested as the macro
// itself, `if constexpr (MLA_SPARSE)`: NVRTC emits every namespace-scope constant into the
// PTX, and the dense kernels' PTX must not move for a flag they do not use.
constexpr int kCacheBytes = kFp8Cache ? 1 : 2;
constexpr int kQk = XQAJIT_MLA_QK_DIM, kV = XQAJIT_MLA_V_DIM;
// A cached latent row as it lands (fp8 with scales: 512 e4m3, 4 float32 scales, 64 bf16).
constexpr int kRawRowBytes = MLA_FP8DS ? XQAJIT_MLA_FP8DS_ROW_BYTES : kQk * kCacheBytes;
constexpr int kStageBytes = kTile * kRawRowBytes;

}  // namespace mla
}  // namespace xqajit
