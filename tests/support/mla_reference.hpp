#pragma once
// CPU float64 reference for xqajit::mla_decode. Takes the very same
// MlaDecodeParams as the kernel, with every pointer (scale pointers included)
// pointing at HOST copies of the tensors.

#include <vector>

#include "xqajit/ops/mla_decode.hpp"

namespace xqajit::testing {

/// out[b, t, h, 0:512] as a dense [batch, q_len, num_heads, 512] array:
/// logits = q.k * sm_scale * q_scale * kv_scale over the 576 dims of each
/// visible latent row, out = softmax . V * kv_scale with V its first 512 dims;
/// the last q_len keys are drafts (causal, or the mask's bits); a request with
/// no visible key gives zeros. Multithreaded.
std::vector<double> reference_mla_decode(const MlaDecodeParams& host_params);

}  // namespace xqajit::testing
