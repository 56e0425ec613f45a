#pragma once
// Device descriptions for CPU tests of the launchers' plans (no driver touched),
// and fake but aligned device addresses that validate() never dereferences.

#include <cstdint>

#include "xqajit/runtime/driver.hpp"

namespace xqajit::test {

template <class T>
T* fake(std::uintptr_t a) {
  return reinterpret_cast<T*>(a);
}

/// The part of a valid call every op's params spell alike: q, out, block_table and
/// seq_lens at fake, 16-byte aligned addresses (the op's caches go at 0x30000 and up),
/// `batch` requests of up to `pages_per_seq` pages of `page_size` keys, `num_pages` pages.
template <class Params>
void fake_paged_call(Params& p, int batch, int page_size, int pages_per_seq, int num_pages) {
  p.q = fake<void>(0x10000);
  p.out = fake<void>(0x20000);
  p.block_table = fake<std::int32_t>(0x50000);
  p.seq_lens = fake<std::int32_t>(0x60000);
  p.batch = batch;
  p.page_size = page_size;
  p.max_pages_per_seq = pages_per_seq;
  p.num_pages = num_pages;
}

inline DeviceInfo fake_device(const char* name, int cc_major, int sm_count, int smem_optin) {
  DeviceInfo d;
  d.name = name;
  d.cc_major = cc_major;
  d.sm_count = sm_count;
  d.max_smem_per_block_optin = smem_optin;
  return d;
}
inline DeviceInfo h100() { return fake_device("fake H100", 9, 132, 232448); }
inline DeviceInfo rtx_sm120() { return fake_device("fake sm_120", 12, 84, 101376); }
inline DeviceInfo a100() { return fake_device("fake A100", 8, 108, 166912); }

}  // namespace xqajit::test
