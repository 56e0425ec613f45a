// MLA decode, portable backend (mma.sync + cp.async; sm_80 for bf16, sm_89+ for
// fp8). One CTA = (split of the sequence, row block, request); its rows are R
// (query token, head) pairs that all read the same latent rows, so each
// latent row is loaded once per row block (mla/portable_geometry.h).
//
// Per KV tile of T latent rows (576 values: K; the first 512: V):
//   phase A  S = Q K^T: 8 warps share the (row tile, 8-key) units of the tile,
//            each a 16 x 8 block over 36 k-steps; S goes to shared memory.
//   phase B  warp (row tile rt, slice j) reads its 16 rows of S, runs the
//            online softmax (identically in every warp of that row tile, so
//            they agree on max and sum) and accumulates O += P V for its
//            512 / (8 / row tiles) output dims, V read with ldmatrix.trans
//            from the same tile.
// fp8 caches land raw and one pass converts each tile to bf16 in shared memory
// (e4m3 is exact in bf16); an fp8 Q is converted once, when it is staged.
// Split-KV partials and the last-CTA merge come from common/split_merge.cuh.

#include "common/memory.cuh"
#include "common/mma.cuh"
#include "common/online_softmax.cuh"
#include "common/paged_kv.cuh"
#include "common/pdl.cuh"
#include "common/split_merge.cuh"
#include "common/types.cuh"
#include "mla/portable_geometry.h"
#include "mla/shared_rows.cuh"
#include "xqajit/mla_args.h"

#if !defined(HEAD_GRP_SIZE) || !defined(TOKENS_PER_PAGE) || !defined(CACHE_ELEM_ENUM) || !defined(KV_TILE_TOKENS)
#error "mla_decode_portable.cu needs the spec flags (HEAD_GRP_SIZE, TOKENS_PER_PAGE, CACHE_ELEM_ENUM, ...)"
#endif
#ifndef SPEC_Q_SEQ_LEN
#define SPEC_Q_SEQ_LEN 1
#endif
#ifndef INPUT_FP8
#define INPUT_FP8 0
#endif

namespace xqajit {
namespace mla_portable {

constexpr int kHeads = HEAD_GRP_SIZE;
constexpr int kQLen = SPEC_Q_SEQ_LEN;
constexpr int kPageSize = TOKENS_PER_PAGE;
constexpr int kTile = KV_TILE_TOKENS;
constexpr bool kFp8Cache = CACHE_ELEM_ENUM == 2;
constexpr bool kFp8Q = INPUT_FP8 != 0;
constexpr int kCacheBytes = kFp8Cache ? 1 : 2;
constexpr int kQk = XQAJIT_MLA_QK_DIM, kV = XQAJIT_MLA_V_DIM;
#ifdef __CUDA_ARCH__
constexpr int kArch = __CUDA_ARCH__ / 10;
#else
constexpr int kArch = 90;
#endif

constexpr XqajitMlaGeometry kGeo =
    xqajit_mla_portable_geometry(kHeads, kQLen, kTile, kCacheBytes, kFp8Q ? 1 : 2, kArch);
constexpr int kRows = kGeo.rows;
constexpr int kR = kGeo.rows_per_cta;
constexpr int kRowTiles = kR / 16;
constexpr int kThreads = kXqajitMlaPortableThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kSlices = kWarps / kRowTiles;      // warps sharing one row tile in phase B
constexpr int kSliceDims = kV / kSlices;         // output dims of one warp
constexpr int kDimTiles = kSliceDims / 8;
constexpr int kStages = kGeo.stages;
constexpr int kRowBytes = kQk * 2;               // a bf16 latent or Q row in shared memory
constexpr int kRawRowBytes = kQk * kCacheBytes;  // a cached row as it lands
constexpr int kStageBytes = kTile * kRawRowBytes;
constexpr int kSStride = kTile + 8;              // floats per S row (+8: 2-way, not 8-way, bank conflicts)
constexpr int kUnits = kRowTiles * (kTile / 8);  // phase A work items (16 rows x 8 keys)

static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64 || kHeads == 128, "HEAD_GRP_SIZE: 16, 32, 64, 128");
static_assert(kQLen >= 1 && kQLen <= 4, "SPEC_Q_SEQ_LEN: 1 to 4");
static_assert(kTile % 16 == 0 && kTile <= 128, "KV_TILE_TOKENS: 16, 32, 64 or 128");
static_assert(kStages >= 2, "this spec's KV tiles do not fit in shared memory: lower kv_tile");
static_assert(kDimTiles % 2 == 0, "each warp's output slice is whole 16-dim ldmatrix steps");
static_assert(CACHE_ELEM_ENUM == 0 || CACHE_ELEM_ENUM == 2, "CACHE_ELEM_ENUM: 0 (bf16) or 2 (fp8)");
static_assert(!kFp8Q || kFp8Cache, "an fp8 Q needs an fp8 cache");

}  // namespace mla_portable
}  // namespace xqajit

