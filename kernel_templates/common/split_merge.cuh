#pragma once
// Split-KV (multi-block) mode, shared by every kernel family: each CTA of a
// merge group (one request x head block, several splits of the sequence)
// writes its partial rows (max in log2 units, sum, unnormalised output) to the
// caller's workspace; the last CTA to arrive merges them. The arrival counter
// resets itself, so the workspace is zeroed once at allocation and CUDA-graph
// replays need no memset.
//
// Workspace after the counters (the host sizes it the same way):
//   acc   [num_ctas][num_splits][kRowsPerCta][kDim] float
//   stats [num_ctas][num_splits][kRowsPerCta][2]    float

#include "common/memory.cuh"
#include "common/mma.cuh"
#include "common/types.cuh"

namespace xqajit {

// Where a merge group's splits sit: slots first.. of num_slots.
struct SlotRange {
  long long num_slots, first;
};

template <int kRowsPerCta, int kDim>
struct SplitPartials {
  float* acc;
  float* stats;
  int splits;
  long long cta;  // this CTA's merge group

  __device__ __forceinline__ SplitPartials(float* partial, long long num_ctas, int num_splits, long long cta_id)
      : acc(partial),
        stats(partial + num_ctas * num_splits * kRowsPerCta * kDim),
        splits(num_splits),
        cta(cta_id) {}
  // A group whose slots the caller places (the MLA balanced plan's requests, m77, whose
  // pieces vary in number): acc and stats start at its first slot, as group 0.
  __device__ __forceinline__ SplitPartials(float* partial, SlotRange range, int num_splits)
      : acc(partial + range.first * kRowsPerCta * kDim),
        stats(partial + range.num_slots * kRowsPerCta * kDim + range.first * kRowsPerCta * 2),
        splits(num_splits),
        cta(0) {}

  __device__ __forceinline__ long long slot(int split, int row) const {
    return (cta * splits + split) * kRowsPerCta + row;
  }
  // Element d of split `split`'s partial row `row`, counted from acc (whatever acc's element type).
  __device__ __forceinline__ long long at(int split, int row, int d) const { return slot(split, row) * kDim + d; }
  // Two adjacent values of a partial row (an mma accumulator pair), and the row's stats.
  __device__ __forceinline__ void store_pair(int split, int row, int d, float o0, float o1) const {
    U32x2 v;
    v.x = __float_as_uint(o0);
    v.y = __float_as_uint(o1);
    *reinterpret_cast<U32x2*>(acc + at(split, row, d)) = v;
  }
  __device__ __forceinline__ void store_stats(int split, int row, float row_max, float row_sum) const {
    const long long s = slot(split, row);
    stats[s * 2] = row_max;
    stats[s * 2 + 1] = row_sum;
  }
  // One 4-wide vector of a partial row (d a multiple of 4); d == 0 also writes the stats.
  __device__ __forceinline__ void store(int split, int row, int d, const float (&o)[4], float row_max,
                                        float row_sum) const {
    const long long s = slot(split, row);
    F32x4 v;
    v.x = o[0]; v.y = o[1]; v.z = o[2]; v.w = o[3];
    *reinterpret_cast<F32x4*>(acc + s * kDim + d) = v;
    if (d == 0) {
      stats[s * 2] = row_max;
      stats[s * 2 + 1] = row_sum;
    }
  }
};

// Thread 0's verdict (`is_last()`, which counts or reads the group's arrivals) shared with the
// whole CTA between two barriers; the last resets the counter for the next launch or graph replay
// (every other CTA of the group has arrived, or will not).
template <class IsLast>
__device__ __forceinline__ bool split_last_verdict(unsigned* counter, int* s_flag, IsLast&& is_last) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const bool last = is_last();
    *s_flag = last;
    if (last) *reinterpret_cast<volatile unsigned*>(counter) = 0u;
  }
  __syncthreads();
  return *s_flag != 0;
}

// Called by every thread after its partial rows are stored. Returns (uniformly
// across the CTA) whether this CTA arrived last and must merge; the last one
// resets the counter for the next launch or graph replay. One acq_rel atomic by
// thread 0 orders the CTA's partials (before it through the barrier; a release is
// cumulative) before the count, and every other CTA's partials before the merge's
// reads (after it through the second barrier): no fence per thread.
__device__ __forceinline__ bool split_arrive_last(unsigned* counter, unsigned num_splits, int* s_flag) {
  return split_last_verdict(counter, s_flag, [&] {
    unsigned prev;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(prev) : "l"(counter) : "memory");
    return prev == num_splits - 1u;
  });
}

