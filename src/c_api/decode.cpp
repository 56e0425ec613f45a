// The C ABI of decode (include/xqajit/c_api.h): XqajitDecodeArgs -> DecodeParams.

#include <string>

#include "c_api/guard.hpp"
#include "xqajit/decode.hpp"
#include "xqajit/driver.hpp"
#include "xqajit/error.hpp"

using namespace xqajit;
using c_api::guarded;

namespace {

DType dtype_of(std::int32_t code, const char* field) {
  switch (code) {
    case XQAJIT_FP16: return DType::fp16;
    case XQAJIT_BF16: return DType::bf16;
    case XQAJIT_FP8: return DType::fp8;
    default: throw ArgumentError(std::string("decode: ") + field + " dtype code " + std::to_string(code) + " is unknown");
  }
}

DecodeParams params_of(const XqajitDecodeArgs& a) {
  if (a.struct_size != sizeof(XqajitDecodeArgs))
    throw ArgumentError("decode: XqajitDecodeArgs is " + std::to_string(a.struct_size) + " bytes but this library's is " +
                        std::to_string(sizeof(XqajitDecodeArgs)) + ": the binding and libxqajit do not match");
  DecodeParams p;
  p.q = a.q;
  p.out = a.out;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.block_table = a.block_table;
  p.seq_lens = a.seq_lens;
  p.input = dtype_of(a.input, "input");
  p.kv = dtype_of(a.kv, "kv");
  p.output = dtype_of(a.output, "output");
  p.batch = a.batch;
  p.q_len = a.q_len;
  p.num_q_heads = a.num_q_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = a.head_dim;
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
  p.k_stride_page = a.k_stride_page;
  p.k_stride_token = a.k_stride_token;
  p.k_stride_head = a.k_stride_head;
  p.v_stride_page = a.v_stride_page;
  p.v_stride_token = a.v_stride_token;
  p.v_stride_head = a.v_stride_head;
  p.q_scale = a.q_scale;
  p.kv_scale = a.kv_scale;
  p.rcp_out_scale = a.rcp_out_scale;
  p.q_scale_ptr = a.q_scale_ptr;
  p.kv_scale_ptr = a.kv_scale_ptr;
  p.rcp_out_scale_ptr = a.rcp_out_scale_ptr;
  p.sliding_window = a.sliding_window;
  p.sinks = a.sinks;
  p.spec_mask = a.spec_mask;
  p.num_splits = a.num_splits;
  p.kv_tile = a.kv_tile;
  p.workspace = a.workspace;
  p.workspace_bytes = a.workspace_bytes;
  p.programmatic_dependent_launch = a.programmatic_dependent_launch != 0;
  return p;
}

}  // namespace

extern "C" {

int xqajit_decode(XqajitDecodeArgs* args) {
  return guarded([&]() -> int {
    const DecodeParams p = params_of(*args);
    const Stream stream = static_cast<Stream>(args->stream);
    try {
      decode(c_api::engine_of(args->engine), p, stream);
    } catch (const ArgumentError&) {
      // Only on the failure path: is it the workspace? Then say how much, so the
      // binding can grow its buffer and retry (nothing was launched).
      Driver& driver = Driver::instance();
      const std::size_t need = decode_workspace_size(p, driver.device(driver.stream_device(stream)));
      if (need > 0 && (p.workspace == nullptr || p.workspace_bytes < need)) {
        args->needed_workspace_bytes = need;
        return c_api::fail(XQAJIT_NEED_WORKSPACE,
                           "decode: the workspace is smaller than the " + std::to_string(need) + " bytes this launch needs");
      }
      throw;
    }
    return XQAJIT_OK;
  });
}

int xqajit_decode_validate(XqajitDecodeArgs* args) {
  return guarded([&]() -> int {
    validate(params_of(*args));
    return XQAJIT_OK;
  });
}

int xqajit_decode_workspace_size(XqajitDecodeArgs* args, int device, std::uint64_t* bytes) {
  return guarded([&]() -> int {
    const DecodeParams p = params_of(*args);
    c_api::device_arch(device);  // checks the ordinal
    *bytes = decode_workspace_size(p, Driver::instance().device(device));
    return XQAJIT_OK;
  });
}

int xqajit_decode_spec(XqajitDecodeArgs* args, int device, const char* arch, const char** result_json) {
  return guarded([&]() -> int {
    const DecodeParams p = params_of(*args);
    const Arch target = arch ? Arch::parse(arch) : c_api::device_arch(device);
    *result_json = c_api::keep(c_api::spec_result_json(decode_spec(p, target)));
    return XQAJIT_OK;
  });
}

}  // extern "C"
