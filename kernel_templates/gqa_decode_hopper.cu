// GQA / MHA decode attention over a paged KV cache on Hopper (sm_90a): the
// hopper backend of the GQA family. Same arguments, flags, features and
// workspace contract as gqa_decode.cu (the portable backend).
//
// The swapped product (gqa/hopper_geometry.h): S^T = K Q^T with the tile's keys
// on wgmma's M side (64 per instruction) and the CTA's query rows -- the
// (query token, Q head) pairs of one KV head -- on its N side (8..64), so a
// group of 4 pads to 8 columns, not to a 16- or 64-row tile, and speculative
// decoding only widens N. O^T += V^T P^T keeps the head dims on M, V read
// transposed (MN-major) straight from the tile. Both operands of both products
// come from shared memory for a 16-bit cache. An fp8 cache stays raw in shared
// memory and the A operands (K, V^T) are built in registers (e4m3 -> fp16,
// exact), each byte converted once, straight into the wgmma fragments: Q's head
// dims and P's keys are permuted to match the bytes a thread reads (gqa/hopper_layout.cuh).
//
// One warpgroup per CTA. Per KV tile: cp.async (the portable loader's paged
// walk, common/paged_kv.cuh) -> wgmma S^T -> mask -> exp2 against the running
// max, per-thread partial sums -> P^T to shared memory -> wgmma O^T; the column
// max across the 4 warps (each holds 16 keys of every 64) is exchanged through
// shared memory only on a tile where a key leads that max by far (the lazy max
// in the loop). Sums are reduced once at the end. The split-KV epilogue is the
// portable kernel's (common/split_merge.cuh), or, where the launch made the
// splits one cluster, a merge from each other's shared memory
// (common/cluster_merge.cuh).
//
// The pieces: gqa/hopper_config.cuh (constants, shared-memory map),
// gqa/hopper_layout.cuh (operand and fragment maps, the fp8 permutations),
// gqa/hopper_loads.cuh (tile copies, fp8 fragments), gqa/hopper_math.cuh (reductions over key rows), gqa/hopper_epilogue.cuh (output).

#include "common/cluster_merge.cuh"
#include "common/fp8.cuh"
#include "common/memory.cuh"
#include "common/mma.cuh"
#include "common/output.cuh"
#include "common/paged_kv.cuh"
#include "common/q_rows.cuh"
#include "common/pdl.cuh"
#include "common/split_merge.cuh"
#include "common/stage_trace.cuh"
#include "common/types.cuh"
#include "common/wgmma.cuh"
#include "gqa/hopper_config.cuh"
#include "gqa/hopper_epilogue.cuh"
#include "gqa/hopper_geometry.h"
#include "gqa/hopper_layout.cuh"
#include "gqa/hopper_loads.cuh"
#include "gqa/hopper_math.cuh"
#include "gqa/kv_source.cuh"
#include "gqa/spec_flags.cuh"
#include "xqajit/decode_args.h"

using namespace xqajit;
using namespace xqajit::gqa_hopper;

