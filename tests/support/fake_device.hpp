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
