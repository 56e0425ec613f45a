#pragma once
// Hopper MLA backend, the producer warpgroup of the warp-specialized per-tile
// schedule (sparse MLA where xqajit_mla_hopper_producer says so): a third
// warpgroup gathers each tile's rows from the index list, converts fp8 rows to
// bf16, and stores them in the swizzled operand layout of one of two tile
// buffers, while the two math warpgroups compute on the other. Neither the
// gather's address math nor the dequantisation sits on the math threads (m19 ran
// both there), as in FlashMLA's sparse decode (its 2025-09-29 write-up).
//
// Crossover (kRowCluster 2, H=128: m21): the token's two 64-head row blocks are
// one cluster and read the same rows, so each CTA's producer gathers and converts
// half of every tile's keys (32) into its own buffer, and each producer warp copies
// its 8 rows into the peer's buffer over distributed shared memory by bulk copies,
// two column blocks at a time as soon as it has stored them (m55, m56): each SM
// fetches and converts half a tile a step. Without it (m20) one tile in flight cost a
// whole tile's gather latency, which the math could not hide. m21-m54 sent each
// 16-byte chunk by its own st.async (2304 a tile), which cost the producer 0.8 us a
// tile (session 35 run 2); one copy of the whole half tile after it was stored
// (m55) put the copy's latency on the buffers' round trip.
//
// Per thread: one key row (of the kFillKeys this CTA fills) and every kParts-th
// 16-byte chunk of it, so a warp's load covers 8 (or 16) rows x 64 (32) contiguous
// bytes. Every load of a tile is in flight before the buffer is waited for and
// before the first conversion. A key past the split or of an invalid slot is
// zeros, never read, and flagged 0 for the softmax's mask (e4m3 is exact in bf16;
// an fp8ds value times its group's scale is rounded once, mla/shared_tiles.cuh).
//
// Hand-off per buffer b (mbarriers, one phase per use):
//   full[b]   the 128 producer threads of this CTA arrive after their stores (each
//             fenced to the async proxy that wgmma and the bulk copies read through);
//             crossover: and the peer's bulk copies complete on it (thread 0 expects
//             their bytes).
//   empty[b]  one arrival per math warp of every CTA whose buffer b this producer
//             writes (8, or 16 with the peer's): it may write the next tile then.

#include "common/cluster.cuh"
#include "common/memory.cuh"
#include "common/mma.cuh"
#include "common/tma.cuh"
#include "mla/hopper_config.cuh"
#include "mla/shared_sparse.cuh"
#include "mla/shared_tiles.cuh"

