#pragma once
// The refusals of the fields every op's params spell alike (src/ops/paged_op.hpp's
// checks: require_tensors, check_batch, check_page_table, check_split_knobs), run for
// each op from one of its valid calls; an op's own test adds only its own fields.

#include <cstdint>
#include <string>

#include "support/expect_error.hpp"
#include "support/fake_device.hpp"

namespace xqajit::test {

/// `valid` (a valid call of `op`) with each shared field made bad is refused, the message
/// naming the op and the field.
template <class Params>
void expect_paged_refusals(const Params& valid, const std::string& op) {
  auto refused = [&](void (*mutate)(Params&), const std::string& what) {
    expect_rejected(valid, mutate, op + ": " + what);
  };
  refused([](Params& p) { p.q = nullptr; }, "q is null");
  refused([](Params& p) { p.out = nullptr; }, "out is null");
  refused([](Params& p) { p.q = fake<void>(0x10008); }, "q (0x10008) is not 16-byte aligned");
  refused([](Params& p) { p.out = fake<void>(0x20008); }, "out (0x20008) is not 16-byte aligned");
  refused([](Params& p) { p.block_table = nullptr; }, "block_table is null");
  refused([](Params& p) { p.seq_lens = nullptr; }, "seq_lens is null");
  refused([](Params& p) { p.batch = 0; }, "batch");
  refused([](Params& p) { p.batch = 65536; }, "batch");
  refused([](Params& p) { p.q_len = 0; }, "q_len");
  refused([](Params& p) { p.max_pages_per_seq = 0; }, "max_pages_per_seq");
  refused([](Params& p) { p.block_table_stride = p.max_pages_per_seq - 1; }, "block_table_stride");
  refused([](Params& p) { p.max_pages_per_seq = (1 << 30) / p.page_size + 1; }, "max_pages_per_seq");
  refused([](Params& p) { p.num_pages = -1; }, "num_pages");
  refused([](Params& p) { p.num_splits = -1; }, "num_splits");
  refused([](Params& p) { p.num_splits = 65; }, "num_splits");
  refused([](Params& p) { p.kv_tile = 48; }, "kv_tile");
}

}  // namespace xqajit::test
