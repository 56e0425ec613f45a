// MLA decode, hopper backend (sm_90a: wgmma + TMA / cp.async). One CTA = (split
// of the sequence, 64-row block, request), two warpgroups, every operand in
// 128-byte-swizzled shared memory; the K tile IS the V tile (read MN-major for
// O = P V). Two schedules:
//
// Seesaw (bf16 cache, two row blocks or more: the compute-bound MLA, and splits
// of more than kSeesawMinTiles tiles; mla/hopper_seesaw.cuh, m13): two tiles a
// step, warpgroup 0 computes S on one and warpgroup 1 on the other, the row max
// and each one's P cross through shared memory, each accumulates its 256 output
// dims with both P, and the two buffers are refilled column block by column
// block by TMA as their readers finish. Where the host plans the balanced grid
// (args.balanced_parts, mla/balanced_plan.h, m77d), a CTA is a walker over a
// share of the batch's tiles, as one or two pieces of requests
// (mla/hopper_balanced.cuh), or a request run whole; where it plans a small
// batch's shares (m84, with a merge launch), a CTA is one piece of a request,
// which runs as a split does.
//
// Per tile (every other spec; mla/hopper_math.cuh): both warpgroups on each
// tile, each S = Q K^T over half its keys (m64n32k16), the row max and P halves
// exchanged, each O += P V over its 256 dims (m64n256k16, P from registers);
// 2 stages, tile i+1 in flight while tile i is computed. A bf16 cache's tiles
// come by TMA (m6: thread 0 issues a page's nine boxes, an mbarrier a stage); an
// fp8 cache's by cp.async from every thread, converted to bf16 in shared memory
// and made visible to wgmma by a proxy fence + barrier. A CTA of 16 real rows
// (H=16 at q_len 1, or a sparse query token's 16 heads) runs the per-tile loop with the transposed products instead
// (mla/hopper_narrow.cuh, m26: S^T = K Q^T and O^T += V^T P^T, m64n16), a
// quarter of the padded tile's tensor work; over a plain fp8 or a dense fp8ds cache
// it runs on the fp8 tensor cores, each warpgroup on its own tiles
// (mla/hopper_narrow_qg.cuh, m43; fp8ds's scale groups: mla/hopper_narrow_qg_ds.cuh,
// m51; sparse fp8ds there too, its rows gathered by the math warpgroups, m53). Sparse specs that
// xqajit_mla_hopper_producer names get a third warpgroup that gathers and converts
// the rows into two bf16 buffers (mla/hopper_producer.cuh, m20), shared by the
// two CTAs of an H=128 token's cluster (crossover, m21); the math warpgroups split by role
// over them (mla/hopper_split_pv.cuh, m54: one computes S, the softmax and half of P V, the
// other the rest of P V). A plain fp8 cache, CTAs of 32
// rows or more, runs its splits of kQgMinTiles tiles or more as the seesaw on the fp8
// tensor cores instead (mla/hopper_qgmma.cuh, m35-m40): S = Q K^T and O^T += V^T P^T as
// e4m3 wgmmas over raw tiles by TMA, V^T built in registers, P stored as e4m3 (a bf16 Q
// and its P each split into two e4m3 planes, m39).
//
// Geometry: mla/hopper_geometry.h; pieces: mla/hopper_loads.cuh (TMA and cp.async
// loads), mla/hopper_producer.cuh (the producer warpgroup), mla/hopper_qgmma.cuh (the
// fp8 tensor cores), mla/hopper_narrow.cuh (the 16-row math), mla/hopper_narrow_qg.cuh
// (16 rows on the fp8 tensor cores) and mla/hopper_narrow_qg_ds.cuh (its fp8ds tiles),
// mla/hopper_epilogue.cuh (stores, split merge); PTX:
// common/wgmma.cuh, common/tma.cuh, common/cluster.cuh.

#include "common/cluster.cuh"
#include "common/mma.cuh"
#include "common/paged_kv.cuh"
#include "common/pdl.cuh"
#include "common/registers.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_balanced.cuh"
#include "mla/hopper_config.cuh"
#include "mla/hopper_epilogue.cuh"
#include "mla/hopper_loads.cuh"
#include "mla/hopper_math.cuh"
#include "mla/hopper_narrow.cuh"
#include "mla/hopper_narrow_qg.cuh"
#include "mla/hopper_narrow_qg_ds.cuh"
#include "mla/hopper_producer.cuh"
#include "mla/hopper_qgmma.cuh"
#include "mla/hopper_seesaw.cuh"
#include "mla/hopper_split_pv.cuh"
#include "mla/shared_rows.cuh"
#include "mla/shared_split.cuh"

