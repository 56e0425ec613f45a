#pragma once
/// One exception hierarchy for everything xqajit throws. Every message is meant
/// to be read by a person: it says what went wrong and what to do about it.

#include <stdexcept>
#include <string>
#include <vector>

namespace xqajit {

/// Base of every xqajit exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A spec field has an invalid value, or fields form an invalid combination.
class SpecError : public Error {
 public:
  SpecError(std::string field, std::string value, std::string allowed);
  const std::string& field() const noexcept { return field_; }
  const std::string& value() const noexcept { return value_; }
  const std::string& allowed() const noexcept { return allowed_; }

 private:
  std::string field_, value_, allowed_;
};

/// NVRTC rejected a kernel. Carries everything needed to reproduce it.
class CompileError : public Error {
 public:
  CompileError(std::string spec_name, std::vector<std::string> options, std::string log,
               std::string what);
  const std::string& spec_name() const noexcept { return spec_name_; }
  const std::vector<std::string>& options() const noexcept { return options_; }
  const std::string& log() const noexcept { return log_; }

 private:
  std::string spec_name_;
  std::vector<std::string> options_;
  std::string log_;
};

/// A CUDA driver or NVRTC call failed.
class CudaError : public Error {
 public:
  CudaError(std::string call, int code, std::string code_name, std::string file, int line,
            std::string detail = {});
  const std::string& call() const noexcept { return call_; }
  int code() const noexcept { return code_; }
  const std::string& code_name() const noexcept { return code_name_; }

 private:
  std::string call_;
  int code_;
  std::string code_name_;
};

/// A shared library (libcuda, libnvrtc) could not be loaded.
class LibraryError : public Error {
 public:
  using Error::Error;
};

/// The on-disk cache could not do what was asked (never thrown for a miss).
class CacheError : public Error {
 public:
  using Error::Error;
};

/// The remote cache could not be reached or refused a command. The engine never
/// lets it escape (it carries on locally); the CLI's remote commands report it.
class RemoteError : public Error {
 public:
  using Error::Error;
};

/// A bundle file is malformed; names the file and, where known, the entry.
class BundleError : public Error {
 public:
  using Error::Error;
};

/// Launch arguments are invalid (null pointer, mismatched dtype, bad stride...).
class ArgumentError : public Error {
 public:
  using Error::Error;
};

/// The kernel is not available and compiling is not allowed (no-compile mode,
/// or the stream is being captured into a CUDA graph).
class NotAvailableError : public Error {
 public:
  using Error::Error;
};

}  // namespace xqajit
