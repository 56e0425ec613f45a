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

/// The tensors every op's params name alike (q, out, block_table, seq_lens) at fake,
/// 16-byte aligned addresses; the op's caches go at 0x30000 and up.
template <class Params>
void fake_shared_tensors(Params& p) {
  p.q = fake<void>(0x10000);
  p.out = fake<void>(0x20000);
  p.block_table = fake<std::int32_t>(0x50000);
  p.seq_lens = fake<std::int32_t>(0x60000);
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