extern "C" __global__ void __launch_bounds__(kThreads, kMinCtasPerSm) xqajit_gqa_decode(const XqajitDecodeArgs args) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int s_is_last;
  const float kInf = __int_as_float(0x7f800000);
  unsigned char* const smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* const q_smem = smem + kQOff;
  unsigned char* const p_smem = smem + kPOff;
  float* const xchg = reinterpret_cast<float*>(smem + kXchgOff);  // [warp][kN]
  unsigned char* const pipe = smem + kPipeOff;

  const int split = blockIdx.x;
  const int h = blockIdx.y / kRowBlocks;
  const int rb = blockIdx.y % kRowBlocks;
  const int b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // ---- programmatic dependent launch: before the wait only L2 hints touch global
  // memory (an upstream kernel may still be writing q, the caches, the table,
  // seq_lens, scales or this workspace; gqa/kv_source.cuh) ---------------------
  const PagedKvRows kv_rows = gqa_kv_rows(args, b, h);
  gqa_prefetch_split_start<kThreads>(args, kv_rows, b, split);
  pdl_wait();
  constexpr bool kLateTrigger = xqajit_gqa_hopper_late_trigger(kPageSize, kTile, kQLen);
  if constexpr (!kLateTrigger) pdl_launch_dependents();
  StageTrace trace;  // no-op unless a trace variant (common/stage_trace.cuh)

  // ---- Q rows of this CTA: their loads first (common/q_rows.cuh) ---------------
  QRows<kN, kHeadDim, kThreads> q_rows;
  auto load_q = [&] {
    q_rows.template load<kGroup>(args, b, h, rb * kN, kRows, [](const u16* q_row, int chunk) {
      U32x4 v;
      if constexpr (kFp8Cache) {  // logical pairs 8 chunk + 2 j, + 1 gathered from their actual dims
        u32* w = &v.x;
#pragma unroll
        for (int j = 0; j < 4; ++j) w[j] = *reinterpret_cast<const u32*>(q_row + q_dim(8 * chunk + 2 * j));
      } else {
        v = *reinterpret_cast<const U32x4*>(q_row + chunk * 8);
      }
      return v;
    });
  };
  if constexpr (decltype(q_rows)::kEarly) load_q();

  // ---- which keys this CTA reads, and the scales (gqa/kv_source.cuh) ----------
  const CtaWork work = gqa_cta_work(args, kv_rows, b, split);
  const int seq_len = work.seq_len, draft_begin = work.draft_begin;
  const int split_begin = work.begin, split_end = work.end, num_tiles = work.num_tiles;
  const float q_scale = work.q_scale, kv_scale = work.kv_scale, rcp_out = work.rcp_out;
  // A bf16 Q meets an fp8 cache as fp16 (kMmaF16), so it is converted anyway: the
  // conversion also folds in both scales and S^T needs no multiply per score (q_len 8:
  // 32 FMULs a tile per thread; KERNEL_NOTES h24). An fp16 Q stays exact.
  constexpr bool kPrescaleQ = kFp8Cache && !kFp16;
  const float q_softmax = q_scale * rsqrtf((float)kHeadDim) * kLog2e;
  const float qk_scale_log2 = q_softmax * kv_scale;  // log2 units per raw Q.K
  const float out_scale = kv_scale * rcp_out;

  // ---- K/V tile loads ----------------------------------------------------------
  // 16-bit cache: straight into the wgmma layout. fp8: raw [key][D] bytes, chunks swizzled
  // for the register fragment reads (no conversion pass; gqa/hopper_loads.cuh).
  constexpr int kRawRowBytes = kHeadDim * kCacheBytes;
  using Pages = TilePages<kPageSize, kTile, kRawRowBytes / 16, kThreads>;
  auto lookup = [&](int tile) {
    return lookup_tile_pages<kPageSize, kTile, kRawRowBytes / 16, kThreads>(kv_rows, split_begin + tile * kTile);
  };
  auto load_tile = [&](int tile, int stage, const Pages& pages) {
    load_kv_tile<kThreads>(kv_rows, pages, split_begin, split_end, tile, smem_addr(pipe + stage * kGeo.stage_bytes),
                           [&](u32 k_dst, u32 v_dst, int tok, int chunk, const unsigned char* k_src,
                               const unsigned char* v_src, bool valid) {
                             copy_kv_chunk(k_dst, v_dst, tok, chunk, k_src, v_src, valid);
                           });
  };
  __shared__ float s_sinks[kSinksEarly ? kGroup : 1];  // gqa/hopper_epilogue.cuh; waited with the first tile
  static_assert(!kSinksEarly || kGroup <= kThreads, "a thread a head's sink");
  if constexpr (kSinksEarly)
    if (args.sinks != nullptr && tid < kGroup) cp_async_4(smem_addr(&s_sinks[tid]), args.sinks + h * kGroup + tid);
  Pages ahead = start_tile_pipeline<kStages>(lookup, load_tile);  // the next tile's pages, looked up early

  // ---- Q rows -> shared memory, the B operand of S^T (zeros for padding rows)
  if constexpr (!decltype(q_rows)::kEarly) load_q();
  q_rows.store(kPrescaleQ, qk_scale_log2, [&](int r, int chunk, const U32x4& v) {
    *reinterpret_cast<U32x4*>(q_smem + atom_off(r, chunk, kN)) = v;
  });

  // ---- per-thread query rows (wgmma columns 8j + 2 (lane % 4) + {0, 1}) --------
  // Their tokens' draft masks wait in shared memory for the masked tiles (registers
  // are the q_len 8 limit); window starts are recomputed there.
  __shared__ u32 s_draft_mask[kQLen];
  if (kSpecDec && tid < kQLen) s_draft_mask[tid] = args.spec_mask[((long long)b * kQLen + tid) * args.mask_words];
  auto column_token = [&](int c) {
    const int t = (rb * kN + acc_col(c >> 1, c, lane)) / kGroup;
    return t < kQLen ? t : kQLen - 1;  // padding rows: any valid token (their output is dropped)
  };
  float row_max[kCols], row_sum[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    row_max[c] = -kInf;
    row_sum[c] = 0.f;
  }
  float o[kDBlocks][kRegs];
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int i = 0; i < kRegs; ++i) o[db][i] = 0.f;

  const u32 q_addr = smem_addr(q_smem), p_addr = smem_addr(p_smem);
  trace.mark(kTracePrologue);
  // The next grid launches once every CTA has issued its last tile's loads (kLateTrigger).
  const int trigger_it = num_tiles > kStages ? num_tiles - kStages : 0;
  if (kLateTrigger && num_tiles == 0) pdl_launch_dependents();
  for (int it = 0; it < num_tiles; ++it) {
    if (kLateTrigger && it == trigger_it) pdl_launch_dependents();
    cp_async_wait<kStages - 2>();
    fence_proxy_async();  // this thread's cp.async (and Q) writes -> visible to wgmma (16-bit path)
    __syncthreads();      // tile `it` complete; every wgmma of tile it-1 has retired
    trace.mark(kTraceTileWait);
    {
      const int next = it + kStages - 1;
      if (next < num_tiles) load_tile(next, next % kStages, ahead);
      cp_async_commit();
      ahead = lookup(next + 1);  // its round trip overlaps this tile's math
    }
    trace.mark(kTraceIssue);
    unsigned char* const k_tile = pipe + (it % kStages) * kGeo.stage_bytes;
    unsigned char* const v_tile = k_tile + kTile * kRawRowBytes;
    const u32 k_addr = smem_addr(k_tile), v_addr = smem_addr(v_tile);

    // S^T = K Q^T: keys 64 mb + 16 warp + lane/4 (+8) x query rows.
    float s[kMBlocks][kRegs];
    if constexpr (kFp8Cache) {
      u32 a[kMBlocks][kHeadDim / 16][4];  // every fragment first: one fence for the tile
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb) {
        const int tok = 64 * mb + 16 * warp + (lane >> 2);
#pragma unroll
        for (int g = 0; g < kHeadDim / 64; ++g) {
          const int chunk = 4 * g + (lane & 3);
          const U32x4 k0 = *reinterpret_cast<const U32x4*>(
              k_tile + tok * kRawRowBytes + ((chunk ^ fp8_k_chunk_swizzle<kRawChunks>(tok)) << 4));
          const U32x4 k1 = *reinterpret_cast<const U32x4*>(
              k_tile + (tok + 8) * kRawRowBytes + ((chunk ^ fp8_k_chunk_swizzle<kRawChunks>(tok + 8)) << 4));
          const u32 w0[4] = {k0.x, k0.y, k0.z, k0.w}, w1[4] = {k1.x, k1.y, k1.z, k1.w};
#pragma unroll
          for (int st = 0; st < 4; ++st) {
            e4m3x4_to_f16x2x2(w0[st], a[mb][4 * g + st][0], a[mb][4 * g + st][2]);
            e4m3x4_to_f16x2x2(w1[st], a[mb][4 * g + st][1], a[mb][4 * g + st][3]);
          }
        }
#pragma unroll
        for (int i = 0; i < kRegs; ++i) s[mb][i] = 0.f;
        wgmma_pin(s[mb]);  // zeroed before the fence, not between the wgmmas
      }
      trace.mark(kTraceKFrag);
      wgmma_fence();
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk) {
          const u64 dq = wgmma_desc_sw128(q_addr + (kk >> 2) * kN * 128 + (kk & 3) * 32, 16, 1024);
          WgmmaRSF16<kN>::run(s[mb], a[mb][kk], dq);
        }
      }
    } else {
      wgmma_fence();
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk) {
          const u64 da = wgmma_desc_sw128(k_addr + (kk >> 2) * kTile * 128 + mb * 64 * 128 + (kk & 3) * 32, 16, 1024);
          const u64 dq = wgmma_desc_sw128(q_addr + (kk >> 2) * kN * 128 + (kk & 3) * 32, 16, 1024);
          WgmmaSS<kN, kMmaF16, 0>::run(s[mb], da, dq, kk > 0);
        }
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < kMBlocks; ++mb) wgmma_pin(s[mb]);
    trace.mark(kTraceSMma);

    // Scale into log2 units (unless Q came prescaled), mask (-inf by select: a masked
    // key's K may be NaN), and the tile max of each query row over the thread's keys.
    const int tile_start = split_begin + it * kTile;
    const bool need_mask = tile_start + kTile > split_end ||
                           (kWindow && tile_start < seq_len - args.window) ||
                           (kSpecDec && tile_start + kTile > draft_begin);
    if constexpr (!kPrescaleQ) {
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb)
#pragma unroll
        for (int i = 0; i < kRegs; ++i) s[mb][i] *= qk_scale_log2;
    }
    if (need_mask) {
      int window_lo[kCols];
      u32 draft_mask[kCols];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int t = column_token(c);
        window_lo[c] = kWindow ? draft_begin + t - args.window + 1 : 0;
        draft_mask[c] = kSpecDec ? s_draft_mask[t] : ~0u;
      }
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
        for (int i = 0; i < kRegs; ++i) {
          const int c = acc_slot(i);
          const int key = tile_start + 64 * mb + 16 * warp + (lane >> 2) + 8 * ((i >> 1) & 1);
          s[mb][i] = key_visible(key, split_end, window_lo[c], draft_begin, draft_mask[c]) ? s[mb][i] : -kInf;
        }
      }
    }
    float tmax[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) tmax[c] = -kInf;