namespace xqajit {
namespace mla_hopper {

constexpr int kProducerThreads = kXqajitMlaHopperProducerThreads;
constexpr int kFillKeys = kTile / kRowCluster;           // keys of a tile one CTA's producer fills
constexpr int kParts = kProducerThreads / kFillKeys;     // producer threads a key row
constexpr u32 kPeerBytes = (u32)(kTile - kFillKeys) * kQk * 2;  // bytes a peer sends a tile
constexpr int kWarpKeys = 32 / kParts;  // key rows one producer warp fills (contiguous)
// Crossover: a warp copies its rows of an fp8 cache's tile to the peer two column blocks at a
// time (m56; H=128 B=128 q_len 2 over fp8ds: one copy of the CTA's whole half tile once it was
// stored (m55) 422 us, groups of three 376, of two 367, of one 374; session 35 runs 5-6). A
// bf16 tile's rows go once they are all stored: two groups cost 3-4 %.
constexpr int kStoredGroup = 2;
static_assert(kRowCluster == 1 || kParts == 4, "crossover: a thread's e4m3 chunk j is column block j");
constexpr int kEmptyArrivals = (kThreads / 32) * kRowCluster;  // math warps reading a buffer
static_assert(kFillKeys * kParts == kProducerThreads, "whole key rows per producer thread group");

// A read-only 16-byte load of a gathered row, with FlashMLA's hints: the L2 fetches the
// row's 256-byte block on the first touch (the row's other loads then hit L2), and L1 keeps
// the line (evict_last) for the row's other threads. m24: fp8ds H=64 B=64 107.8 -> 85 us,
// H=16 98.9 -> 74, bf16 H=128 135 -> 121 (session 25 run 6; L1::no_allocate with the L2
// hint alone: 98.6, 89.5, 131.7).
__device__ __forceinline__ U32x4 load_row_chunk(const unsigned char* p) {
  U32x4 v;
  asm volatile("ld.global.nc.L1::evict_last.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The bf16 chunks of one key row this thread stores into this CTA's buffer. A thread's chunks are
// `fixed + low`: `fixed` a compile-time multiple of the span of `low`, its part of the
// row (low < 8, so the two share no bit). The 128-byte swizzle XORs the chunk's place in
// its atom with key & 7, so a chunk's offset is fixed's column block plus
// (fixed & 7) ^ (low ^ key & 7): one XOR with a per-thread value, not a per-chunk
// offset held in registers for the whole loop (which spilled).
struct RowStore {
  unsigned char* row;  // the key's first 128-byte atom row in this CTA's buffer (generic)
  __device__ __forceinline__ void put(int fixed, u32 low_x, const U32x4& v) const {
    const u32 off = (u32)(fixed >> 3) * kTile * 128 + (((u32)(fixed & 7) ^ low_x) << 4);
    *reinterpret_cast<U32x4*>(row + off) = v;
  }
};

// Crossover: one producer warp's kWarpKeys rows (`rows`: their first 128-byte atom row in
// column block 0 of this CTA's buffer; contiguous in every block) of column blocks
// [first, last) -> the same place in the peer's buffer (`peer_rows`), completing on the peer's
// full barrier: by lane 0, once the warp's stores of those blocks are fenced to the async
// proxy and __syncwarp'd. The buffer is not written again before the peer's math warps, which
// wait for these bytes, have released it. TileProducer::fill's `stored` action there (m56);
// NoPeerCopy without a cluster peer.
struct PeerRowsCopy {
  u32 rows, peer_rows, peer_full;  // shared::cta, shared::cluster, shared::cluster
  bool issuer;                     // lane 0 of the warp
  __device__ __forceinline__ void operator()(int first, int last) const {
    fence_proxy_async();  // this thread's st.shared -> visible to the bulk copies (and wgmma)
    __syncwarp();
    if (!issuer) return;
    for (int cb = first; cb < last; ++cb)
      bulk_copy_to_peer(peer_rows + (u32)cb * kTile * 128, rows + (u32)cb * kTile * 128, kWarpKeys * 128,
                        peer_full);
  }
};
struct NoPeerCopy {
  __device__ __forceinline__ void operator()(int, int) const {}
};

struct TileProducer {
  const unsigned char* kv_base;
  long long stride_page, stride_token;  // elements of the cache type (bytes for fp8)
  int split_begin, split_end;
  mla::SparseList list;   // this CTA's query token's index list
  unsigned char* key_ok;  // [buffer][kTile] flags, 1 where the key's row was read

  // The list entry of key `key` of tile `tile` as it lies in memory (-1 past the split),
  // loaded a tile ahead, and the slot it names (-1 where nothing may be read) only once
  // the tile is filled: checked at once, the entry's load stalled the producer each tile
  // (session 26 run 7, ncu: 8 % of its samples on that compare).
  __device__ __forceinline__ int entry(int tile, int key) const {
    return list.entry_in_split(split_begin + tile * kTile + key, split_end);
  }
  __device__ __forceinline__ int slot(int entry) const { return list.slot_of(entry); }
  __device__ __forceinline__ const unsigned char* row(int slot) const {
    return slot < 0 ? nullptr : kv_base + mla::SparseList::row_offset(slot, stride_page, stride_token) * kCacheBytes;
  }

  // Producer warp 0: the entries of keys lane, lane + 32 of tile `tile` (the peer's keys
  // too: each CTA masks with its own flags), looked up a tile ahead, and once the buffer is
  // free the flags of the keys that were read.
  struct KeyEntries {
    int e[kTile / 32];
  };
  __device__ __forceinline__ KeyEntries key_entries(int tile, int lane) const {
    KeyEntries k;
#pragma unroll
    for (int i = 0; i < kTile / 32; ++i) k.e[i] = entry(tile, i * 32 + lane);
    return k;
  }
  __device__ __forceinline__ void flag_keys(const KeyEntries& k, int buffer, int lane) const {
#pragma unroll
    for (int i = 0; i < kTile / 32; ++i) key_ok[buffer * kTile + i * 32 + lane] = list.valid_slot(k.e[i]) ? 1 : 0;
  }

  // This thread's part of a tile (its key row's slot `s`, looked up a tile ahead; `x`: the
  // key's swizzle, key & 7) -> `out`, once `ready()` says the buffer is free: the loads go
  // out first. Part `part` of kParts takes every kParts-th 16-byte chunk of the row as it
  // lies in global memory, so the row's threads read contiguous bytes together.
  // `stored(first, last)`: this thread has stored its chunks of column blocks [first, last)
  // (called in order, the last call ending at kColBlocks; crossover's copies).
  // After e4m3 chunk j of a thread (bf16 chunks 2 (kParts j + part) + h): the group of
  // kStoredGroup chunks it ends, as column blocks.
  template <class Stored>
  static __device__ __forceinline__ void stored_group(Stored& stored, int j) {
    if ((j + 1) % kStoredGroup == 0) stored((j + 1 - kStoredGroup) * kParts / 4, (j + 1) * kParts / 4);
  }
  // The column blocks after the whole groups of a thread's first n e4m3 chunks.
  template <class Stored>
  static __device__ __forceinline__ void stored_rest(Stored& stored, int n) {
    stored(n / kStoredGroup * kStoredGroup * kParts / 4, kColBlocks);
  }
  template <class Ready, class Stored>
  __device__ __forceinline__ void fill(int s, const RowStore& out, int part, u32 x, Ready ready,
                                       Stored stored) const {
    const unsigned char* const src = row(s);
    const unsigned char* const mine = src + part * 16;
    const U32x4 zero = {0, 0, 0, 0};
    const u32 part_x = (u32)part ^ x;  // bf16 chunks kParts m + part
    if constexpr (!kFp8Cache) {
      // 72 bf16 chunks a row: two rounds of loads, to bound the registers.
      constexpr int kChunks = kQk * 2 / 16, kMine = kChunks / kParts, kRound = kMine / 2;
      static_assert(kMine % 2 == 0, "two equal rounds");
#pragma unroll
      for (int round = 0; round < 2; ++round) {
        U32x4 v[kRound];
#pragma unroll
        for (int j = 0; j < kRound; ++j) v[j] = src ? load_row_chunk(mine + kParts * (round * kRound + j) * 16) : zero;
        if (round == 0) ready();
#pragma unroll
        for (int j = 0; j < kRound; ++j) out.put(kParts * (round * kRound + j), part_x, v[j]);
        if (round == 1) stored(0, kColBlocks);
      }
    } else {
      // e4m3 chunk kParts j + part -> bf16 chunks 2 (kParts j + part) + h.
      const u32 lo_x = (u32)(2 * part) ^ x, hi_x = (u32)(2 * part + 1) ^ x;
      if constexpr (!MLA_FP8DS) {
        constexpr int kMine = kQk / 16 / kParts;
        U32x4 v[kMine];
#pragma unroll
        for (int j = 0; j < kMine; ++j) v[j] = src ? load_row_chunk(mine + kParts * j * 16) : zero;
        ready();
#pragma unroll
        for (int j = 0; j < kMine; ++j) {
          U32x4 lo, hi;
          mla::e4m3x16_to_bf16(v[j], lo, hi);
          out.put(2 * kParts * j, lo_x, lo);
          out.put(2 * kParts * j, hi_x, hi);
          stored_group(stored, j);
        }
        if constexpr (kMine % kStoredGroup != 0) stored_rest(stored, kMine);
      } else {
        // 656-byte rows: 32 e4m3 chunks of the latent, its 4 float32 scales (one chunk, one
        // per 128 values), 8 bf16 chunks of the rope.
        constexpr int kLatent = kV / 16, kRope = (kQk - kV) * 2 / 16, kScaleOff = kV;
        constexpr int kRopeOff = kV + kV / XQAJIT_MLA_FP8DS_GROUP * 4;
        constexpr int kChunksPerGroup = XQAJIT_MLA_FP8DS_GROUP / 16;
        static_assert(kChunksPerGroup % kParts == 0 && kRope % kParts == 0, "a thread's chunks split evenly");
        U32x4 lat[kLatent / kParts], rope[kRope / kParts], scales = zero;
        if (src) scales = load_row_chunk(src + kScaleOff);
#pragma unroll
        for (int j = 0; j < kLatent / kParts; ++j) lat[j] = src ? load_row_chunk(mine + kParts * j * 16) : zero;
#pragma unroll
        for (int j = 0; j < kRope / kParts; ++j) rope[j] = src ? load_row_chunk(mine + kRopeOff + kParts * j * 16) : zero;
        // The latent by bf16 bits (m100): the tile holds value x scale x kDsTileUnit (the math
        // divides it out), so one route serves scales below 2^8 / kDsTileUnit = 2^64: a
        // route for large scales beside it, even never taken, cost the loop 2.5-12 % (session
        // 48 runs 2-3). Values 16 (kParts j + part).. are of group kParts j / kChunksPerGroup.
        const auto group_scale = [](u32 bits) {  // the bits' 2^-120 and the tile's unit folded in, both halves
          const float s = __uint_as_float(bits) * (0x1p120f * kDsTileUnit);
          return pack_f32x2<false>(s, s);
        };
        const u32 scale2[4] = {group_scale(scales.x), group_scale(scales.y), group_scale(scales.z), group_scale(scales.w)};
        ready();
#pragma unroll
        for (int j = 0; j < kLatent / kParts; ++j) {
          U32x4 lo, hi;
          mla::e4m3x16_times_bf16_scale(lat[j], scale2[kParts * j / kChunksPerGroup], lo, hi);
          out.put(2 * kParts * j, lo_x, lo);
          out.put(2 * kParts * j, hi_x, hi);
          stored_group(stored, j);
        }
        constexpr u32 kRopeUnit2 = kDsTileUnitBf16x2;  // the rope's bf16 into the tile's units (exact)
#pragma unroll
        for (int j = 0; j < kRope / kParts; ++j)
          out.put(2 * kLatent + kParts * j, part_x,
                  U32x4{bf16x2_mul(rope[j].x, kRopeUnit2), bf16x2_mul(rope[j].y, kRopeUnit2),
                        bf16x2_mul(rope[j].z, kRopeUnit2), bf16x2_mul(rope[j].w, kRopeUnit2)});
        stored_rest(stored, kLatent / kParts);
      }
    }
  }
};

// The producer warpgroup's loop over the split's tiles: tile t fills buffer t & 1 once every
// math warp reading that buffer is done with tile t - 2. `bars`: full[2] then empty[2], 8
// bytes each, at the same offsets in the peer (crossover). `ptid`: 0..127.
__device__ __forceinline__ void produce_split(const TileProducer& producer, int num_tiles, unsigned char* bufs,
                                              u32 bars, int ptid) {
  const u32 rank = kRowCluster > 1 ? cluster_cta_rank() : 0u;
  const int key = (int)rank * kFillKeys + ptid / kParts, part = ptid % kParts;
  const u32 peer_bufs = kRowCluster > 1 ? peer_smem_addr(smem_addr(bufs), rank ^ 1u) : 0u;
  const u32 peer_bars = kRowCluster > 1 ? peer_smem_addr(bars, rank ^ 1u) : 0u;
  const bool flags = ptid < 32;  // warp 0 also flags the keys
  int next = num_tiles > 0 ? producer.entry(0, key) : -1;
  TileProducer::KeyEntries next_keys{};
  if (flags && num_tiles > 0) next_keys = producer.key_entries(0, ptid);
  for (int t = 0; t < num_tiles; ++t) {
    const int b = t & 1;
    const int s = producer.slot(next);
    const TileProducer::KeyEntries keys = next_keys;
    if (t + 1 < num_tiles) {  // the index loads a tile ahead
      next = producer.entry(t + 1, key);
      if (flags) next_keys = producer.key_entries(t + 1, ptid);
    }
    const RowStore out{bufs + b * kBufBytes + key * 128};
    const auto ready = [&] {
      if (t >= 2) mbarrier_wait_parity(bars + 16 + 8 * b, ((t >> 1) - 1) & 1);
      if (kRowCluster > 1 && ptid == 0) mbarrier_expect_tx(bars + 8 * b, kPeerBytes);
    };
    if constexpr (kRowCluster > 1) {
      const u32 rows = (u32)(b * kBufBytes + ((int)rank * kFillKeys + (ptid >> 5) * kWarpKeys) * 128);
      producer.fill(s, out, part, (u32)key & 7u, ready,
                    PeerRowsCopy{smem_addr(bufs) + rows, peer_bufs + rows, peer_bars + 8 * b, (ptid & 31) == 0});
    } else {
      producer.fill(s, out, part, (u32)key & 7u, ready, NoPeerCopy{});
    }
    if (flags) producer.flag_keys(keys, b, ptid);
    if constexpr (kRowCluster == 1) fence_proxy_async();  // this thread's st.shared -> visible to wgmma
    mbarrier_arrive(bars + 8 * b);  // release: the key flags, the converted rows
  }
}

// The math side of the hand-off: this warp (lane 0 arrives for it) is done with buffer it & 1,
// so the producers that fill it (ours, the peer's) may write tile it + 2 there. Nobody waits
// past the last tile, so no arrival is made then: none reaches a CTA that may have left.
// `bars`: as produce_split's.
__device__ __forceinline__ void release_tile_buffer(u32 bars, int it, int num_tiles, int lane) {
  if (lane == 0 && it + 2 < num_tiles) {
    const u32 empty = bars + 16 + (it & 1) * 8;
    mbarrier_arrive(empty);
    if constexpr (kRowCluster > 1) mbarrier_arrive_remote(peer_smem_addr(empty, cluster_cta_rank() ^ 1u));
  }
}

}  // namespace mla_hopper
}  // namespace xqajit
