// The C ABI of MLA decode (include/xqajit/c_api.h): XqajitMlaDecodeArgs -> MlaDecodeParams.

#include <string>

#include "c_api/guard.hpp"
#include "xqajit/driver.hpp"
#include "xqajit/error.hpp"
#include "xqajit/ops/mla_decode.hpp"

using namespace xqajit;
using c_api::guarded;

namespace {

DType dtype_of(std::int32_t code, const char* field) {
  switch (code) {
    case XQAJIT_FP16: return DType::fp16;
    case XQAJIT_BF16: return DType::bf16;
    case XQAJIT_FP8: return DType::fp8;
    default:
      throw ArgumentError(std::string("mla_decode: ") + field + " dtype code " + std::to_string(code) + " is unknown");
  }
}

Backend backend_of(std::int32_t code) {
  switch (code) {
    case XQAJIT_BACKEND_AUTO: return Backend::automatic;
    case XQAJIT_BACKEND_PORTABLE: return Backend::portable;
    case XQAJIT_BACKEND_HOPPER: return Backend::hopper;
    default: throw ArgumentError("mla_decode: backend code " + std::to_string(code) + " is unknown");
  }
}

MlaDecodeParams params_of(const XqajitMlaDecodeArgs& a) {
  if (a.struct_size != sizeof(XqajitMlaDecodeArgs))
    throw ArgumentError("mla_decode: XqajitMlaDecodeArgs is " + std::to_string(a.struct_size) +
                        " bytes but this library's is " + std::to_string(sizeof(XqajitMlaDecodeArgs)) +
                        ": the binding and libxqajit do not match");
  MlaDecodeParams p;
  p.q = a.q;
  p.out = a.out;
  p.kv_cache = a.kv_cache;
  p.block_table = a.block_table;
  p.seq_lens = a.seq_lens;
  p.spec_mask = a.spec_mask;
  p.input = dtype_of(a.input, "input");
  p.kv = dtype_of(a.kv, "kv");
  p.batch = a.batch;
  p.q_len = a.q_len;
  p.num_heads = a.num_heads;
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
  p.kv_stride_page = a.kv_stride_page;
  p.kv_stride_token = a.kv_stride_token;
  p.sm_scale = a.sm_scale;
  p.q_scale = a.q_scale;
  p.kv_scale = a.kv_scale;
  p.q_scale_ptr = a.q_scale_ptr;
  p.kv_scale_ptr = a.kv_scale_ptr;
  p.backend = backend_of(a.backend);
  p.kv_tile = a.kv_tile;
  p.num_splits = a.num_splits;
  p.workspace = a.workspace;
  p.workspace_bytes = a.workspace_bytes;
  p.programmatic_dependent_launch = a.programmatic_dependent_launch != 0;
  return p;
}

}  // namespace

extern "C" {

int xqajit_mla_decode(XqajitMlaDecodeArgs* args) {
  return guarded([&]() -> int {
    const MlaDecodeParams p = params_of(*args);
    const Stream stream = static_cast<Stream>(args->stream);
    try {
      mla_decode(c_api::engine_of(args->engine), p, stream);
    } catch (const ArgumentError&) {
      // As xqajit_decode: on the failure path only, say whether it is the workspace.
      Driver& driver = Driver::instance();
      const std::size_t need = mla_decode_workspace_size(p, driver.device(driver.stream_device(stream)));
      if (need > 0 && (p.workspace == nullptr || p.workspace_bytes < need)) {
        args->needed_workspace_bytes = need;
        return c_api::fail(XQAJIT_NEED_WORKSPACE, "mla_decode: the workspace is smaller than the " +
                                                      std::to_string(need) + " bytes this launch needs");
      }
      throw;
    }
    return XQAJIT_OK;
  });
}

int xqajit_mla_decode_validate(XqajitMlaDecodeArgs* args) {
  return guarded([&]() -> int {
    validate(params_of(*args));
    return XQAJIT_OK;
  });
}

int xqajit_mla_decode_workspace_size(XqajitMlaDecodeArgs* args, int device, std::uint64_t* bytes) {
  return guarded([&]() -> int {
    const MlaDecodeParams p = params_of(*args);
    c_api::device_arch(device);  // checks the ordinal
    *bytes = mla_decode_workspace_size(p, Driver::instance().device(device));
    return XQAJIT_OK;
  });
}

int xqajit_mla_decode_spec(XqajitMlaDecodeArgs* args, int device, const char* arch, const char** result_json) {
  return guarded([&]() -> int {
    const MlaDecodeParams p = params_of(*args);
    validate(p);
    const Arch target = arch ? Arch::parse(arch) : c_api::device_arch(device);
    *result_json = c_api::keep(c_api::spec_result_json(mla_decode_spec(p, target)));
    return XQAJIT_OK;
  });
}

}  // extern "C"
