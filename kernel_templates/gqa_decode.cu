// GQA / MHA decode attention over a paged KV cache (XQA-style), one kernel
// family specialised by the spec's -D flags.
//
// One CTA = (split of the sequence, KV head x row block, request). Its rows are
// the (query token, Q head) pairs that share one KV head: q_len * group rows,
// in 16-row tiles (the mma M dimension), so speculative decoding is just more
// rows. K/V tiles of KV_TILE_TOKENS keys stream through a cp.async pipeline with
// per-token page-table addressing. fp8 tiles stay raw in shared memory and are
// dequantised in registers while the mma fragments are built (common/fp8.cuh). Warps split a tile's keys, keep their own online softmax
// (max, sum, acc) and merge through shared memory at the end. With several
// splits, each CTA writes (max, sum, acc) to the caller's workspace and the last
// one to finish merges (self-resetting counter, so graph replays need no reset);
// where the launch made the splits one cluster (sm_90+), they merge from each
// other's shared memory instead (common/cluster_merge.cuh).

#include "common/arch.cuh"
#include "common/cluster_merge.cuh"
#include "common/fp8.cuh"
#include "common/memory.cuh"
#include "common/mma.cuh"
#include "common/online_softmax.cuh"
#include "common/output.cuh"
#include "common/paged_kv.cuh"
#include "common/q_rows.cuh"
#include "common/pdl.cuh"
#include "common/split_merge.cuh"
#include "common/types.cuh"
#include "gqa/kv_source.cuh"
#include "gqa/spec_flags.cuh"
#include "xqajit/decode_args.h"

namespace xqajit {
namespace gqa {

using namespace ::xqajit::gqa_flags;  // the spec flags (kHeadDim, kTile, kFp8Cache, ...)

constexpr int kArch = target_arch();

constexpr XqajitDecodeGeometry kGeo =
    xqajit_decode_geometry(kHeadDim, kGroup, kQLen, kTile, kCacheBytes, kArch);
constexpr int kRows = kGeo.rows;
constexpr int kRowsPerCta = kGeo.rows_per_cta;
constexpr int kRowBlocks = kGeo.row_blocks;
constexpr int kWarpKv = kGeo.warp_kv;
constexpr int kWarps = kGeo.warps;
constexpr int kThreads = kGeo.threads;
constexpr int kStages = kGeo.stages;
constexpr int kWarpTokens = kTile / kWarpKv;  // keys of one tile each warp scores
constexpr int kScoreTiles = kWarpTokens / 8;  // n-tiles of the score block
constexpr int kDimTiles = kHeadDim / 8;       // n-tiles of the output block
constexpr int kRowBytes16 = kHeadDim * 2;     // a 16-bit K/V/Q row in shared memory
constexpr int kCacheRowBytes = kHeadDim * kCacheBytes;
constexpr bool kQInRegisters = kHeadDim <= 128;  // D=256 reloads Q to stay off local memory
constexpr int kCacheChunks = kCacheRowBytes / 16;  // 16-byte chunks of one cached row

static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "HEAD_ELEMS: 64, 128 or 256");
static_assert(kTile == 16 || kTile == 32 || kTile == 64 || kTile == 128, "KV_TILE_TOKENS: 16..128");
static_assert(kWarpTokens % 16 == 0, "each warp needs whole 16-key steps of a tile");
static_assert(kStages >= 2, "this spec's K/V tiles do not fit in shared memory: lower kv_tile");
static_assert(CACHE_ELEM_ENUM == 0 || CACHE_ELEM_ENUM == 2, "CACHE_ELEM_ENUM: 0 or 2");

__device__ __forceinline__ int fp8_k_swizzle(int tok) { return fp8_k_chunk_swizzle<kCacheChunks>(tok); }
__device__ __forceinline__ int fp8_v_swizzle(int tok) { return fp8_v_chunk_swizzle<kCacheChunks>(tok); }
// Key (within a warp's keys) of score accumulator (n, e); head-dim column of
// output accumulator (i, e). fp8 permutes both (common/fp8.cuh says why).
__device__ __forceinline__ int score_key(int n, int e, int quad_col) {
  return kFp8Cache ? fp8_score_key(n, e, quad_col) : n * 8 + 2 * quad_col + (e & 1);
}
__device__ __forceinline__ int acc_col(int i, int e, int quad_col) {
  return kFp8Cache ? fp8_acc_col(i, e, quad_col) : i * 8 + 2 * quad_col + (e & 1);
}

__device__ __forceinline__ void store_out(const XqajitDecodeArgs& args, int b, int h, int row, int d,
                                          const float (&o)[4], float row_max, float row_sum, float out_scale) {
  store_output_vec<kGroup, kFp8Out, kFp16>(args, b, h, row, d, o, row_max, row_sum, out_scale);
}

}  // namespace gqa
}  // namespace xqajit