using namespace xqajit;
using namespace xqajit::mla_hopper;

extern "C" __global__ void __launch_bounds__(kBlockThreads, 1)
    xqajit_mla_decode(const XqajitMlaArgs args, const __grid_constant__ XqajitTensorMap kv_map) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ int s_is_last;
  __shared__ mla::BalancedPiece s_share;  // a small batch's shares: this CTA's piece
  // bf16 (TMA): [buffer][column block] landed, a phase per use of the buffer. Producer:
  // full[2] (the buffer is filled), then empty[2] (its readers are done with it).
  // QGMMA: [buffer][128-byte column block] of its four buffers.
  __shared__ __align__(8) unsigned long long s_full[kTma ? 2 * kColBlocks : kQgmma ? kQgBuffers * kQ8Blocks : kProducer ? 4 : 1];
  // Sparse: [tile parity][key] 1 where the key's gathered row landed (TileLoader, TileProducer).
  __shared__ unsigned char s_key_ok[MLA_SPARSE ? 2 * kTile : 1];
  // 128-byte swizzle atoms must sit on 1024-byte boundaries (descriptor base offset 0).
  unsigned char* const smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);

  const int split = blockIdx.x;
  int rb = blockIdx.y, b = blockIdx.z;  // a share's (below) where the grid is the shares'
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // warpgroup, and this warp's 16-row slice of the 64 rows
  const int wg = warp_uniform(warp >> 2), rt = warp_uniform(warp & 3);
  const int quad_row = lane >> 2;
  const u32 full_addr = smem_addr(&s_full[0]);
  if ((kTma || kQgmma) && tid == 0) {
#pragma unroll
    for (int i = 0; i < (kQgmma ? kQgBuffers * kQ8Blocks : 2 * kColBlocks); ++i)
      mbarrier_init(full_addr + 8 * i, kQgGather ? 128 : 1);  // a gather: a warpgroup's copies
    fence_mbarrier_init();
  }
  if constexpr (kProducer) {
    if (tid == 0) {
      for (int i = 0; i < 2; ++i) mbarrier_init(full_addr + 8 * i, kProducerThreads);
      for (int i = 2; i < 4; ++i) mbarrier_init(full_addr + 8 * i, kEmptyArrivals);
      fence_mbarrier_init();
    }
    // The barriers are initialised before any arrival, the peer's (crossover: its
    // producer writes our buffers, its math warps arrive on our empty barriers) too.
    if constexpr (kRowCluster > 1) cluster_sync();
    else __syncthreads();
  }

  // Nothing above reads global memory: an upstream kernel may still be writing.
  pdl_wait();
  pdl_launch_dependents();

  // A small batch's shares (m84; grid (row blocks, Z)): this CTA's piece of a request, which runs
  // as a split does (b = -1: a split of the split grid).
  mla::BalancedPiece share{-1, 0, 0, 1, 0, 0};
  if constexpr (kSeesaw) {
    if (args.balanced_parts > 0) {
      if (!args.merge_launch) {  // the balanced plan (m77): walkers over pieces of requests
        balanced_cta(args, &kv_map, smem, full_addr, &s_is_last, tid);
        return;
      }
      share = share_cta_piece(args, &s_share, tid);
      if (share.b < 0) return;
      rb = blockIdx.x;
      b = share.b;
    }
  }
  // Sparse: the CTA's rows are one query token's (mla/hopper_geometry.h), its "sequence"
  // that token's index list.
  // (A share's keys override the split's: as a conditional expression between the two, the other
  // specs' kernels came out with another register allocation, fp8 H=128's among them.)
  mla::SplitKeys keys = mla::split_keys<kTile>(args, b, rb * kRowStride / kHeads, split);
  if constexpr (kSeesaw)
    if (share.b >= 0) keys = piece_keys(args, share);
  const mla::Scales scales = mla::scales(args);
  const float kv_scale = scales.kv, logit_scale_log2 = scales.logit_scale_log2;

  const int* const table_row = args.block_table + (long long)b * args.block_table_stride;
  const u32 raw_addr = smem_addr(smem + kRawOff);
  const TmaTileLoader tma{&kv_map, table_row, keys.begin, keys.end,
                          kTma || kQgmma ? l2_evict_first_policy() : 0ull};
  // A plain fp8 cache, 32 rows or more: the fp8 tensor cores (mla/hopper_qgmma.cuh) for splits
  // of kQgMinTiles tiles or more; shorter ones run the per-tile schedule below, whose fixed
  // cost a split is smaller (m38). 16 rows take them for every split (mla/hopper_narrow_qg.cuh,
  // m43: no seesaw, so no seesaw's fixed cost).
  if (kQgmma && (kNarrowQg || keys.num_tiles >= kQgMinTiles)) {
    RowState st;
    const SeesawSplit sp{keys.num_tiles, keys.begin, keys.end, keys.draft_begin, logit_scale_log2};
    if constexpr (kNarrowQg) {
      if constexpr (MLA_FP8DS) {
        const auto* const cache = static_cast<const unsigned char*>(args.kv_cache);
        if constexpr (kQgGather) {
          const DsGatheredRows rows{cache, keys.list, args.kv_stride_page, args.kv_stride_token, keys.begin, keys.end,
                                    keys.num_tiles};
          narrow_qg_cta(st, args, tma, smem, full_addr, sp, NarrowQgDs<DsGatheredRows>{rows}, b, rb, tid);
        } else {
          const DsPagedRows rows{cache, table_row, args.kv_stride_page, args.kv_stride_token, keys.begin, keys.end};
          narrow_qg_cta(st, args, tma, smem, full_addr, sp, NarrowQgDs<DsPagedRows>{rows}, b, rb, tid);
        }
      } else {
        narrow_qg_cta(st, args, tma, smem, full_addr, sp, NarrowQgPlain{}, b, rb, tid);
      }
    } else {
      mla::init_rows<kRowStride>(st, args, b, rb, rt, quad_row);
      qgmma_cta(st, args, tma, smem, full_addr, sp, b, rb, tid);
    }
    finish_rows(args, st, smem, &s_is_last, split, rb, b, rt, wg, kv_scale, lane);
    return;
  }
  if constexpr (kProducer) {
    if (tid >= kThreads) {  // the producer warpgroup
      warpgroup_release_registers<kProducerRegs>();
      const TileProducer producer{static_cast<const unsigned char*>(args.kv_cache),
                                  args.kv_stride_page,
                                  args.kv_stride_token,
                                  keys.begin,
                                  keys.end,
                                  keys.list,
                                  s_key_ok};
      produce_split(producer, keys.num_tiles, smem + kRawOff, full_addr, tid - kThreads);
      // Leaving is safe: bar.sync and barrier.cluster count exited threads as arrived, every
      // bulk copy or arrival this CTA's producer sends is waited for by the peer before it
      // leaves, and the math warps leave only after the peer's (below).
      return;
    }
    warpgroup_claim_registers<kMathRegs>();
  }
  const TileLoader loader{static_cast<const unsigned char*>(args.kv_cache),
                          table_row,
                          args.kv_stride_page,
                          args.kv_stride_token,
                          keys.max_len,
                          keys.begin,
                          keys.end,
                          keys.list,
                          s_key_ok};
  // Compute-bound bf16 specs (kSeesaw): splits of more than kSeesawMinTiles tiles run the
  // seesaw (mla/hopper_seesaw.cuh); shorter ones, and every other spec, the per-tile
  // schedule below, both warpgroups on each tile, whose chain per tile is shorter where a
  // split is all latency (m13, docs/MLA_HOPPER_NOTES.md).
  const bool seesaw = kSeesaw && keys.num_tiles > kSeesawMinTiles;
  int next_pages[TmaTileLoader::kPagesPerTile];  // per-tile TMA, thread 0: the next tile's page ids
  if constexpr (kTma) {
    if (tid == 0 && keys.num_tiles > 0) {
      if (seesaw) {
        seesaw_first_tiles(tma, raw_addr, full_addr);
      } else {
        tma.pages(0, next_pages);
        tma.issue(next_pages, raw_addr, full_addr);
        if (keys.num_tiles > 1) tma.pages(1, next_pages);
      }
    }
  }
  // cp.async: tiles 0..kStages-2 in flight (tile 0 where one stage is all there is); sparse:
  // the entry of this thread's key of the next tile to issue, loaded a tile ahead.
  constexpr int kFirstTiles = kStages > 1 ? kStages - 1 : 1;
  int entry_ahead = -1;
  if constexpr (!kTma && !kProducer) {
#pragma unroll
    for (int t = 0; t < kFirstTiles; ++t) {
      if (t < keys.num_tiles) loader.issue(t, raw_addr + t * kRawStageBytes, tid, loader.entry(t, tid));
      cp_async_commit();
    }
    entry_ahead = loader.entry(kFirstTiles, tid);
  }
  // At tile it (kStages >= 2): tile it + kStages - 1 into stage (it - 1) % kStages, which a
  // barrier has freed, and the entry of the tile after it.
  auto issue_ahead = [&](int it) {
    const int next = it + kStages - 1;
    if (next < keys.num_tiles)
      loader.issue(next, raw_addr + (unsigned)next % kStages * kRawStageBytes, tid, entry_ahead);
    cp_async_commit();
    entry_ahead = loader.entry(next + 1, tid);
  };
  stage_q(args, smem + kQOff, b, rb, tid);
  if constexpr (kTma || kProducer) {
    fence_proxy_async();  // Q's copies (generic proxy) -> visible to wgmma; the barrier publishes the mbarrier init too
    math_sync();
  }

  RowState st;
  NarrowState ns;  // the narrow schedule's rows (kNarrow), handed to st after the split
  unsigned narrow_bits = 0;  // its one query token's visible drafts
  if constexpr (kNarrow) {
    narrow_init(ns);
    narrow_bits = mla::draft_bits(args, b, 0, kQLen);
  } else {
    mla::init_rows<kRowStride>(st, args, b, rb, rt, quad_row);
  }

  if constexpr (kSplitPv) {  // the producer's tiles, the math split by role (mla/hopper_split_pv.cuh)
    split_pv_cta(st, SplitPvTiles{raw_addr, full_addr, keys.num_tiles, keys.begin, keys.end, keys.draft_begin,
                                  logit_scale_log2, s_key_ok},
                 smem, wg, rt, lane);
    // Crossover: the peer's math has waited for this CTA's last bulk copies out of its buffers
    // (m55), which must not outlive it.
    if constexpr (kRowCluster > 1) cluster_sync_relaxed();
    finish_rows(args, st, smem, &s_is_last, split, rb, b, rt, wg, kv_scale, lane);
    return;
  }
  const u32 q_addr = smem_addr(smem + kQOff);
  if (seesaw) {
    const SeesawSmem sm = seesaw_smem(smem, full_addr, tid);
    __syncthreads();
    seesaw_split(st, sm, tma,
                 SeesawSplit{keys.num_tiles, keys.begin, keys.end, keys.draft_begin, logit_scale_log2}, wg, rt,
                 lane);
    __syncthreads();  // every wgmma and copy is done: the buffers are free
    seesaw_rows(st, sm, wg, rt, lane);
  } else {
    const Exchange xchg(smem);
    for (int it = 0; it < keys.num_tiles; ++it) {
      u32 tile_addr = raw_addr + (it & 1) * kBufBytes;
      if constexpr (kTma) {
        // Stage (it + 1) & 1 was freed by the barrier that ended tile it - 1; stage s
        // completes on barrier s (the seesaw's first two, otherwise unused here).
        if (tid == 0 && it + 1 < keys.num_tiles) {
          tma.issue(next_pages, raw_addr + ((it + 1) & 1) * kStageBytes, full_addr + ((it + 1) & 1) * 8);
          if (it + 2 < keys.num_tiles) tma.pages(it + 2, next_pages);
        }
        __syncwarp();  // warp 0 converged again before its wgmmas (.sync.aligned)
        mbarrier_wait_parity(full_addr + (it & 1) * 8, (it >> 1) & 1);
        const int valid = keys.end - (keys.begin + it * kTile);
        if (valid < kTile) {  // the split's last tile, once per CTA at most
          zero_tile_tail(smem + kRawOff + (it & 1) * kStageBytes, valid, tid);
          fence_proxy_async();
          __syncthreads();
        }
      } else if constexpr (kProducer) {
        mbarrier_wait_parity(full_addr + (it & 1) * 8, (it >> 1) & 1);  // the producers filled the buffer
      } else {
        if constexpr (kStages >= 2) issue_ahead(it);  // (the barrier ending tile it - 1 freed its stage)
        cp_async_wait<kStages - 1>();  // tile it landed (this thread's copies)
        if constexpr (kFp8Cache) {
          __syncthreads();  // every thread's copies of tile it landed
          convert_tile(smem + kRawOff + (it % kStages) * kStageBytes, smem + kTile16Off, tid);
          tile_addr = smem_addr(smem + kTile16Off);
        }
        fence_proxy_async();  // cp.async / st.shared writes -> visible to wgmma (async proxy)
        __syncthreads();
        if constexpr (kStages == 1) {  // fp8ds: the one raw stage is converted; refill it under this tile's math
          if (it + 1 < keys.num_tiles) loader.issue(it + 1, raw_addr, tid, loader.entry(it + 1, tid));
          cp_async_commit();
        }
      }
      if constexpr (kNarrow) {
        const NarrowTile nt{keys.begin + it * kTile, keys.end, keys.draft_begin, narrow_bits,
                            logit_scale_log2, s_key_ok + (it & 1) * kTile};
        narrow_tile(ns, NarrowBf16Operands{tile_addr}, q_addr, xchg, nt, wg, rt, lane);
      } else {
        float s[kHalfKeys / 8][4];
        qk_wgmma(s, q_addr, tile_addr, wg);
        pv_wgmma(st, s, tile_addr, wg, rt, xchg, keys.begin + it * kTile, keys.end, keys.draft_begin,
                 logit_scale_log2, lane, s_key_ok + (it & 1) * kTile);
      }
      if constexpr (kProducer) {
        // This warp's wgmmas are done with the buffer. The exchange needs no barrier here: each
        // warpgroup's next write to it follows a math_sync the other reaches after reading.
        release_tile_buffer(full_addr, it, keys.num_tiles, lane);
      } else {
        __syncthreads();  // every warpgroup is done with this stage, the bf16 tile and the exchange
      }
    }
    if constexpr (!kTma && !kProducer) cp_async_wait<0>();
    if constexpr (kProducer) math_sync();  // the other warpgroup has read this one's last P
    if constexpr (kNarrow) narrow_rows<NarrowBf16Operands>(ns, st, reinterpret_cast<float*>(smem + kRawOff), xchg, wg, rt, lane);
    else add_other_sums(st, reinterpret_cast<float*>(xchg.p), wg, tid & 127);  // the P buffer is free after the last tile
  }

  // The grid's indices again, not rb and b: kept live across the seesaw, ptxas spilled them inside
  // its loops (session 44, m86's first version).
  if (kSeesaw && args.balanced_parts > 0)
    finish_piece(args, st, smem, &s_is_last, reread_piece(&s_share), blockIdx.x, rt, wg, kv_scale, lane);
  else
    finish_rows(args, st, smem, &s_is_last, split, blockIdx.y, blockIdx.z, rt, wg, kv_scale, lane);
}