using namespace xqajit;
using namespace xqajit::mla_portable;

extern "C" __global__ void __launch_bounds__(kThreads, 1) xqajit_mla_decode(const XqajitMlaArgs args) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_is_last;
  const float kInf = __int_as_float(0x7f800000);

  const int split = blockIdx.x, rb = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int quad_row = lane >> 2, quad_col = lane & 3;

  unsigned char* const raw_region = smem;                                     // [stages][T][576] cache type
  unsigned char* const tile16 = kFp8Cache ? smem + kStages * kStageBytes : nullptr;  // converted bf16 tile
  unsigned char* const q_smem = smem + kStages * kStageBytes + (kFp8Cache ? kTile * kRowBytes : 0);
  float* const s_smem = reinterpret_cast<float*>(q_smem + kR * kRowBytes);   // [R][T + 8]

  // Nothing above reads global memory: an upstream kernel may still be writing.
  pdl_wait();
  pdl_launch_dependents();

  const int max_len = args.max_pages_per_seq * kPageSize;
  const int seq_len = clamped_seq_len(args.seq_lens, b, max_len);
  const int draft_begin = seq_len - kQLen;
  const int split_begin = split * args.split_tokens;
  const int split_end = split_begin + args.split_tokens < seq_len ? split_begin + args.split_tokens : seq_len;
  const int num_tiles = split_end > split_begin ? (split_end - split_begin + kTile - 1) / kTile : 0;

  const float q_scale = args.q_scale_ptr ? *args.q_scale_ptr : args.q_scale;
  const float kv_scale = args.kv_scale_ptr ? *args.kv_scale_ptr : args.kv_scale;
  const float logit_scale_log2 = args.sm_scale * q_scale * kv_scale * kLog2e;

  // ---- KV tile loads: 16-byte cp.async per chunk, zero-filled past the split ----
  const unsigned char* const kv_base = static_cast<const unsigned char*>(args.kv_cache);
  const int* const table_row = args.block_table + (long long)b * args.block_table_stride;
  auto load_tile = [&](int tile, int stage) {
    constexpr int kChunks = kRawRowBytes / 16;
    const int tile_start = split_begin + tile * kTile;
    const u32 dst = smem_addr(raw_region + stage * kStageBytes);
#pragma unroll 4
    for (int i = tid; i < kTile * kChunks; i += kThreads) {
      const int tok = i / kChunks, chunk = i % kChunks;
      const int pos = tile_start + tok;
      const bool valid = pos < split_end;
      const unsigned char* src =
          valid ? paged_row<kPageSize, kCacheBytes>(kv_base, table_row, pos, max_len, args.kv_stride_page,
                                                    args.kv_stride_token, 0) + chunk * 16
                : kv_base;  // zero-fill, read nothing
      // bf16 tiles are swizzled for ldmatrix as they land; fp8 tiles are converted later.
      const u32 off = kFp8Cache ? (u32)(tok * kRawRowBytes + chunk * 16) : swizzle(tok, chunk, kRowBytes);
      cp_async_16(dst + off, src, valid);
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    load_tile(s, s);
    cp_async_commit();
  }

  // ---- Q rows of this CTA -> shared memory as bf16 (zeros for padding rows) ----
  {
    constexpr int kChunks = kQk * (kFp8Q ? 1 : 2) / 16;  // 16-byte chunks of one Q row in global memory
    const unsigned char* const q = static_cast<const unsigned char*>(args.q);
    for (int i = tid; i < kR * kChunks; i += kThreads) {
      const int r = i / kChunks, chunk = i % kChunks;
      const int row = rb * kR + r;
      U32x4 v = {0, 0, 0, 0};
      const int t = row / kHeads, h = row % kHeads;
      const long long off = ((long long)b * args.q_stride_batch + (long long)t * args.q_stride_token +
                             (long long)h * args.q_stride_head) * (kFp8Q ? 1 : 2);
      if (row < kRows) v = *reinterpret_cast<const U32x4*>(q + off + chunk * 16);
      if constexpr (kFp8Q) {  // 16 e4m3 -> 16 bf16: two chunks
        const u32 w[4] = {v.x, v.y, v.z, v.w};
        U32x4 lo, hi;
        u32* const o[2] = {&lo.x, &hi.x};
#pragma unroll
        for (int j = 0; j < 8; ++j) o[j / 4][j % 4] = e4m3x2_to_x2<false>((u16)(w[j / 2] >> (16 * (j % 2))));
        *reinterpret_cast<U32x4*>(q_smem + swizzle(r, 2 * chunk, kRowBytes)) = lo;
        *reinterpret_cast<U32x4*>(q_smem + swizzle(r, 2 * chunk + 1, kRowBytes)) = hi;
      } else {
        *reinterpret_cast<U32x4*>(q_smem + swizzle(r, chunk, kRowBytes)) = v;
      }
    }
  }

  // ---- per-thread rows of phase B: quad_row and quad_row + 8 of row tile rt ----
  const int rt = warp % kRowTiles, slice = warp / kRowTiles;
  const int dim0 = slice * kSliceDims;
  unsigned bits[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int t = (rb * kR + rt * 16 + quad_row + half * 8) / kHeads;
    t = t < kQLen ? t : kQLen - 1;  // padding rows: any valid token (their output is dropped)
    bits[half] = mla::draft_bits(args, b, t, kQLen);
  }
  float row_max[2] = {-kInf, -kInf}, row_sum[2] = {0.f, 0.f};
  float acc[kDimTiles][4];
#pragma unroll
  for (int i = 0; i < kDimTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  const u32 q_addr = smem_addr(q_smem);
  for (int it = 0; it < num_tiles; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile `it` landed; every warp is done with tile it-1 and its S
    {
      const int next = it + kStages - 1;
      if (next < num_tiles) load_tile(next, next % kStages);
      cp_async_commit();
    }
    unsigned char* tile = raw_region + (it % kStages) * kStageBytes;
    if constexpr (kFp8Cache) {  // raw e4m3 rows -> swizzled bf16 rows
      constexpr int kChunks = kRawRowBytes / 16;
      for (int i = tid; i < kTile * kChunks; i += kThreads) {
        const int tok = i / kChunks, chunk = i % kChunks;
        const U32x4 v = *reinterpret_cast<const U32x4*>(tile + tok * kRawRowBytes + chunk * 16);
        const u32 w[4] = {v.x, v.y, v.z, v.w};
        U32x4 lo, hi;
        u32* const o[2] = {&lo.x, &hi.x};
#pragma unroll
        for (int j = 0; j < 8; ++j) o[j / 4][j % 4] = e4m3x2_to_x2<false>((u16)(w[j / 2] >> (16 * (j % 2))));
        *reinterpret_cast<U32x4*>(tile16 + swizzle(tok, 2 * chunk, kRowBytes)) = lo;
        *reinterpret_cast<U32x4*>(tile16 + swizzle(tok, 2 * chunk + 1, kRowBytes)) = hi;
      }
      tile = tile16;
      __syncthreads();
    }
    const u32 k_addr = smem_addr(tile);

    // Phase A: S = Q K^T, one 16 x 8 block per unit.
    for (int u = warp; u < kUnits; u += kWarps) {
      const int urt = u % kRowTiles, n = u / kRowTiles;
      float s4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
      for (int kk = 0; kk < kQk / 16; ++kk) {
        u32 qa[4], kb[2];
        ldmatrix_x4(qa, q_addr + swizzle(urt * 16 + (lane & 15), 2 * kk + (lane >> 4), kRowBytes));
        ldmatrix_x2(kb, k_addr + swizzle(n * 8 + (lane & 7), 2 * kk + ((lane >> 3) & 1), kRowBytes));
        mma_16816<false>(s4, qa, kb[0], kb[1]);
      }
      float* const s0 = s_smem + (urt * 16 + quad_row) * kSStride + n * 8 + 2 * quad_col;
      s0[0] = s4[0];
      s0[1] = s4[1];
      s0[8 * kSStride] = s4[2];
      s0[8 * kSStride + 1] = s4[3];
    }
    __syncthreads();

    // Phase B: scale, mask, online softmax over this warp's 16 rows, O += P V.
    const int tile_start = split_begin + it * kTile;
    const bool need_mask = tile_start + kTile > split_end || (kQLen > 1 && tile_start + kTile > draft_begin);
    float s[kTile / 8][4];
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
      const float* const s0 = s_smem + (rt * 16 + quad_row) * kSStride + n * 8 + 2 * quad_col;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s0[(e >> 1) * 8 * kSStride + (e & 1)] * logit_scale_log2;
        if (need_mask) {
          const int key = tile_start + n * 8 + 2 * quad_col + (e & 1);
          x = mla::key_visible(key, split_end, draft_begin, bits[e >> 1]) ? x : -kInf;
        }
        s[n][e] = x;
      }
    }
    float corr[2];
    online_softmax_tile(s, row_max, row_sum, corr);
    rescale_rows(acc, corr);
#pragma unroll
    for (int kb = 0; kb < kTile / 16; ++kb) {
      u32 pa[4];
      pa[0] = pack_f32x2<false>(s[2 * kb][0], s[2 * kb][1]);
      pa[1] = pack_f32x2<false>(s[2 * kb][2], s[2 * kb][3]);
      pa[2] = pack_f32x2<false>(s[2 * kb + 1][0], s[2 * kb + 1][1]);
      pa[3] = pack_f32x2<false>(s[2 * kb + 1][2], s[2 * kb + 1][3]);
      const int tok = kb * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
      for (int dp = 0; dp < kDimTiles / 2; ++dp) {
        u32 vb[4];
        ldmatrix_x4_trans(vb, k_addr + swizzle(tok, dim0 / 8 + 2 * dp + (lane >> 4), kRowBytes));
        mma_16816<false>(acc[2 * dp], pa, vb[0], vb[1]);
        mma_16816<false>(acc[2 * dp + 1], pa, vb[2], vb[3]);
      }
    }
  }
  cp_async_wait<0>();
  row_sum[0] = quad_sum(row_sum[0]);
  row_sum[1] = quad_sum(row_sum[1]);

  // ---- epilogue: the final rows, or this split's partial rows ------------------
  const bool multi = args.num_splits > 1;
  const long long cta_id = (long long)b * gridDim.y + rb;
  const SplitPartials<kR, kV> partials(args.partial, (long long)args.batch * gridDim.y, args.num_splits, cta_id);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = rt * 16 + quad_row + half * 8, row = rb * kR + r;
    if (row >= kRows) continue;  // padding rows are neither stored nor merged
    const float scale = mla::row_out_scale(row_max[half], row_sum[half], kv_scale);
