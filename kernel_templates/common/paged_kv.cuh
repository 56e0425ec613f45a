#pragma once
// Paged KV-cache addressing shared by the kernel families: a request's key at
// position `pos` lives in page block_table[b][pos / page_size], row
// pos % page_size. Positions are clamped into the table row so a lookup can be
// issued before seq_len is known (the table load then never waits on it); the
// caller masks positions past the sequence.

namespace xqajit {

// Sequence length of request b clamped to [0, max_len].
__device__ __forceinline__ int clamped_seq_len(const int* seq_lens, int b, int max_len) {
  int n = seq_lens[b];
  n = n < 0 ? 0 : n;
  return n > max_len ? max_len : n;
}

// Byte address of row `pos` of a paged tensor (head offset already in elements).
template <int kPageSize, int kElemBytes>
__device__ __forceinline__ const unsigned char* paged_row(const unsigned char* base, const int* table_row,
                                                          int pos, int max_len, long long stride_page,
                                                          long long stride_token, long long head_off) {
  const long long page = table_row[(pos < max_len ? pos : max_len - 1) / kPageSize];
  return base + (page * stride_page + (long long)(pos % kPageSize) * stride_token + head_off) * kElemBytes;
}

}  // namespace xqajit
