#pragma once
// The spec flags every GQA kernel reads, as constants of namespace xqajit::gqa_flags;
// each backend (gqa_decode.cu, gqa_decode_hopper.cu) brings them into its own namespace.

#if !defined(HEAD_ELEMS) || !defined(HEAD_GRP_SIZE) || !defined(TOKENS_PER_PAGE) || \
    !defined(CACHE_ELEM_ENUM) || !defined(INPUT_FP16) || !defined(KV_TILE_TOKENS)
#error "the GQA kernels need the spec flags (HEAD_ELEMS, HEAD_GRP_SIZE, TOKENS_PER_PAGE, ...)"
#endif
#ifndef SPEC_DEC
#define SPEC_DEC 0
#endif
#ifndef SPEC_Q_SEQ_LEN
#define SPEC_Q_SEQ_LEN 1
#endif
#ifndef SLIDING_WINDOW
#define SLIDING_WINDOW 0
#endif
#ifndef LOW_PREC_OUTPUT
#define LOW_PREC_OUTPUT 0
#endif
#ifndef CTA_ROWS
#define CTA_ROWS 0
#endif

namespace xqajit {
namespace gqa_flags {

constexpr int kHeadDim = HEAD_ELEMS;
constexpr int kGroup = HEAD_GRP_SIZE;
constexpr int kPageSize = TOKENS_PER_PAGE;
constexpr int kTile = KV_TILE_TOKENS;
constexpr int kCtaRows = CTA_ROWS;  // hopper: query rows per CTA (wgmma N); 0 = all, up to 64
constexpr bool kSpecDec = SPEC_DEC != 0;
constexpr int kQLen = kSpecDec ? SPEC_Q_SEQ_LEN : 1;
constexpr bool kFp16 = INPUT_FP16 != 0;
constexpr bool kFp8Cache = CACHE_ELEM_ENUM == 2;
constexpr bool kFp8Out = LOW_PREC_OUTPUT != 0;
constexpr bool kWindow = SLIDING_WINDOW != 0;
constexpr int kCacheBytes = kFp8Cache ? 1 : 2;
// fp8 caches run both products in fp16 (e4m3 is exact in it; a bf16 Q is pre-scaled).
constexpr bool kMmaF16 = kFp16 || kFp8Cache;

static_assert(kGroup >= 1 && kGroup <= 64, "HEAD_GRP_SIZE: 1 to 64");
static_assert(kQLen >= 1 && kQLen <= 32, "SPEC_Q_SEQ_LEN: 1 to 32 (one mask word per row)");
static_assert(!kFp8Out || kFp8Cache, "fp8 output needs an fp8 cache");

}  // namespace gqa_flags
}  // namespace xqajit
