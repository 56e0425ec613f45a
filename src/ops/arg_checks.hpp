#pragma once
// Argument checks shared by the typed launchers: every message starts with the
// operation and names the field, the value and what is allowed.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "xqajit/error.hpp"

namespace xqajit::ops {

[[noreturn]] inline void fail(const char* op, const char* field, const std::string& why) {
  throw ArgumentError(fmt::format("{}: {} {}", op, field, why));
}

inline void require_ptr(const char* op, const void* p, const char* field, bool aligned16 = true) {
  if (p == nullptr) fail(op, field, "is null");
  if (aligned16 && reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
    fail(op, field, fmt::format("({}) is not 16-byte aligned", p));
}

inline bool one_of(int v, std::initializer_list<int> allowed) {
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

struct Dim {
  std::int64_t extent, stride;
  const char* name;
};

// Strides (in elements) must keep 16-byte rows aligned and must not make two
// elements alias. `row` elements (named `row_name`) are contiguous.
template <std::size_t N>
void check_strides(const char* op, const char* tensor, std::array<Dim, N> dims, int row, int elem_bytes,
                   const char* row_name = "head_dim") {
  const int align = 16 / elem_bytes;
  for (const Dim& d : dims) {
    if (d.stride <= 0) fail(op, d.name, fmt::format("= {} must be positive", d.stride));
    if (d.stride % align != 0)
      fail(op, d.name, fmt::format("= {} must be a multiple of {} elements (16 bytes) for {}", d.stride, align,
                                   tensor));
  }
  std::array<Dim, N + 1> all;
  all[0] = Dim{row, 1, row_name};
  std::copy(dims.begin(), dims.end(), all.begin() + 1);
  std::sort(all.begin(), all.end(), [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  for (std::size_t i = 1; i < all.size(); ++i) {
    const Dim& prev = all[i - 1];
    if (prev.extent > 1 && all[i].extent > 1 && all[i].stride < prev.stride * prev.extent)
      fail(op, all[i].name, fmt::format("= {} makes {} overlap itself: {} spans {} x {} elements", all[i].stride,
                                        tensor, prev.name, prev.extent, prev.stride));
  }
}

}  // namespace xqajit::ops
