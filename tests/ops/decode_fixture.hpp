#pragma once
// A valid decode call at fake device addresses (validate() never dereferences them):
// batch 4, 32 Q heads over 8 KV heads of 128, bf16, 16 pages of 64 tokens a request.
// The launcher's CPU tests (test_decode_args, test_decode_plan, test_decode_launch_options)
// start from it and change one thing at a time.

#include <cstdint>

#include "support/fake_device.hpp"
#include "xqajit/ops/decode.hpp"

namespace xqajit::test {

inline DecodeParams valid_params() {
  DecodeParams p;
  fake_paged_call(p, 4, 64, 16, 100);
  p.k_cache = fake<void>(0x30000);
  p.v_cache = fake<void>(0x40000);
  p.input = p.kv = p.output = DType::bf16;
  p.num_q_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  return p;
}

}  // namespace xqajit::test