using namespace xqajit;
using namespace xqajit::gqa;

extern "C" __global__ void __launch_bounds__(kThreads) xqajit_gqa_decode(const XqajitDecodeArgs args) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_is_last;
  const float kInf = __int_as_float(0x7f800000);

  const int split = blockIdx.x;
  const int h = blockIdx.y / kRowBlocks;
  const int rb = blockIdx.y % kRowBlocks;
  const int b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_row = warp / kWarpKv, warp_kv = warp % kWarpKv;
  const int quad_row = lane >> 2, quad_col = lane & 3;

  unsigned char* const kv_region = smem;
  unsigned char* const q_smem = smem + kGeo.union_bytes;

  // ---- programmatic dependent launch: before the wait only L2 hints touch global
  // memory (an upstream kernel may still be writing q, the caches, the table,
  // seq_lens, scales or this workspace; gqa/kv_source.cuh); from the wait on every
  // read sees its writes.
  const PagedKvRows kv_rows = gqa_kv_rows(args, b, h);
  gqa_prefetch_split_start<kThreads>(args, kv_rows, b, split);
  pdl_wait();
  pdl_launch_dependents();

  // ---- Q rows of this CTA: their loads first (common/q_rows.cuh) ---------------
  QRows<kRowsPerCta, kHeadDim, kThreads> q_rows;
  auto load_q = [&] {
    q_rows.template load<kGroup>(args, b, h, rb * kRowsPerCta, kRows, [](const u16* q_row, int chunk) {
      return *reinterpret_cast<const U32x4*>(q_row + chunk * 8);
    });
  };
  if constexpr (decltype(q_rows)::kEarly) load_q();

  // ---- which keys this CTA reads, and the scales (gqa/kv_source.cuh) ----------
  const CtaWork work = gqa_cta_work(args, kv_rows, b, split);
  const int seq_len = work.seq_len, draft_begin = work.draft_begin;
  const int split_begin = work.begin, split_end = work.end, num_tiles = work.num_tiles;
  const float q_scale = work.q_scale, kv_scale = work.kv_scale, rcp_out = work.rcp_out;
  // fp8 with a bf16 Q: Q is converted to fp16 with its scale folded in (q_prescale).
  const float q_softmax = q_scale * rsqrtf((float)kHeadDim) * kLog2e;
  const bool prescale_q = kFp8Cache && !kFp16;
  const float q_prescale = q_softmax;
  const float qk_scale_log2 = (prescale_q ? 1.f : q_softmax) * kv_scale;
  const float out_scale = kv_scale * rcp_out;

  // ---- K/V tile loads: one 16-byte cp.async per chunk, zero-filled past the end
  using Pages = TilePages<kPageSize, kTile, kCacheRowBytes / 16, kThreads>;
  auto lookup = [&](int tile) {
    return lookup_tile_pages<kPageSize, kTile, kCacheRowBytes / 16, kThreads>(kv_rows, split_begin + tile * kTile);
  };
  auto load_tile = [&](int tile, int stage, const Pages& pages) {
    load_kv_tile<kThreads>(
        kv_rows, pages, split_begin, split_end, tile, smem_addr(kv_region + stage * kGeo.stage_bytes),
        [&](u32 k_dst, u32 v_dst, int tok, int chunk, const unsigned char* k_src, const unsigned char* v_src,
            bool valid) {
          if constexpr (kFp8Cache) {
            cp_async_16(k_dst + (u32)(tok * kCacheRowBytes + ((chunk ^ fp8_k_swizzle(tok)) << 4)), k_src, valid);
            cp_async_16(v_dst + (u32)(tok * kCacheRowBytes + ((chunk ^ fp8_v_swizzle(tok)) << 4)), v_src, valid);
          } else {
            const u32 off = swizzle(tok, chunk, kRowBytes16);
            cp_async_16(k_dst + off, k_src, valid);
            cp_async_16(v_dst + off, v_src, valid);
          }
        });
  };

  Pages ahead = start_tile_pipeline<kStages>(lookup, load_tile);  // the next tile's pages, looked up early

  // ---- Q rows -> shared memory (zeros for padding rows) -------------------------
  if constexpr (!decltype(q_rows)::kEarly) load_q();
  q_rows.store(prescale_q, q_prescale, [&](int r, int chunk, const U32x4& v) {
    *reinterpret_cast<U32x4*>(q_smem + swizzle(r, chunk, kRowBytes16)) = v;
  });
  __syncthreads();
  const u32 q_addr = smem_addr(q_smem);
  // A fragment of Q for k-step kk. fp8 permutes the head dim inside each 64-wide
  // block to match the K bytes a thread reads: step kk = 4 * kq + s covers, for
  // quad column c, dims 64 kq + 16 c + 4 s + {0,1} (a0/a1) and {2,3} (a2/a3).
  auto load_q_frag = [&](u32(&qa)[4], int kk) {
    if constexpr (kFp8Cache) {
      const int e = 64 * (kk >> 2) + 16 * quad_col + 4 * (kk & 3);
      const int r0 = warp_row * 16 + quad_row;
      const U32x2 lo = *reinterpret_cast<const U32x2*>(q_smem + swizzle(r0, e >> 3, kRowBytes16) + (e & 7) * 2);
      const U32x2 hi = *reinterpret_cast<const U32x2*>(q_smem + swizzle(r0 + 8, e >> 3, kRowBytes16) + (e & 7) * 2);
      qa[0] = lo.x; qa[2] = lo.y; qa[1] = hi.x; qa[3] = hi.y;
    } else {
      ldmatrix_x4(qa, q_addr + swizzle(warp_row * 16 + (lane & 15), 2 * kk + (lane >> 4), kRowBytes16));
    }
  };
  u32 q_frag[kQInRegisters ? kHeadDim / 16 : 1][4];
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) load_q_frag(q_frag[kk], kk);
  }

  // ---- per-thread rows (quad_row and quad_row + 8 of this warp's tile) --------
  int window_lo[2];
  u32 mask_bits[2] = {~0u, ~0u};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = rb * kRowsPerCta + warp_row * 16 + quad_row + half * 8;
    int t = row / kGroup;
    t = t < kQLen ? t : kQLen - 1;  // padding rows: any valid token (their output is dropped)
    window_lo[half] = kWindow ? draft_begin + t - args.window + 1 : 0;
    if constexpr (kSpecDec) mask_bits[half] = args.spec_mask[((long long)b * kQLen + t) * args.mask_words];
  }

  float row_max[2] = {-kInf, -kInf};
  float row_sum[2] = {0.f, 0.f};
  float acc[kDimTiles][4];