#pragma unroll
    for (int i = 0; i < kDimTiles; ++i) {
      const int d = dim0 + i * 8 + 2 * quad_col;
      if (multi) partials.store_pair(split, r, d, acc[i][2 * half], acc[i][2 * half + 1]);
      else mla::store_out_pair<kHeads>(args, b, row, d, acc[i][2 * half], acc[i][2 * half + 1], scale);
    }
    if (multi && slice == 0 && quad_col == 0) partials.store_stats(split, r, row_max[half], row_sum[half]);
  }
  if (!multi) return;

  // ---- split-KV: the last CTA of this (request, row block) merges ----------------
  if (!split_arrive_last(args.counters + cta_id, (unsigned)args.num_splits, &s_is_last)) return;
  __syncthreads();  // the pipeline region becomes the merge buffer
  const int valid_rows = kRows - rb * kR < kR ? kRows - rb * kR : kR;
  split_merge<kR, kV, kThreads>(smem, kGeo.merge_bytes, partials, valid_rows,
                                [&](int r, int d, const float(&o)[4], float m, float sum) {
                                  const float scale = mla::row_out_scale(m, sum, kv_scale);
                                  mla::store_out_pair<kHeads>(args, b, rb * kR + r, d, o[0], o[1], scale);
                                  mla::store_out_pair<kHeads>(args, b, rb * kR + r, d + 2, o[2], o[3], scale);
                                });
}
