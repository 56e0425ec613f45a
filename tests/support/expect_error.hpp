#pragma once
// The SpecError a call throws, so a test can check its field, value and allowed values.

#include <catch2/catch.hpp>

#include <stdexcept>

#include "xqajit/error.hpp"

namespace xqajit::test {

template <typename Fn>
SpecError spec_error(Fn&& fn) {
  try {
    fn();
  } catch (const SpecError& e) {
    return e;
  }
  FAIL("expected a SpecError");
  throw std::logic_error("unreachable");
}

}  // namespace xqajit::test
