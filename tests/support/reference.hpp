#pragma once
// CPU float64 reference for xqajit::decode, plus host-side element conversions.
// The reference takes the very same DecodeParams as the kernel, with every
// pointer (scale pointers included) pointing at HOST copies of the tensors.

#include <cstdint>
#include <vector>

#include "xqajit/ops/decode.hpp"

namespace xqajit::testing {

float half_to_float(std::uint16_t h);
float bf16_to_float(std::uint16_t h);
float e4m3_to_float(std::uint8_t v);
std::uint16_t float_to_half(float f);   // round to nearest even
std::uint16_t float_to_bf16(float f);   // round to nearest even
std::uint8_t float_to_e4m3(float f);    // round to nearest even, saturating to +-448

/// Element `index` of an array of `dtype`, as a double.
double load_element(DType dtype, const void* base, std::int64_t index);
/// Stores `value` (rounded) as element `index` of an array of `dtype`.
void store_element(DType dtype, void* base, std::int64_t index, double value);

/// out[b, t, hq, d] as a dense [batch, q_len, num_q_heads, head_dim] array.
/// Implements DESIGN.md's semantics: scales, spec-dec mask, sliding window,
/// sinks; a request with no visible key gives zeros. `lse` (when given) gets each row's
/// ln sum exp(scaled logit) as [batch, q_len, num_q_heads], +inf for a row that sees no
/// key, the sink not included. Multithreaded.
std::vector<double> reference_decode(const DecodeParams& host_params, std::vector<double>* lse = nullptr);

/// ||a - b|| / ||b|| over all elements (0 when both are all zeros; +inf when
/// `a` has a NaN or b is zero and a is not).
double relative_error(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace xqajit::testing