#pragma unroll
    for (int mb = 0; mb < kMBlocks; ++mb)
#pragma unroll
      for (int i = 0; i < kRegs; ++i) tmax[acc_slot(i)] = fmaxf(tmax[acc_slot(i)], s[mb][i]);

    // Lazy max (KERNEL_NOTES h29): P is first taken against the running max of the earlier
    // tiles, which every warp already holds. Where no key of the tile leads it by more than
    // kMaxLead, that P stands (P <= 2^kMaxLead, well inside fp16) and o and the sums need no
    // rescale: no exchange over the 4 warps, one barrier fewer. Whether any thread saw such a
    // lead rides on the P barrier (bar.red.or); only then (rarely: the running max settles
    // within a few tiles) the exact max is exchanged and P written again. The first tile
    // takes the exchange without the guess. A row's (max, sum, o) stay consistent either
    // way, which is all the final division and the split merges need.
    bool lead = false;
    float base[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      base[c] = row_max[c] == -kInf ? 0.f : row_max[c];  // never -inf - -inf
      lead |= tmax[c] > row_max[c] + kMaxLead;            // -inf + kMaxLead stays -inf
    }
    trace.mark(kTraceMax);

    // P = exp2(S - base) -> shared memory as P^T (p_row_off), four 8x8 blocks per
    // stmatrix; the tile's partial sums stay per thread.
    float tsum[kCols];
    auto write_p = [&] {
#pragma unroll
      for (int c = 0; c < kCols; ++c) tsum[c] = 0.f;
      constexpr int kPerStore = kPMatrices < 4 ? kPMatrices : 4;
      const u32 p_lane = p_addr + p_row_off((lane >> 3) % kPerStore, lane, warp);
#pragma unroll
      for (int m0 = 0; m0 < kPMatrices; m0 += kPerStore) {
        u32 pair[kPerStore];  // matrix m0 + q: registers 2 (m0 + q) + {0, 1} of block mb
#pragma unroll
        for (int q = 0; q < kPerStore; ++q) {
          const int mb = (m0 + q) / (kRegs / 2), i = 2 * ((m0 + q) % (kRegs / 2));
          const int c = acc_slot(i);  // i even: registers i, i + 1 hold slots c, c + 1
          const float p0 = fast_exp2(s[mb][i] - base[c]), p1 = fast_exp2(s[mb][i + 1] - base[c + 1]);
          tsum[c] += p0;
          tsum[c + 1] += p1;
          pair[q] = pack_f32x2<kMmaF16>(p0, p1);
        }
        stmatrix_trans(p_lane + 512 * m0, pair);
      }
      fence_proxy_async();
    };
    bool exact = it == 0;  // the first tile always leads (or sees no key): straight to the exchange
    if (!exact) {
      write_p();
      exact = __syncthreads_or(lead);
    }
    if (exact) {
      // The exact max over the 8 key rows of each warp, then over the 4 warps.
      reduce_over_key_rows(tmax, [](float a, float b) { return fmaxf(a, b); });
      store_warp_columns(tmax, xchg, warp, lane);
      __syncthreads();
      float corr[kCols];
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        float m0 = row_max[2 * j], m1 = row_max[2 * j + 1];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const float2 v = *reinterpret_cast<const float2*>(xchg + w * kN + 8 * j + 2 * (lane & 3));
          m0 = fmaxf(m0, v.x);
          m1 = fmaxf(m1, v.y);
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = 2 * j + e;
          const float m = e ? m1 : m0;
          base[c] = m == -kInf ? 0.f : m;
          corr[c] = fast_exp2(row_max[c] - base[c]);
          row_max[c] = m;
        }
      }