// The merge launches' groups: the seesaw's grid may be a small batch's shares (m84).
__device__ __forceinline__ SplitPartials<kR, kV> merge_group(const XqajitMlaArgs& args, int rb, int b) {
  if constexpr (kSeesaw)
    if (args.balanced_parts > 0) return share_group(args, rb, b);
  return mla::split_group<kR>(args, rb, b);
}

// The split merge as a second launch, where the host plans one (args.merge_launch;
// mla/shared_epilogue.cuh says when and why): a CTA a row, or (MlaDecodePlan::merge_rows) 16
// rows where every row has few splits. bf16 partials where staged (m70).
extern "C" __global__ void __launch_bounds__(mla::kMergeMaxThreads) xqajit_mla_merge(const XqajitMlaArgs args) {
  mla::merge_launch_row<kR, kRowStride, kRows, kStagePartials, kSeesaw>(
      args, [&](int rb, int b) { return merge_group(args, rb, b); });
}
// Two CTAs an SM: 64 registers, no spills (its bf16 rows stay packed while in flight).
extern "C" __global__ void __launch_bounds__(kXqajitMlaMergeRowsThreads, 2)
    xqajit_mla_merge_rows(const XqajitMlaArgs args) {
  mla::merge_launch_rows<kR, kRowStride, kRows, kStagePartials, kSeesaw>(
      args, [&](int rb, int b) { return merge_group(args, rb, b); });
}
