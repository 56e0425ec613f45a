#include "xqajit/compile/compiler.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>

#include "util/log.hpp"
#include "compile/nvrtc_api.hpp"
#include "xqajit/error.hpp"

namespace xqajit {
namespace {

/// Owns an nvrtcProgram, so nothing leaks when a step throws.
class Program {
 public:
  Program(const detail::NvrtcApi& api, nvrtcProgram p) : api_(api), prog_(p) {}
  ~Program() { api_.nvrtcDestroyProgram(&prog_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }

 private:
  const detail::NvrtcApi& api_;
  nvrtcProgram prog_;
};

std::string program_log(const detail::NvrtcApi& api, nvrtcProgram prog) {
  size_t size = 0;
  if (api.nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  if (api.nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

std::string kernel_symbol(const KernelSpec& spec) {
  return spec.kind == Kind::gqa ? "xqajit_gqa_decode" : "xqajit_mla_decode";
}

std::string merge_kernel_symbol(const KernelSpec& spec) {
  return spec.kind == Kind::mla ? "xqajit_mla_merge" : "";
}

std::string merge_rows_kernel_symbol(const KernelSpec& spec) {
  return spec.kind == Kind::mla && spec.backend == Backend::hopper ? "xqajit_mla_merge_rows" : "";
}

std::string kernel_main_file(const KernelSpec& spec) {
  if (spec.kind == Kind::gqa) return spec.backend == Backend::hopper ? "gqa_decode_hopper.cu" : "gqa_decode.cu";
  return spec.backend == Backend::hopper ? "mla_decode_hopper.cu" : "mla_decode_portable.cu";
}

Compiler::Compiler(TemplateSet templates, std::string libnvrtc_path)
    : templates_(std::move(templates)), libnvrtc_path_(std::move(libnvrtc_path)) {}

bool Compiler::available() const {
  try {
    detail::nvrtc_api(libnvrtc_path_);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string Compiler::nvrtc_version() const { return detail::nvrtc_api(libnvrtc_path_).version; }

std::vector<int> Compiler::supported_archs() const {
  return detail::nvrtc_api(libnvrtc_path_).supported_archs;
}

std::vector<std::string> Compiler::options_for(const KernelSpec& spec) const {
  std::vector<std::string> opts = {
      "-std=c++17",
      // sm_XX (not compute_XX) makes NVRTC emit SASS: no PTX JIT at load time,
      // and shared-memory limits are those of exactly this arch.
      fmt::format("-arch=sm_{}{}", spec.arch.number(), spec.arch.accel ? "a" : ""),
      "-default-device",
      "-DXQAJIT_NVRTC=1",
  };
  for (auto& f : flags(spec)) opts.push_back(std::move(f));
  return opts;
}

CompiledKernel Compiler::compile(const KernelSpec& requested) const {
  const auto start = std::chrono::steady_clock::now();
  const detail::NvrtcApi& api = detail::nvrtc_api(libnvrtc_path_);
  const KernelSpec spec = normalized(requested, api.supported_archs);
  CompiledKernel out;
  out.name = canonical_name(spec);
  out.options = options_for(spec);

  const std::string main_path = kernel_main_file(spec);
  const TemplateFile* main = templates_.find(main_path);
  if (!main)
    throw CompileError(out.name, out.options, "",
                       fmt::format("cannot compile {}: the kernel templates ({}) have no {} for kind={}",
                                   out.name, templates_.origin(), main_path, to_string(spec.kind)));

  // Every template is handed to NVRTC as a named header, so #include "x/y.cuh"
  // resolves with no file system and no toolkit include path.
  std::vector<const char*> header_texts, header_names;
  for (const auto& f : templates_.files()) {
    if (&f == main) continue;
    header_texts.push_back(f.text.c_str());
    header_names.push_back(f.path.c_str());
  }
  nvrtcProgram raw = nullptr;
  XQAJIT_NVRTC_CHECK(api, nvrtcCreateProgram(&raw, main->text.c_str(), main_path.c_str(),
                                             static_cast<int>(header_texts.size()),
                                             header_texts.data(), header_names.data()));
  Program prog(api, raw);

  std::vector<const char*> argv;
  for (const auto& o : out.options) argv.push_back(o.c_str());
  const nvrtcResult res = api.nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  out.log = program_log(api, prog.get());
  if (res != NVRTC_SUCCESS)
    throw CompileError(out.name, out.options, out.log,
                       fmt::format("NVRTC failed to compile {} ({})\noptions: {}\nlog:\n{}", out.name,
                                   api.nvrtcGetErrorString(res), fmt::join(out.options, " "), out.log));

  size_t size = 0;
  XQAJIT_NVRTC_CHECK(api, nvrtcGetCUBINSize(prog.get(), &size));
  out.cubin.resize(size);
  XQAJIT_NVRTC_CHECK(api, nvrtcGetCUBIN(prog.get(), out.cubin.data()));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  detail::logger()->info("compiled {} in {:.2f} s ({} bytes)", out.name, out.seconds, size);
  if (!out.log.empty()) detail::logger()->debug("NVRTC log for {}:\n{}", out.name, out.log);
  return out;
}

}  // namespace xqajit