#pragma unroll
      for (int c = 0; c < kCols; ++c) row_sum[c] *= corr[c];
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
        for (int i = 0; i < kRegs; ++i) o[db][i] *= corr[acc_slot(i)];
      write_p();
      __syncthreads();
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) row_sum[c] += tsum[c];
    trace.mark(kTraceP);

    // O^T += V^T P^T: head dims (out_dim) x query rows.
    if constexpr (kFp8Cache) {
      // Key rows 16 ks + 2 (lane % 4) + {0, 1, 8, 9} (one swizzle), the thread's kVBytes
      // dims of each. Every fragment of the tile is built before the first wgmma (one fence).
      u32 a[kTile / 16][kDBlocks][4];
      const int dim0 = fp8_v_dim0(lane, warp);
#pragma unroll
      for (int ks = 0; ks < kTile / 16; ++ks) {
        const int tok0 = 16 * ks + 2 * (lane & 3);
        const int off = (((dim0 >> 4) ^ fp8_v_swizzle(tok0)) << 4) + (dim0 & 15);
        u32 w[4][(kVBytes + 3) / 4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const unsigned char* const row = v_tile + (tok0 + (i & 1) + 8 * (i >> 1)) * kRawRowBytes + off;
          if constexpr (kVBytes == 2) {
            w[i][0] = *reinterpret_cast<const u16*>(row);
          } else {
#pragma unroll
            for (int q = 0; q < kVBytes / 4; ++q) w[i][q] = reinterpret_cast<const u32*>(row)[q];
          }
        }
#pragma unroll
        for (int db = 0; db < kDBlocks; ++db) {
          if ((db & 1) == 0) {
            e4m3_columns_to_f16x2x2<0>(w[0][db >> 1], w[1][db >> 1], a[ks][db][0], a[ks][db][1]);
            e4m3_columns_to_f16x2x2<0>(w[2][db >> 1], w[3][db >> 1], a[ks][db][2], a[ks][db][3]);
          } else {
            e4m3_columns_to_f16x2x2<2>(w[0][db >> 1], w[1][db >> 1], a[ks][db][0], a[ks][db][1]);
            e4m3_columns_to_f16x2x2<2>(w[2][db >> 1], w[3][db >> 1], a[ks][db][2], a[ks][db][3]);
          }
        }
      }
      trace.mark(kTraceVFrag);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kTile / 16; ++ks) {
        const u64 dp = wgmma_desc_sw128(p_addr + (ks >> 2) * kN * 128 + (ks & 3) * 32, 16, 1024);
#pragma unroll
        for (int db = 0; db < kDBlocks; ++db) WgmmaRSF16<kN>::run(o[db], a[ks][db], dp);
      }
    } else {
      wgmma_fence();
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db) {
#pragma unroll
        for (int ks = 0; ks < kTile / 16; ++ks) {
          const u64 dv = wgmma_desc_sw128(v_addr + db * kTile * 128 + ks * 2048, kTile * 128, 1024);
          const u64 dp = wgmma_desc_sw128(p_addr + (ks >> 2) * kN * 128 + (ks & 3) * 32, 16, 1024);
          WgmmaSS<kN, kMmaF16, 1>::run(o[db], dv, dp, 1);
        }
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db) wgmma_pin(o[db]);
    trace.mark(kTraceOMma);
  }
  cp_async_wait<0>();

  // ---- row sums over the 8 key rows of each warp, then over the warps ---------
  reduce_over_key_rows(row_sum, [](float a, float b) { return a + b; });
  __syncthreads();  // the pipeline region becomes the merge buffer; xchg is free
  store_warp_columns(row_sum, xchg, warp, lane);
  float* const merge_acc = reinterpret_cast<float*>(pipe);  // [kN][kMergeStride]
  float* const merge_stats = merge_acc + kN * kMergeStride;  // [kN][max, sum]
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int col = acc_col(i >> 2, i, lane);
      merge_acc[col * kMergeStride + out_dim(db, i, lane, warp)] = o[db][i];
    }
  }
  __syncthreads();
  if (warp == 0 && lane < 4) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int col = acc_col(c >> 1, c, lane);
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < 4; ++w) sum += xchg[w * kN + col];
      merge_stats[col * 2] = row_max[c];
      merge_stats[col * 2 + 1] = sum;
    }
  }
  __syncthreads();
  trace.mark(kTraceEpilogue);

  const bool multi = args.num_splits > 1;
  const int cta_rows = kRows - rb * kN < kN ? kRows - rb * kN : kN;
  // ---- split-KV, the splits one cluster: merged from each other's shared memory ----
  if (splits_form_cluster(args.num_splits)) {
    split_merge_in_cluster<kHeadDim, kThreads>(merge_acc, kMergeStride, merge_stats, args.num_splits, cta_rows,
                                               [&](int r, int d, const float(&ov)[4], float m, float sum) {
                                                 store_out(args, b, h, rb * kN + r, d, ov, m, sum, out_scale, s_sinks);
                                               });
    trace.mark(kTraceMerge);
    return trace.finish(num_tiles);
  }
  const long long cta_id = ((long long)b * args.num_kv_heads + h) * kRowBlocks + rb;
  const long long num_ctas = (long long)args.batch * args.num_kv_heads * kRowBlocks;
  const SplitPartials<kN, kHeadDim> partials(args.partial, num_ctas, args.num_splits, cta_id);
  constexpr int kVecs = kHeadDim / 4;
  for (int i = tid; i < cta_rows * kVecs; i += kThreads) {
    const int r = i / kVecs, d = (i % kVecs) * 4;
    const F32x4 a = *reinterpret_cast<const F32x4*>(merge_acc + r * kMergeStride + d);
    const float v[4] = {a.x, a.y, a.z, a.w};
    const float m = merge_stats[r * 2], sum = merge_stats[r * 2 + 1];
    if (!multi) {
      store_out(args, b, h, rb * kN + r, d, v, m, sum, out_scale, s_sinks);
    } else {
      partials.store(split, r, d, v, m, sum);
    }
  }
  trace.mark(kTraceStore);
  if (!multi) return trace.finish(num_tiles);

  // ---- split-KV: the last CTA of this (request, KV head, row block) merges -----
  const bool last = split_arrive_last(args.counters + cta_id, (unsigned)args.num_splits, &s_is_last);
  trace.mark(kTraceArrive);
  if (!last) return trace.finish(num_tiles);
  split_merge<kN, kHeadDim, kThreads>(pipe, kGeo.union_bytes, partials, cta_rows,
                                      [&](int r, int d, const float(&ov)[4], float m, float sum) {
                                        store_out(args, b, h, rb * kN + r, d, ov, m, sum, out_scale, s_sinks);
                                      });
  trace.mark(kTraceMerge);
  trace.finish(num_tiles);
}