#pragma unroll
  for (int i = 0; i < kDimTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  const int warp_tok0 = warp_kv * kWarpTokens;
  for (int it = 0; it < num_tiles; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile `it` visible to all; everyone is done with tile it-1's buffers
    {
      const int next = it + kStages - 1;
      if (next < num_tiles) load_tile(next, next % kStages, ahead);
      cp_async_commit();
      ahead = lookup(next + 1);  // its round trip overlaps this tile's math
    }
    const unsigned char* const k_tile = kv_region + (it % kStages) * kGeo.stage_bytes;
    const unsigned char* const v_tile = k_tile + kTile * kCacheRowBytes;
    const u32 k_addr = smem_addr(k_tile), v_addr = smem_addr(v_tile);

    // S = Q K^T over this warp's keys.
    float s[kScoreTiles][4];
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    if constexpr (kFp8Cache) {
      // n-tile 2*np + hf, column quad_row <- key 16 np + 4 (quad_row / 2) + 2 hf + quad_row % 2;
      // one 16-byte load = 4 k-steps of one key row (head-dim order as in load_q_frag).
#pragma unroll
      for (int kq = 0; kq < kHeadDim / 64; ++kq) {
        u32 qa[4][4];
#pragma unroll
        for (int st = 0; st < 4; ++st) {
          if constexpr (kQInRegisters) {
#pragma unroll
            for (int j = 0; j < 4; ++j) qa[st][j] = q_frag[4 * kq + st][j];
          } else {
            load_q_frag(qa[st], 4 * kq + st);
          }
        }
#pragma unroll
        for (int n = 0; n < kScoreTiles; ++n) {
          const int tok = warp_tok0 + 16 * (n >> 1) + 4 * (quad_row >> 1) + 2 * (n & 1) + (quad_row & 1);
          const U32x4 raw = *reinterpret_cast<const U32x4*>(
              k_tile + tok * kCacheRowBytes + (((4 * kq + quad_col) ^ fp8_k_swizzle(tok)) << 4));
          const u32 w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int st = 0; st < 4; ++st) {
            u32 b0, b1;
            e4m3x4_to_f16x2x2(w[st], b0, b1);
            mma_16816<true>(s[n], qa[st], b0, b1);
          }
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        u32 qa[4];
        if constexpr (kQInRegisters) {
          qa[0] = q_frag[kk][0]; qa[1] = q_frag[kk][1]; qa[2] = q_frag[kk][2]; qa[3] = q_frag[kk][3];
        } else {
          load_q_frag(qa, kk);
        }
#pragma unroll
        for (int np = 0; np < kScoreTiles / 2; ++np) {
          u32 kb[4];
          const int tok = warp_tok0 + np * 16 + (lane & 7) + ((lane >> 4) << 3);
          ldmatrix_x4(kb, k_addr + swizzle(tok, 2 * kk + ((lane >> 3) & 1), kRowBytes16));
          mma_16816<kFp16>(s[2 * np], qa, kb[0], kb[1]);
          mma_16816<kFp16>(s[2 * np + 1], qa, kb[2], kb[3]);
        }
      }
    }

    // Scale into log2 units and mask. Only tiles that touch a boundary pay for
    // the per-key test; a masked key gets -inf (never multiplied: its K may be NaN).
    const int tile_start = split_begin + it * kTile;
    const bool need_mask = tile_start + kTile > split_end ||
                           (kWindow && tile_start < seq_len - args.window) ||
                           (kSpecDec && tile_start + kTile > draft_begin);
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * qk_scale_log2;
        if (need_mask) {
          const int half = e >> 1;
          const int key = tile_start + warp_tok0 + score_key(n, e, quad_col);
          x = key_visible(key, split_end, window_lo[half], draft_begin, mask_bits[half]) ? x : -kInf;
        }
        s[n][e] = x;
      }
    }

    // Online softmax, rows quad_row (e = 0,1) and quad_row + 8 (e = 2,3).
    float corr[2];
    online_softmax_tile(s, row_max, row_sum, corr);
    rescale_rows(acc, corr);

    // O += P V: the score accumulators are already the A fragments of P.
