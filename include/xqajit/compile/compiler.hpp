#pragma once
/// NVRTC: kernel templates + spec flags -> cubin for the spec's arch.
/// libnvrtc is loaded with dlopen on first use (see src/compile/nvrtc_api.hpp).

#include <string>
#include <vector>

#include "xqajit/spec/spec.hpp"
#include "xqajit/compile/templates.hpp"

namespace xqajit {

struct CompiledKernel {
  std::string name;                  // canonical spec name
  std::vector<char> cubin;
  std::string log;                   // NVRTC's log (warnings), possibly empty
  std::vector<std::string> options;  // the exact NVRTC options used
  double seconds = 0;
};

/// The entry-point symbol of a spec's kernel (extern "C", so unmangled).
std::string kernel_symbol(const KernelSpec& spec);
/// The symbol of the same module's split-merge kernel, or "" where the family has
/// none (GQA merges in the decode kernel; MLA may merge in a second launch).
std::string merge_kernel_symbol(const KernelSpec& spec);
/// The symbol of the module's merge kernel of several rows a CTA (MLA hopper:
/// xqajit_mla_merge_rows, MlaDecodePlan::merge_rows), or "" where it has none.
std::string merge_rows_kernel_symbol(const KernelSpec& spec);
/// The template file that is the compilation unit for a spec's kind.
std::string kernel_main_file(const KernelSpec& spec);

class Compiler {
 public:
  /// `libnvrtc_path` overrides the library search (Options::libnvrtc_path).
  Compiler(TemplateSet templates, std::string libnvrtc_path = {});

  /// Thread-safe. Throws SpecError, CompileError (with the full log) or LibraryError.
  CompiledKernel compile(const KernelSpec& spec) const;

  /// Whether libnvrtc can be loaded (never throws).
  bool available() const;
  /// "13.0"; throws LibraryError when NVRTC is missing.
  std::string nvrtc_version() const;
  /// nvrtcGetSupportedArchs(), e.g. {75, 80, ..., 121}; throws LibraryError when missing.
  std::vector<int> supported_archs() const;
  const TemplateSet& templates() const { return templates_; }
  /// NVRTC options for a spec (flags + arch + fixed options), without compiling.
  std::vector<std::string> options_for(const KernelSpec& spec) const;

 private:
  TemplateSet templates_;
  std::string libnvrtc_path_;
};

}  // namespace xqajit
