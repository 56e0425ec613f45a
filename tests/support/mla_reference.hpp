#pragma once
// CPU float64 reference for xqajit::mla_decode. Takes the very same
// MlaDecodeParams as the kernel, with every pointer (scale pointers included)
// pointing at HOST copies of the tensors.

#include <vector>

#include "xqajit/ops/mla_decode.hpp"

namespace xqajit::testing {

/// out[b, t, h, 0:512] as a dense [batch, q_len, num_heads, 512] array:
/// logits = q.k * sm_scale * q_scale * kv_scale over the 576 dims of each
/// visible latent row, out = softmax . V * kv_scale with V its first 512 dims.
/// Dense: the last q_len keys are drafts (causal, or the mask's bits). Sparse
/// (params.indices set): row (t, h) sees the valid slots of token t's list (the
/// first topk_length[b] entries when set; a slot outside [0, num_pages * page_size)
/// is skipped; duplicates count twice). A row with no visible key gives zeros.
/// With params.attn_sink, out is scaled by 1 / (1 + exp(sink[h] - lse)).
/// `lse` (when not null) receives [batch, q_len, num_heads]: ln sum exp(logits),
/// +inf for a row with no visible key. Multithreaded.
/// kv = fp8ds: each cached row is 656 bytes (strides in bytes), decoded by fp8ds_row_value
/// (e4m3 latent value times its group's float32 scale, rounded to bf16 as FlashMLA's
/// dequantisation and the kernels that convert into a bf16 tile do -- Fp8dsValues::bf16 --,
/// the same with the scale rounded to bf16 first, as the hopper producer's bits conversion
/// does (m100; equal for power-of-two scales) -- Fp8dsValues::bf16_scale --, or exact, as
/// the hopper kernel's 16-row CTAs multiply them in fp32 -- Fp8dsValues::exact; the bf16 rope
/// as it is).
enum class Fp8dsValues { bf16, bf16_scale, exact };
/// Value d (0..575) of one fp8ds row (656 bytes: 512 e4m3, 4 float32 scales, 64 bf16).
double fp8ds_row_value(const unsigned char* row, int d, Fp8dsValues values = Fp8dsValues::bf16);

std::vector<double> reference_mla_decode(const MlaDecodeParams& host_params, std::vector<double>* lse = nullptr,
                                         Fp8dsValues fp8ds_values = Fp8dsValues::bf16);

}  // namespace xqajit::testing
