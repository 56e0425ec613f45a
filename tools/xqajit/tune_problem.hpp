#pragma once
// A synthetic launch of one tuning key's shape for `xqajit tune`: device
// buffers allocated once per key and filled with random values (fp8 caches
// with random finite e4m3 bytes, never zeros), every request at the bucket's
// sequence length, block tables a random permutation of the page pool. Sparse
// MLA: the bucket's length is topk; each query token's index list names topk
// distinct slots of its request's pages, and no block table is passed.

#include <cstdint>
#include <variant>

#include "tuning/gpu_scratch.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/ops/mla_decode.hpp"
#include "xqajit/spec/spec.hpp"

namespace xqajit::cli {

constexpr int kTuneKvHeads = 8;  // GQA: KV heads per request on the synthetic shape

class TuneProblem {
 public:
  /// Allocates and fills on `stream` (its context current) and waits for the
  /// fill. Throws xqajit::Error when the shape does not fit `free_bytes`.
  TuneProblem(const detail::CudaApi& api, CUstream stream, const KernelSpec& spec, int batch,
              std::int64_t seq_len, std::size_t free_bytes, std::uint64_t seed);

  bool is_mla() const { return std::holds_alternative<MlaDecodeParams>(params_); }
  const DecodeParams& gqa() const { return std::get<DecodeParams>(params_); }
  const MlaDecodeParams& mla() const { return std::get<MlaDecodeParams>(params_); }
  std::size_t bytes() const { return bytes_; }  ///< device memory held

 private:
  detail::DeviceMemory alloc(std::size_t bytes);
  void fill_random(const detail::DeviceMemory& m, DType type);

  const detail::CudaApi& api_;
  CUstream stream_;
  std::uint64_t seed_;
  std::size_t bytes_ = 0;
  detail::DeviceMemory q_, out_, k_, v_, table_, lens_, mask_, indices_;
  std::variant<DecodeParams, MlaDecodeParams> params_;
};

}  // namespace xqajit::cli
