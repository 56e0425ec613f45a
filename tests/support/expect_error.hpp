#pragma once
// The SpecError a call throws, so a test can check its field, value and allowed values;
// and the ArgumentError an op's validate() throws for one bad field.

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

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

/// `valid` with `mutate` applied fails validate() with an ArgumentError whose message
/// contains `text` (the op and the field).
template <class Params, class Mutate>
void expect_rejected(Params valid, Mutate&& mutate, const std::string& text) {
  mutate(valid);
  INFO("field " << text);
  CHECK_THROWS_AS(validate(valid), ArgumentError);
  CHECK_THROWS_WITH(validate(valid), Catch::Contains(text));
}

}  // namespace xqajit::test