#pragma unroll
    for (int kb = 0; kb < kWarpTokens / 16; ++kb) {
      u32 pa[4];
      pa[0] = pack_f32x2<kMmaF16>(s[2 * kb][0], s[2 * kb][1]);
      pa[1] = pack_f32x2<kMmaF16>(s[2 * kb][2], s[2 * kb][3]);
      pa[2] = pack_f32x2<kMmaF16>(s[2 * kb + 1][0], s[2 * kb + 1][1]);
      pa[3] = pack_f32x2<kMmaF16>(s[2 * kb + 1][2], s[2 * kb + 1][3]);
      if constexpr (kFp8Cache) {
        // This thread's P columns are keys 4 quad_col + {0..3}; V words of those 4 rows at
        // dims 32 m + 4 quad_row + {0..3} give, byte-transposed, the B fragments of
        // output n-tiles 4 m + {0..3} (column mapping: acc_col).
        const int tok0 = warp_tok0 + kb * 16 + 4 * quad_col;
        const unsigned char* const v_rows = v_tile + tok0 * kCacheRowBytes + 4 * (quad_row & 3);
        const int vswz = fp8_v_swizzle(tok0);
#pragma unroll
        for (int m = 0; m < kHeadDim / 32; ++m) {
          const int off = ((2 * m + (quad_row >> 2)) ^ vswz) << 4;
          u32 w[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) w[i] = *reinterpret_cast<const u32*>(v_rows + i * kCacheRowBytes + off);
          u32 b0[4], b1[4];  // n-tile 4 m + j: keys (0,1) -> b0[j], keys (2,3) -> b1[j]
          e4m3_columns_to_f16x2x2<0>(w[0], w[1], b0[0], b0[1]);
          e4m3_columns_to_f16x2x2<2>(w[0], w[1], b0[2], b0[3]);
          e4m3_columns_to_f16x2x2<0>(w[2], w[3], b1[0], b1[1]);
          e4m3_columns_to_f16x2x2<2>(w[2], w[3], b1[2], b1[3]);
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_16816<true>(acc[4 * m + j], pa, b0[j], b1[j]);
        }
      } else {
        const int tok = warp_tok0 + kb * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
        for (int dp = 0; dp < kHeadDim / 16; ++dp) {
          u32 vb[4];
          ldmatrix_x4_trans(vb, v_addr + swizzle(tok, 2 * dp + (lane >> 4), kRowBytes16));
          mma_16816<kFp16>(acc[2 * dp], pa, vb[0], vb[1]);
          mma_16816<kFp16>(acc[2 * dp + 1], pa, vb[2], vb[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline region becomes the merge buffer

  // ---- merge the warps that share rows ----------------------------------------
  row_sum[0] = quad_sum(row_sum[0]);
  row_sum[1] = quad_sum(row_sum[1]);
  float* const merge_acc = reinterpret_cast<float*>(kv_region);  // [warps][16][D]
  float* const merge_stats = merge_acc + kWarps * 16 * kHeadDim;   // [warps][16][max, sum]
#pragma unroll
  for (int i = 0; i < kDimTiles; ++i) {
    float* r0 = merge_acc + (warp * 16 + quad_row) * kHeadDim;
    float* r1 = r0 + 8 * kHeadDim;
    r0[acc_col(i, 0, quad_col)] = acc[i][0]; r0[acc_col(i, 1, quad_col)] = acc[i][1];
    r1[acc_col(i, 0, quad_col)] = acc[i][2]; r1[acc_col(i, 1, quad_col)] = acc[i][3];
  }
  if (quad_col == 0) {
    merge_stats[(warp * 16 + quad_row) * 2] = row_max[0];
    merge_stats[(warp * 16 + quad_row) * 2 + 1] = row_sum[0];
    merge_stats[(warp * 16 + quad_row + 8) * 2] = row_max[1];
    merge_stats[(warp * 16 + quad_row + 8) * 2 + 1] = row_sum[1];
  }
  __syncthreads();

  const bool multi = args.num_splits > 1;
  const bool in_cluster = xqajit_cluster_merge_fits(kGeo, kHeadDim) && splits_form_cluster(args.num_splits);
  // The CTA's merged rows for the cluster merge, after the warps' ([row][D], [row][max, sum]).
  float* const cta_acc = merge_stats + kWarps * 16 * 2;
  float* const cta_stats = cta_acc + kRowsPerCta * kHeadDim;
  const long long cta_id = ((long long)b * args.num_kv_heads + h) * kRowBlocks + rb;
  const long long num_ctas = (long long)args.batch * args.num_kv_heads * kRowBlocks;
  const SplitPartials<kRowsPerCta, kHeadDim> partials(args.partial, num_ctas, args.num_splits, cta_id);
  constexpr int kVecs = kHeadDim / 4;
  // Padding rows (row >= kRows) are neither stored nor written as partials.
  const int cta_rows = kRows - rb * kRowsPerCta < kRowsPerCta ? kRows - rb * kRowsPerCta : kRowsPerCta;
  for (int i = tid; i < cta_rows * kVecs; i += kThreads) {
    const int r = i / kVecs, d = (i % kVecs) * 4;
    const int wr = r / 16, lr = r % 16;
    float m = -kInf;
#pragma unroll
    for (int w = 0; w < kWarpKv; ++w) m = fmaxf(m, merge_stats[((wr * kWarpKv + w) * 16 + lr) * 2]);
    float sum = 0.f, o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kWarpKv; ++w) {
      const int wrow = (wr * kWarpKv + w) * 16 + lr;
      const float mw = merge_stats[wrow * 2];
      if (mw == -kInf) continue;
      const float f = exp2f(mw - m);
      sum += f * merge_stats[wrow * 2 + 1];
      const F32x4 a = *reinterpret_cast<const F32x4*>(merge_acc + wrow * kHeadDim + d);
      o[0] += f * a.x; o[1] += f * a.y; o[2] += f * a.z; o[3] += f * a.w;
    }
    const int row = rb * kRowsPerCta + r;
    if (!multi) {
      store_out(args, b, h, row, d, o, m, sum, out_scale);
    } else if (in_cluster) {
      *reinterpret_cast<F32x4*>(cta_acc + r * kHeadDim + d) = F32x4{o[0], o[1], o[2], o[3]};
      if (d == 0) {
        cta_stats[r * 2] = m;
        cta_stats[r * 2 + 1] = sum;
      }
    } else {
      partials.store(split, r, d, o, m, sum);
    }
  }
  if (!multi) return;

  // ---- split-KV, the splits one cluster: merged from each other's shared memory ----
  if (in_cluster) {
    split_merge_in_cluster<kHeadDim, kThreads>(cta_acc, kHeadDim, cta_stats, args.num_splits, cta_rows,
                                               [&](int r, int d, const float(&o)[4], float m, float sum) {
                                                 store_out(args, b, h, rb * kRowsPerCta + r, d, o, m, sum,
                                                           out_scale);
                                               });
    return;
  }

  // ---- split-KV: the last CTA of this (request, KV head, row block) merges -----
  if (!split_arrive_last(args.counters + cta_id, (unsigned)args.num_splits, &s_is_last)) return;
  split_merge<kRowsPerCta, kHeadDim, kThreads>(
      kv_region, kGeo.union_bytes, partials, cta_rows,
      [&](int r, int d, const float(&o)[4], float m, float sum) {
        store_out(args, b, h, rb * kRowsPerCta + r, d, o, m, sum, out_scale);
      });
}
