#include "tune_problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "tuning/topk_lists.hpp"
#include "xqajit/error.hpp"

namespace xqajit::cli {
namespace {

constexpr std::size_t kChunk = std::size_t{8} << 20;  // random bytes generated on the host per buffer

// Random finite values with magnitudes in about [2^-5, 2], built bit by bit
// (no conversions): fp16 exponent 10..15 of bias 15, bf16 122..127 of bias
// 127, e4m3 exponent 2..8 of bias 7 (never the NaN pattern S.1111.111).
std::vector<unsigned char> random_bytes(DType type, std::size_t bytes, std::mt19937_64& rng) {
  std::vector<unsigned char> out(bytes);
  if (type == DType::fp8 || type == DType::fp8ds) {  // fp8ds: its scales are finite floats of such bytes
    for (auto& b : out) {
      const auto r = rng();
      b = static_cast<unsigned char>(((r & 1) << 7) | ((2 + (r >> 1) % 7) << 3) | ((r >> 8) & 7));
    }
    return out;
  }
  for (std::size_t i = 0; i + 1 < bytes; i += 2) {
    const auto r = rng();
    std::uint16_t w;
    if (type == DType::fp16)
      w = static_cast<std::uint16_t>(((r & 1) << 15) | ((10 + (r >> 1) % 6) << 10) | ((r >> 8) & 0x3ff));
    else
      w = static_cast<std::uint16_t>(((r & 1) << 15) | ((122 + (r >> 1) % 6) << 7) | ((r >> 8) & 0x7f));
    out[i] = static_cast<unsigned char>(w & 0xff);
    out[i + 1] = static_cast<unsigned char>(w >> 8);
  }
  return out;
}

}  // namespace

TuneProblem::TuneProblem(const detail::CudaApi& api, CUstream stream, const KernelSpec& s, int batch,
                         std::int64_t seq_len, std::size_t free_bytes, std::uint64_t seed)
    : api_(api), stream_(stream), seed_(seed) {
  const int pages_per_seq = static_cast<int>((seq_len + s.page_size - 1) / s.page_size);
  const std::int64_t pages = static_cast<std::int64_t>(batch) * pages_per_seq;
  const std::size_t tokens = static_cast<std::size_t>(pages) * s.page_size;
  const bool mla = s.kind == Kind::mla;
  const std::size_t q_elems =
      static_cast<std::size_t>(batch) * s.q_len * (mla ? s.group * 576 : kTuneKvHeads * s.group * s.head_dim);
  const std::size_t out_bytes =
      mla ? static_cast<std::size_t>(batch) * s.q_len * s.group * 512 * 2 : q_elems * dtype_bytes(s.output);
  const std::size_t kv_bytes =
      tokens * (mla ? (s.kv == DType::fp8ds ? 656 : 576) : kTuneKvHeads * s.head_dim) * dtype_bytes(s.kv);
  const std::size_t index_bytes = s.sparse ? static_cast<std::size_t>(batch) * s.q_len * seq_len * 4 : 0;
  const std::size_t need =
      q_elems * dtype_bytes(s.input) + out_bytes + kv_bytes * (mla ? 1 : 2) + pages * 4 + index_bytes;
  if (need > free_bytes)
    throw Error(
        fmt::format("batch {} x seq_len {} needs {:.1f} GiB of device memory, more than the {:.1f} GiB the "
                    "tuner allows itself: skipped",
                    batch, seq_len, need / 1073741824.0, free_bytes / 1073741824.0));

  // Block tables: a random permutation of the pool, as pages come from a free list.
  std::vector<std::int32_t> table(static_cast<std::size_t>(pages));
  std::iota(table.begin(), table.end(), 0);
  std::mt19937_64 rng(seed_);
  std::shuffle(table.begin(), table.end(), rng);
  const std::vector<std::int32_t> lens(static_cast<std::size_t>(batch), static_cast<std::int32_t>(seq_len));
  table_ = alloc(table.size() * 4), lens_ = alloc(lens.size() * 4);
  XQAJIT_CU_CHECK(api_, cuMemcpyHtoD(table_.ptr(), table.data(), table.size() * 4));
  XQAJIT_CU_CHECK(api_, cuMemcpyHtoD(lens_.ptr(), lens.data(), lens.size() * 4));

  q_ = alloc(q_elems * dtype_bytes(s.input));
  out_ = alloc(out_bytes);
  k_ = alloc(kv_bytes);
  fill_random(q_, s.input);
  fill_random(k_, s.kv);
  XQAJIT_CU_CHECK(api_, cuMemsetD8Async(out_.ptr(), 0xff, out_.bytes(), stream_));  // NaN-ish poison

  if (mla) {
    MlaDecodeParams p;
    p.input = s.input, p.kv = s.kv;
    p.batch = batch, p.q_len = s.q_len, p.num_heads = s.group, p.page_size = s.page_size;
    p.max_pages_per_seq = pages_per_seq, p.num_pages = static_cast<int>(pages);
    p.sm_scale = 1.f / std::sqrt(192.f);
    p.q = q_.get(), p.out = out_.get(), p.kv_cache = k_.get();
    p.block_table = static_cast<const std::int32_t*>(table_.get());
    p.seq_lens = static_cast<const std::int32_t*>(lens_.get());
    if (s.sparse) {  // DSA: seq_len is topk (the plan's length bucket), each request's pages hold it
      const std::vector<std::int32_t> indices = topk_index_lists(
          batch, s.q_len, static_cast<int>(seq_len), pages_per_seq * s.page_size, rng,
          [&](int b, int key) {
            return table[static_cast<std::size_t>(b) * pages_per_seq + key / s.page_size] * s.page_size +
                   key % s.page_size;
          },
          [] { return false; });
      indices_ = alloc(indices.size() * 4);
      XQAJIT_CU_CHECK(api_, cuMemcpyHtoD(indices_.ptr(), indices.data(), indices.size() * 4));
      p.indices = static_cast<const std::int32_t*>(indices_.get());
      p.topk = static_cast<int>(seq_len);
      p.block_table = nullptr, p.seq_lens = nullptr, p.max_pages_per_seq = 0;
    }
    params_ = p;  // q_len > 1 with no mask: causal drafts
  } else {
    v_ = alloc(kv_bytes);
    fill_random(v_, s.kv);
    DecodeParams p;
    p.input = s.input, p.kv = s.kv, p.output = s.output;
    p.batch = batch, p.q_len = s.q_len, p.num_kv_heads = kTuneKvHeads, p.num_q_heads = kTuneKvHeads * s.group;
    p.head_dim = s.head_dim, p.page_size = s.page_size, p.max_pages_per_seq = pages_per_seq;
    p.num_pages = static_cast<int>(pages);
    p.q_scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
    if (s.sliding_window) p.sliding_window = 4096;
    if (s.q_len > 1) {  // a causal mask over the drafts: row i sees drafts 0..i
      const int words = (s.q_len + 31) / 32;
      std::vector<std::uint32_t> mask(static_cast<std::size_t>(batch) * s.q_len * words, 0);
      for (int b = 0; b < batch; ++b)
        for (int i = 0; i < s.q_len; ++i)
          for (int j = 0; j <= i; ++j)
            mask[(static_cast<std::size_t>(b) * s.q_len + i) * words + j / 32] |= 1u << (j % 32);
      mask_ = alloc(mask.size() * 4);
      XQAJIT_CU_CHECK(api_, cuMemcpyHtoD(mask_.ptr(), mask.data(), mask.size() * 4));
      p.spec_mask = static_cast<const std::uint32_t*>(mask_.get());
    }
    p.q = q_.get(), p.out = out_.get(), p.k_cache = k_.get(), p.v_cache = v_.get();
    p.block_table = static_cast<const std::int32_t*>(table_.get());
    p.seq_lens = static_cast<const std::int32_t*>(lens_.get());
    params_ = p;
  }
  // The copies ran on the legacy stream, the poison on `stream_`: wait for both.
  XQAJIT_CU_CHECK(api_, cuStreamSynchronize(nullptr));
  XQAJIT_CU_CHECK(api_, cuStreamSynchronize(stream_));
}

detail::DeviceMemory TuneProblem::alloc(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 256);
  bytes_ += bytes;
  return detail::DeviceMemory(api_, bytes);
}

// One host chunk of random values, copied in, then doubled on the device
// (chunk, 2 chunks, 4 ...): random everywhere, at device-copy speed.
void TuneProblem::fill_random(const detail::DeviceMemory& m, DType type) {
  std::mt19937_64 rng(seed_++);
  const std::size_t first = std::min(kChunk, m.bytes());
  const auto host = random_bytes(type, first, rng);
  XQAJIT_CU_CHECK(api_, cuMemcpyHtoD(m.ptr(), host.data(), first));
  for (std::size_t done = first; done < m.bytes();) {
    const std::size_t n = std::min(done, m.bytes() - done);
    XQAJIT_CU_CHECK(api_, cuMemcpyDtoD(m.ptr() + done, m.ptr(), n));
    done += n;
  }
}

}  // namespace xqajit::cli
