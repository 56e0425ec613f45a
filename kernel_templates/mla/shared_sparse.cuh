#pragma once
// Sparse MLA (DSA, DeepSeek-V3.2), the pieces any MLA kernel with MLA_SPARSE=1 uses:
// one query token's index list. Key k of token t of request b is cache slot
// slots[k] for k < length; a slot outside [0, num_slots) (-1 marks one) is skipped:
// its row is never read (zero-filled) and its logit is masked, so a list with no
// valid slot leaves the row's max at -inf (zeros out, lse +inf).
// Splits and tiles walk list positions exactly as dense kernels walk the sequence.

#include "mla/shared_flags.cuh"
#include "xqajit/mla_args.h"

namespace xqajit {
namespace mla {

struct SparseList {
  const int* slots;  // token t's list of request b
  int length;        // entries that count: topk, or clamp(topk_length[b], 0, topk)
  int num_slots;     // slots the cache holds (num_pages * page size)

  __device__ __forceinline__ bool valid_slot(int slot) const { return (unsigned)slot < (unsigned)num_slots; }
  // The slot a list entry names, or -1 where it must not be read.
  __device__ __forceinline__ int slot_of(int entry) const { return valid_slot(entry) ? entry : -1; }
  // The slot of list position `pos` (< length).
  __device__ __forceinline__ int slot_at(int pos) const { return slot_of(slots[pos]); }
  // The entry of a position of a split ending at `end` as it lies in memory, -1 past it:
  // for a loader that loads entries ahead and checks them (slot_of) when it uses them.
  __device__ __forceinline__ int entry_in_split(int pos, int end) const { return pos < end ? slots[pos] : -1; }
  // The same for a position of a split ending at `end` (<= length): -1 past it too.
  __device__ __forceinline__ int slot_in_split(int pos, int end) const { return pos < end ? slot_at(pos) : -1; }
  // Elements of the cache type from the cache's base to valid slot `slot`'s row: row
  // slot % page size of page slot / page size (no block table: slots name pages directly).
  __device__ __forceinline__ static long long row_offset(int slot, long long stride_page, long long stride_token) {
    return (long long)(slot / kPageSize) * stride_page + (long long)(slot % kPageSize) * stride_token;
  }
};

__device__ __forceinline__ SparseList sparse_list(const XqajitMlaArgs& args, int b, int t) {
  SparseList l;
  l.slots = args.indices + (long long)b * args.indices_stride_batch + (long long)t * args.indices_stride_token;
  int n = args.topk;
  if (args.topk_length != nullptr) {
    const int want = args.topk_length[b];
    n = want < 0 ? 0 : want < n ? want : n;
  }
  l.length = n;
  l.num_slots = args.num_slots;
  return l;
}

}  // namespace mla
}  // namespace xqajit