// Whether every other split of the group has already arrived (split_arrive_last's count, read
// without adding this one): then this is the last, nobody else will count, and the counter is
// reset here. A split that finds so can keep its rows instead of storing them for a merge (the
// MLA balanced plan's last piece, m77c); one that does not stores them and arrives.
__device__ __forceinline__ bool split_others_arrived(unsigned* counter, unsigned num_splits, int* s_flag) {
  return split_last_verdict(counter, s_flag, [&] {
    unsigned arrived;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(arrived) : "l"(counter) : "memory");
    return arrived == num_splits - 1u;
  });
}

// The last CTA's merge of `valid_rows` rows over every split. `smem` (at least
// `smem_bytes` bytes, 16-byte aligned, free to overwrite) stages the stats and,
// when they fit, every partial output: one L2 round trip instead of one per
// split (this tail is serial time for small batches). `store(row, d, o[4],
// row_max, row_sum)` writes one normalised-later 4-wide output vector.
template <int kRowsPerCta, int kDim, int kThreads, typename Store>
__device__ __forceinline__ void split_merge(unsigned char* smem, int smem_bytes,
                                            const SplitPartials<kRowsPerCta, kDim>& p, int valid_rows,
                                            Store&& store) {
  const float kInf = __int_as_float(0x7f800000);
  constexpr int kWarps = kThreads / 32;
  constexpr int kVecs = kDim / 4;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int splits = p.splits;
  float* const stats = reinterpret_cast<float*>(smem);        // [split][row][max, sum]; max -> weight
  float* const row_stats = stats + splits * kRowsPerCta * 2;  // [row][max, sum]
  float* const staged = row_stats + kRowsPerCta * 2;          // [split][valid row][D]
  const int staged_offset = (splits * kRowsPerCta * 2 + kRowsPerCta * 2) * 4;
  const bool stage_acc = staged_offset + splits * valid_rows * kDim * 4 <= smem_bytes;

  // Pass 1: statistics (and partial outputs when they fit) into shared memory.
  {
    const u32 stats_dst = smem_addr(stats);
    const float* const stats_src = p.stats + p.slot(0, 0) * 2;
    for (int i = tid; i < splits * kRowsPerCta / 2; i += kThreads)
      cp_async_16(stats_dst + i * 16, stats_src + i * 4, true);
    if (stage_acc) {
      const u32 acc_dst = smem_addr(staged);
      for (int i = tid; i < splits * valid_rows * kVecs; i += kThreads) {
        const int sp = i / (valid_rows * kVecs), j = i % (valid_rows * kVecs);
        cp_async_16(acc_dst + i * 16, p.acc + p.slot(sp, 0) * kDim + j * 4, true);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();
  // Pass 2: one warp per row, lanes over the splits: the global max and sum;
  // each split's max becomes its weight.
  for (int r = warp; r < valid_rows; r += kWarps) {
    float m = -kInf;
    for (int sp = lane; sp < splits; sp += 32) m = fmaxf(m, stats[(sp * kRowsPerCta + r) * 2]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.f;
    for (int sp = lane; sp < splits; sp += 32) {
      float* const st = stats + (sp * kRowsPerCta + r) * 2;
      const float w = st[0] == -kInf ? 0.f : exp2f(st[0] - m);
      sum += w * st[1];
      st[0] = w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) {
      row_stats[r * 2] = m;
      row_stats[r * 2 + 1] = sum;
    }
  }
  __syncthreads();
  // Pass 3: weighted sum of the partial outputs (from shared memory, or from L2
  // 8 splits at a time when they did not fit).
  constexpr int kBatch = 8;
  for (int i = tid; i < valid_rows * kVecs; i += kThreads) {
    const int r = i / kVecs, d = (i % kVecs) * 4;
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    if (stage_acc) {
      for (int sp = 0; sp < splits; ++sp) {
        const float w = stats[(sp * kRowsPerCta + r) * 2];
        const F32x4 a = *reinterpret_cast<const F32x4*>(staged + (sp * valid_rows + r) * kDim + d);
        o[0] += w * a.x; o[1] += w * a.y; o[2] += w * a.z; o[3] += w * a.w;
      }
    } else {
      for (int s0 = 0; s0 < splits; s0 += kBatch) {
        F32x4 a[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
          if (s0 + j < splits) a[j] = load_cg(p.acc + p.at(s0 + j, r, d));
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          if (s0 + j < splits) {
            const float w = stats[((s0 + j) * kRowsPerCta + r) * 2];
            o[0] += w * a[j].x; o[1] += w * a[j].y; o[2] += w * a[j].z; o[3] += w * a[j].w;
          }
        }
      }
    }
    store(r, d, o, row_stats[r * 2], row_stats[r * 2 + 1]);
  }
}


// Dims d..d + 3 of split `split`'s partial row `row`, through L2 (another grid's or CTA's
// stores); kBf16Acc: the partial rows are bf16, slot x kDim of them from p.acc (the hopper MLA
// backend's, m70).
template <bool kBf16Acc, int kRowsPerCta, int kDim>
__device__ __forceinline__ F32x4 load_partial(const SplitPartials<kRowsPerCta, kDim>& p, int split, int row, int d) {
  if constexpr (kBf16Acc) return load_cg_bf16x4(reinterpret_cast<const u16*>(p.acc) + p.at(split, row, d));
  else return load_cg(p.acc + p.at(split, row, d));
}

// load_partial's vector held as loaded until it is summed: bf16 rows take two registers, not
// four, while in flight (split_merge_rows keeps 8 of them a thread).
template <bool kBf16Acc>
struct PartialVec {
  F32x4 v;
  template <int kRowsPerCta, int kDim>
  __device__ __forceinline__ void load(const SplitPartials<kRowsPerCta, kDim>& p, int split, int row, int d) {
    v = load_partial<false>(p, split, row, d);
  }
  __device__ __forceinline__ F32x4 get() const { return v; }
};
template <>
struct PartialVec<true> {
  u32 lo, hi;
  template <int kRowsPerCta, int kDim>
  __device__ __forceinline__ void load(const SplitPartials<kRowsPerCta, kDim>& p, int split, int row, int d) {
    load_cg_u32x2(reinterpret_cast<const u16*>(p.acc) + p.at(split, row, d), lo, hi);
  }
  __device__ __forceinline__ F32x4 get() const { return widen_bf16x4(lo, hi); }
};

// A warp's statistics of row `row` over every split (at most 64: lanes over the splits, two
// each): split s's weight exp2(max_s - max) into weight[s] (0 for a split that saw no key), and
// the row's output scale `finish(max, sum)` over every split into *row_scale, once a row (lane
// 0), not once an output vector on the merge's tail. `finish` is made before the statistics
// are asked for, so what it reads of its own (a sink) is in flight beside them.
template <int kRowsPerCta, int kDim, class Finish>
__device__ __forceinline__ void split_row_weights(const SplitPartials<kRowsPerCta, kDim>& p, int row, int lane,
                                                  float* weight, float* row_scale, Finish&& finish) {
  const float kInf = __int_as_float(0x7f800000);
  const int splits = p.splits;
  float mx[2], sm[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int sp = lane + 32 * k;
    mx[k] = -kInf;
    sm[k] = 0.f;
    if (sp < splits) load_cg_f32x2(p.stats + p.slot(sp, row) * 2, mx[k], sm[k]);
  }
  float m = fmaxf(mx[0], mx[1]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int sp = lane + 32 * k;
    const float w = mx[k] == -kInf ? 0.f : exp2f(mx[k] - m);
    sum += w * sm[k];
    if (sp < splits) weight[sp] = w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) *row_scale = finish(m, sum);
}

// The merge as a second launch, for families whose partial rows are too large
// for one CTA to read alone (MLA: 2 KB a row and split, so 64 splits of a
// 64-row block are 8 MB for one SM). One CTA of G x kDim / 4 threads (G =
// blockDim.x / (kDim / 4), at most kMaxGroups: the host picks it) merges row
// `row` of merge group p.cta over every split (at most kMaxSplits: the host's
// cap, split_plan.hpp): thread group g sums splits g, g + G, ... over its
// 4-wide vector, so an SM keeps G x more loads in flight (what bounds this
// loop: L2 latency, not bandwidth) -- where there are splits enough to share:
// idle groups cost a short merge its CTAs' latency (KERNEL_NOTES m2). Called
// after pdl_wait(): the partials are the previous grid's. `row_finish(row)` makes the row's
// split_row_weights finish; `store(d, o[4], scale)` writes one 4-wide output vector, o times
// the row's scale. kBf16Acc: the partial rows are bf16, slot x kDim of them from p.acc (the
// hopper MLA backend's, m70).
template <int kRowsPerCta, int kDim, int kMaxSplits, int kMaxGroups, bool kBf16Acc = false, class RowFinish,
          typename Store>
__device__ __forceinline__ void split_merge_row(const SplitPartials<kRowsPerCta, kDim>& p, int row,
                                                RowFinish&& row_finish, Store&& store) {
  constexpr int kVecs = kDim / 4;
  static_assert(kVecs % 32 == 0, "a thread group of kDim / 4 threads: whole warps");
  static_assert(kMaxSplits <= 64, "warp 0 reads two splits' statistics a lane");
  __shared__ float s_weight[kMaxSplits];
  __shared__ float s_scale;                                  // the row's output scale
  __shared__ F32x4 s_part[kMaxGroups > 1 ? kMaxGroups - 1 : 1][kVecs];  // groups 1.. for group 0
  const int tid = threadIdx.x, lane = tid & 31;
  const int splits = p.splits;
  // Group g, vector v: splits g, g + groups, ..., 8 loads in flight at a time.
  const int groups = blockDim.x / kVecs;
  const int g = tid / kVecs, v = tid % kVecs, d = v * 4;
  constexpr int kBatch = 8;
  F32x4 a[kBatch];
  const auto load_batch = [&](int s0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int sp = s0 + j * groups;
      if (sp < splits) a[j] = load_partial<kBf16Acc>(p, sp, row, d);
    }
  };
  // The first batch's rows are asked for before the weights (m85): they need none, so their
  // L2 round trip overlaps warp 0's for the statistics instead of following it.
  load_batch(g);
  if (tid < 32) split_row_weights(p, row, lane, s_weight, &s_scale, row_finish(row));  // warp 0
  __syncthreads();
  float o[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s0 = g; s0 < splits; s0 += kBatch * groups) {
    if (s0 != g) load_batch(s0);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int sp = s0 + j * groups;
      if (sp < splits) {
        const float w = s_weight[sp];
        o[0] += w * a[j].x; o[1] += w * a[j].y; o[2] += w * a[j].z; o[3] += w * a[j].w;
      }
    }
  }
  if (groups > 1) {
    if (g > 0) s_part[g - 1][v] = F32x4{o[0], o[1], o[2], o[3]};
    __syncthreads();
    if (g > 0) return;
    for (int k = 0; k < groups - 1; ++k) {
      const F32x4 a = s_part[k][v];
      o[0] += a.x; o[1] += a.y; o[2] += a.z; o[3] += a.w;
    }
  }
  store(d, o, s_scale);
}

// The merge as a second launch where rows have few splits each (m92): one CTA of 4 x kDim / 4
// threads (kDim / 32 warps) merges the kDim / 32 rows row0.. of merge group p.cta (`num_rows` of
// them real): warp i the statistics of row i, thread group q (of kDim / 4 threads, a 4-wide
// vector each) rows q, q + 4, ..., two splits of each at a time (kDim / 128 x 2 loads in
// flight). split_merge_row's CTA a row launched 4096 CTAs at MLA H=128 B=32 with two splits, and
// what that launch cost was its CTAs' count (~2.3 ns of the GPU's each, session 45 run 3), not
// their loads. Called after pdl_wait(); `store(i, d, o[4], scale)` writes row row0 +
// i's 4-wide output vector times the row's scale; `row_finish` as split_merge_row's.
template <int kRowsPerCta, int kDim, int kMaxSplits, bool kBf16Acc, class RowFinish, typename Store>
__device__ __forceinline__ void split_merge_rows(const SplitPartials<kRowsPerCta, kDim>& p, int row0, int num_rows,
                                                 RowFinish&& row_finish, Store&& store) {
  constexpr int kVecs = kDim / 4;
  constexpr int kRows = kDim / 32;        // a warp each: 4 x kVecs threads
  constexpr int kThreadRows = kRows / 4;  // a thread group's rows
  constexpr int kBatch = 2;               // splits a batch
  static_assert(kVecs % 32 == 0 && kMaxSplits <= 64, "whole warps; two splits' statistics a lane");
  __shared__ float s_weight[kRows][kMaxSplits];
  __shared__ float s_scale[kRows];  // each row's output scale
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int splits = p.splits;
  const int q = tid / kVecs, v = tid % kVecs, d = v * 4;
  PartialVec<kBf16Acc> a[kThreadRows][kBatch];
  const auto load_batch = [&](int s0) {
#pragma unroll
    for (int i = 0; i < kThreadRows; ++i)
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (q + 4 * i < num_rows && s0 + j < splits) a[i][j].load(p, s0 + j, row0 + q + 4 * i, d);
  };
  load_batch(0);  // before the weights, as split_merge_row (m85)
  if (warp < num_rows)
    split_row_weights(p, row0 + warp, lane, s_weight[warp], &s_scale[warp], row_finish(row0 + warp));
  __syncthreads();
  float o[kThreadRows][4] = {};
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    if (s0 > 0) load_batch(s0);
#pragma unroll
    for (int i = 0; i < kThreadRows; ++i)
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int r = q + 4 * i;
        if (r < num_rows && s0 + j < splits) {
          const float w = s_weight[r][s0 + j];
          const F32x4 x = a[i][j].get();
          o[i][0] += w * x.x; o[i][1] += w * x.y; o[i][2] += w * x.z; o[i][3] += w * x.w;
        }
      }
  }
#pragma unroll
  for (int i = 0; i < kThreadRows; ++i) {
    const int r = q + 4 * i;
    if (r < num_rows) store(r, d, o[i], s_scale[r]);
  }
}

}  // namespace xqajit
