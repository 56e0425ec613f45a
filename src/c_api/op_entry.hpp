#pragma once
// What every op's C entry points share (include/xqajit/c_api.h): the struct-size
// handshake, the dtype codes, the fields every op's args struct and params spell
// alike, and the four entry points (launch, validate, workspace size, spec). An
// op's c_api/<op>.cpp keeps only an OpAbi (its args struct, its own fields and names) and
// XQAJIT_C_API_OP_ENTRY_POINTS(<op>, <Op>Abi).
//
// An OpAbi is a struct deriving from
//   OpBinding<XqajitFooArgs, FooParams, &foo, &foo_workspace_size, &foo_spec>
// (its Args and Params, and run / workspace_size / spec / validate calling the launcher) with
//   static constexpr const char* kName = "foo";           // messages: "foo: ..."
//   static constexpr const char* kArgsName = "XqajitFooArgs";
//   static void fill(const Args&, Params&);               // the op's own fields
// and, where an op's entry point differs, its own run / workspace_size / spec / validate.

#include <cstdint>
#include <string>

#include "c_api/guard.hpp"
#include "xqajit/runtime/driver.hpp"
#include "xqajit/error.hpp"

namespace xqajit::c_api {

/// The op's validate(params), found by argument-dependent lookup in the op's header.
template <class Params>
void validate_params(const Params& p) {
  validate(p);
}

/// An OpAbi's types (the binding's args struct, the op's params) and the launcher
/// functions its four entry points call.
template <class ArgsStruct, class ParamsStruct, void (*Launch)(Engine&, const ParamsStruct&, Stream),
          std::size_t (*WorkspaceSize)(const ParamsStruct&, const DeviceInfo&),
          KernelSpec (*Spec)(const ParamsStruct&, const Arch&)>
struct OpBinding {
  using Args = ArgsStruct;
  using Params = ParamsStruct;
  static void run(Engine& engine, const Params& p, Stream stream) { Launch(engine, p, stream); }
  static std::size_t workspace_size(const Params& p, const DeviceInfo& device) { return WorkspaceSize(p, device); }
  static KernelSpec spec(const Params& p, const Arch& arch) { return Spec(p, arch); }
  static void validate(const Params& p) { validate_params(p); }
};

inline DType dtype_of(std::int32_t code, const char* op, const char* field) {
  switch (code) {
    case XQAJIT_FP16: return DType::fp16;
    case XQAJIT_BF16: return DType::bf16;
    case XQAJIT_FP8: return DType::fp8;
    case XQAJIT_FP8DS: return DType::fp8ds;
    default:
      throw ArgumentError(std::string(op) + ": " + field + " dtype code " + std::to_string(code) + " is unknown");
  }
}

/// The binding's struct (its struct_size) -> the op's params: first the size
/// handshake, then the fields every op shares, then the op's own (Op::fill).
template <class Op>
typename Op::Params params_of(const typename Op::Args& a) {
  if (a.struct_size != sizeof(typename Op::Args))
    throw ArgumentError(std::string(Op::kName) + ": " + Op::kArgsName + " is " + std::to_string(a.struct_size) +
                        " bytes but this library's is " + std::to_string(sizeof(typename Op::Args)) +
                        ": the binding and libxqajit do not match");
  typename Op::Params p;
  p.q = a.q;
  p.out = a.out;
  p.block_table = a.block_table;
  p.seq_lens = a.seq_lens;
  p.spec_mask = a.spec_mask;
  p.input = dtype_of(a.input, Op::kName, "input");
  p.kv = dtype_of(a.kv, Op::kName, "kv");
  p.batch = a.batch;
  p.q_len = a.q_len;
  p.page_size = a.page_size;
  p.num_pages = a.num_pages;
  p.max_pages_per_seq = a.max_pages_per_seq;
  p.block_table_stride = a.block_table_stride;
  p.q_stride_batch = a.q_stride_batch;
  p.q_stride_token = a.q_stride_token;
  p.q_stride_head = a.q_stride_head;
  p.out_stride_batch = a.out_stride_batch;
  p.out_stride_token = a.out_stride_token;
  p.out_stride_head = a.out_stride_head;
  p.q_scale = a.q_scale;
  p.kv_scale = a.kv_scale;
  p.q_scale_ptr = a.q_scale_ptr;
  p.kv_scale_ptr = a.kv_scale_ptr;
  p.num_splits = a.num_splits;
  p.kv_tile = a.kv_tile;
  p.workspace = a.workspace;
  p.workspace_bytes = a.workspace_bytes;
  p.programmatic_dependent_launch = a.programmatic_dependent_launch != 0;
  Op::fill(a, p);
  return p;
}

/// xqajit_<op>: launches on the caller's stream. A launch refused for its
/// workspace says how much it needs (needed_workspace_bytes, XQAJIT_NEED_WORKSPACE),
/// so the binding can grow its buffer and retry; nothing was launched.
template <class Op>
int launch(typename Op::Args* args) {
  return guarded([&]() -> int {
    const typename Op::Params p = params_of<Op>(*args);
    const Stream stream = static_cast<Stream>(args->stream);
    try {
      Op::run(engine_of(args->engine), p, stream);
    } catch (const ArgumentError&) {
      // Only on the failure path: is it the workspace?
      Driver& driver = Driver::instance();
      const std::size_t need = Op::workspace_size(p, driver.device(driver.stream_device(stream)));
      if (need > 0 && (p.workspace == nullptr || p.workspace_bytes < need)) {
        args->needed_workspace_bytes = need;
        return fail(XQAJIT_NEED_WORKSPACE, std::string(Op::kName) + ": the workspace is smaller than the " +
                                               std::to_string(need) + " bytes this launch needs");
      }
      throw;
    }
    return XQAJIT_OK;
  });
}

/// xqajit_<op>_validate: every check of the launch, no GPU needed.
template <class Op>
int validate(typename Op::Args* args) {
  return guarded([&]() -> int {
    Op::validate(params_of<Op>(*args));
    return XQAJIT_OK;
  });
}

/// xqajit_<op>_workspace_size: the split-KV scratch a launch on `device` needs.
template <class Op>
int workspace_size(typename Op::Args* args, int device, std::uint64_t* bytes) {
  return guarded([&]() -> int {
    const typename Op::Params p = params_of<Op>(*args);
    device_arch(device);  // checks the ordinal
    *bytes = Op::workspace_size(p, Driver::instance().device(device));
    return XQAJIT_OK;
  });
}

/// xqajit_<op>_spec: the kernel spec a launch runs, as JSON (on `arch`, else on `device`'s best arch).
template <class Op>
int spec(typename Op::Args* args, int device, const char* arch, const char** result_json) {
  return guarded([&]() -> int {
    const typename Op::Params p = params_of<Op>(*args);
    const Arch target = arch ? Arch::parse(arch) : device_arch(device);
    *result_json = keep(spec_result_json(Op::spec(p, target)));
    return XQAJIT_OK;
  });
}

}  // namespace xqajit::c_api

/// The four entry points c_api.h declares for an op: xqajit_<name>, xqajit_<name>_validate,
/// xqajit_<name>_workspace_size and xqajit_<name>_spec, each a call of the template above
/// with the op's OpAbi. Spelled once here so that an op's file is only its OpAbi.
#define XQAJIT_C_API_OP_ENTRY_POINTS(name, Abi)                                                         \
  extern "C" {                                                                                          \
  int xqajit_##name(Abi::Args* args) { return xqajit::c_api::launch<Abi>(args); }                       \
  int xqajit_##name##_validate(Abi::Args* args) { return xqajit::c_api::validate<Abi>(args); }          \
  int xqajit_##name##_workspace_size(Abi::Args* args, int device, std::uint64_t* bytes) {               \
    return xqajit::c_api::workspace_size<Abi>(args, device, bytes);                                     \
  }                                                                                                     \
  int xqajit_##name##_spec(Abi::Args* args, int device, const char* arch, const char** result_json) {   \
    return xqajit::c_api::spec<Abi>(args, device, arch, result_json);                                   \
  }                                                                                                     \
  }
