#include "xqajit/error.hpp"

#include <fmt/format.h>

namespace xqajit {

SpecError::SpecError(std::string field, std::string value, std::string allowed)
    : Error(fmt::format("invalid spec: {}={} (allowed: {})", field, value, allowed)),
      field_(std::move(field)),
      value_(std::move(value)),
      allowed_(std::move(allowed)) {}

CompileError::CompileError(std::string spec_name, std::vector<std::string> options,
                           std::string log, std::string what)
    : Error(std::move(what)),
      spec_name_(std::move(spec_name)),
      options_(std::move(options)),
      log_(std::move(log)) {}

CudaError::CudaError(std::string call, int code, std::string code_name, std::string file,
                     int line, std::string detail)
    : Error(fmt::format("{}:{}: {} failed with {} ({}){}{}", file, line, call, code_name, code,
                        detail.empty() ? "" : ": ", detail)),
      call_(std::move(call)),
      code_(code),
      code_name_(std::move(code_name)) {}

}  // namespace xqajit
