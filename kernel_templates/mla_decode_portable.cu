// MLA decode, portable backend (mma.sync m16n8k16 + cp.async; sm_80 for bf16,
// sm_89+ for fp8; sized for the 99 KB archs too). One CTA = (split of the
// sequence, row block, request); its R rows are (query token, head) pairs that
// all read the same latent rows, so each latent row is loaded once per row
// block. Geometry and pipeline plan: mla/portable_geometry.h; pieces:
// mla/portable_loads.cuh (producer), mla/portable_math.cuh (phase A: S = Q K^T,
// phase B: softmax and O += P V), mla/portable_epilogue.cuh (stores, split merge).
//
// Schedule with 3+ stages (overlapped, one barrier per tile i):
//   wait tile i+1 landed; barrier; issue tile i+S-1 into the stage tile i-1 left;
//   [fp8: convert tile i+1; barrier;] phase B(i) from S[i&1]; phase A(i+1) into S[(i+1)&1].
// A warp that finishes its softmax and P V early starts on the next tile's
// Q K^T while others still run theirs, so the tensor cores do not idle behind a
// second barrier. With 2 stages (99 KB archs at kv_tile 32) the phases run
// sequentially behind two barriers.

#include "common/mma.cuh"
#include "common/paged_kv.cuh"
#include "common/pdl.cuh"
#include "mla/portable_config.cuh"
#include "mla/portable_epilogue.cuh"
#include "mla/portable_loads.cuh"
#include "mla/portable_math.cuh"
#include "mla/shared_rows.cuh"
#include "mla/shared_split.cuh"

// Diagnostics (timing only, wrong results): 1 = loads alone, 2 = no phase B,
// 3 = no phase A. Set by a variant copy of this file, never by the host.
#ifndef XQAJIT_MLA_PORTABLE_DIAG
#define XQAJIT_MLA_PORTABLE_DIAG 0
#endif
constexpr int kDiag = XQAJIT_MLA_PORTABLE_DIAG;

using namespace xqajit;
using namespace xqajit::mla_portable;

extern "C" __global__ void __launch_bounds__(kThreads, kCtasPerSm) xqajit_mla_decode(const XqajitMlaArgs args) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_is_last;

  const int split = blockIdx.x, rb = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int quad_row = lane >> 2;

  unsigned char* const q_smem = smem + kQOff;
  float* const s_smem = reinterpret_cast<float*>(smem + kSOff);
  const u32 raw_addr = smem_addr(smem + kRawOff);

  // Nothing above reads global memory: an upstream kernel may still be writing.
  pdl_wait();
  pdl_launch_dependents();

  // Sparse: the CTA's rows are one query token's (portable_geometry.h), its "sequence"
  // that token's index list.
  const mla::SplitKeys keys = mla::split_keys<kTile>(args, b, rb * kR / kHeads, split);
  const mla::Scales scales = mla::scales(args);
  const float kv_scale = scales.kv, logit_scale_log2 = scales.logit_scale_log2;

  TileLoader loader{static_cast<const unsigned char*>(args.kv_cache),
                    args.block_table + (long long)b * args.block_table_stride,
                    args.kv_stride_page,
                    args.kv_stride_token,
                    keys.max_len,
                    keys.begin,
                    keys.end,
                    0,
                    keys.list};
  if constexpr (kPageSize >= kTile) loader.next_page = loader.page_of(0);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < keys.num_tiles) loader.issue(s, raw_addr + s * kStageBytes, tid);
    cp_async_commit();
  }
  stage_q(args, q_smem, b, rb, tid);

  // ---- phase B ownership: warp = (row tile rt, slice of the output dims) ----
  const int rt = warp % kRowTiles, slice = warp / kRowTiles;
  const int dim0 = slice * kSliceDims;
  RowState st;
  mla::init_rows<kR>(st, args, b, rb, rt, quad_row);

  const u32 q_addr = smem_addr(q_smem);
  // The bf16 tile that phases A and B read for tile i.
  auto tile16_addr = [&](int i) -> u32 {
    if constexpr (kFp8Cache) return smem_addr(smem + kTile16Off + (i % kBuffers) * kTile16Bytes);
    return raw_addr + (i % kStages) * kStageBytes;
  };
  auto convert = [&](int i) {
    if constexpr (kFp8Cache)
      convert_tile(smem + kRawOff + (i % kStages) * kStageBytes, smem + kTile16Off + (i % kBuffers) * kTile16Bytes,
                   tid);
  };
  auto s_buf = [&](int i) { return s_smem + (i % kBuffers) * kSBuffer; };
  auto phase_a = [&](int i) {
    if (kDiag != 1 && kDiag != 3) qk_phase(q_addr, tile16_addr(i), s_buf(i), warp, lane);
  };
  auto phase_b = [&](int i) {
    if (kDiag == 1 || kDiag == 2) return;
    pv_phase(st, s_buf(i), tile16_addr(i), rt, dim0, keys.begin + i * kTile, keys.end, keys.draft_begin,
             logit_scale_log2, lane, keys.list);
  };

  if constexpr (kOverlap) {
    if (keys.num_tiles > 0) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // tile 0 and Q visible
      if constexpr (kFp8Cache) {
        convert(0);
        __syncthreads();
      }
      phase_a(0);
    }
    for (int it = 0; it < keys.num_tiles; ++it) {
      cp_async_wait<kStages - 3>();
      __syncthreads();  // S(it) and tile it+1 visible; every warp is done with tile it-1 and S(it-1)
      {
        const int next = it + kStages - 1;
        if (next < keys.num_tiles) loader.issue(next, raw_addr + (next % kStages) * kStageBytes, tid);
        cp_async_commit();
      }
      const bool more = it + 1 < keys.num_tiles;
      if constexpr (kFp8Cache) {
        if (more) convert(it + 1);
        __syncthreads();
      }
      phase_b(it);
      if (more) phase_a(it + 1);
    }
  } else {
    for (int it = 0; it < keys.num_tiles; ++it) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // tile it landed; every warp is done with tile it-1 and S
      {
        const int next = it + kStages - 1;
        if (next < keys.num_tiles) loader.issue(next, raw_addr + (next % kStages) * kStageBytes, tid);
        cp_async_commit();
      }
      if constexpr (kFp8Cache) {
        convert(it);
        __syncthreads();
      }
      phase_a(it);
      __syncthreads();
      phase_b(it);
    }
  }
  cp_async_wait<0>();

  finish_rows(args, st, smem, &s_is_last, split, rb, b, rt, slice, kv_scale, lane);
}

// The split merge as a second launch, where the host plans one (args.merge_launch;
// mla/shared_epilogue.cuh says when and why).
extern "C" __global__ void __launch_bounds__(mla::kMergeMaxThreads) xqajit_mla_merge(const XqajitMlaArgs args) {
  mla::merge_launch_row<kR, kR, kRows>(args, [&](int rb, int b) { return mla::split_group<kR>(args, rb, b); });
}
