#pragma once
// The C ABI's one way out: every exported function runs its body through
// guarded(), which turns each xqajit exception type into its XqajitStatus and
// keeps the message (and details) for xqajit_last_error() on this thread.

#include <exception>
#include <map>
#include <memory>
#include <string>

#include "xqajit/c_api.h"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/spec/spec.hpp"

struct XqajitEngine {
  xqajit::Engine* engine;
  std::unique_ptr<xqajit::Engine> owned;  // null for the default engine
};

namespace xqajit::c_api {

/// Records the exception being handled; returns its status. Call only from a catch block.
int record_current_exception();
/// A thread-local buffer for strings handed out through `const char**`.
const char* keep(std::string text);
/// Records an error raised by the C layer itself.
int fail(int status, std::string message);
/// The engine behind a handle (null: the default engine).
Engine& engine_of(XqajitEngine* handle);
/// {"name", "flags", "fields"} of a spec, as JSON text.
std::string spec_result_json(const KernelSpec& spec);
/// The best arch of GPU `device`; throws ArgumentError for a device that does not exist.
Arch device_arch(int device);

template <class Body>
int guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return record_current_exception();
  }
}

}  // namespace xqajit::c_api
