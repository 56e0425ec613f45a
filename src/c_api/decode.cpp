// The C ABI of decode (include/xqajit/c_api.h): XqajitDecodeArgs -> DecodeParams.
// The shared fields and the entry points' bodies are c_api/op_entry.hpp's.

#include "c_api/op_entry.hpp"
#include "xqajit/decode.hpp"

using namespace xqajit;

namespace {

struct DecodeAbi
    : c_api::OpBinding<XqajitDecodeArgs, DecodeParams, &decode, &decode_workspace_size, &decode_spec> {
  static constexpr const char* kName = "decode";
  static constexpr const char* kArgsName = "XqajitDecodeArgs";

  static void fill(const Args& a, Params& p) {
    p.k_cache = a.k_cache;
    p.v_cache = a.v_cache;
    p.output = c_api::dtype_of(a.output, kName, "output");
    p.num_q_heads = a.num_q_heads;
    p.num_kv_heads = a.num_kv_heads;
    p.head_dim = a.head_dim;
    p.k_stride_page = a.k_stride_page;
    p.k_stride_token = a.k_stride_token;
    p.k_stride_head = a.k_stride_head;
    p.v_stride_page = a.v_stride_page;
    p.v_stride_token = a.v_stride_token;
    p.v_stride_head = a.v_stride_head;
    p.rcp_out_scale = a.rcp_out_scale;
    p.rcp_out_scale_ptr = a.rcp_out_scale_ptr;
    p.sliding_window = a.sliding_window;
    p.sinks = a.sinks;
    p.lse = a.lse;
    p.lse_stride_batch = a.lse_stride_batch;
    p.lse_stride_token = a.lse_stride_token;
    p.lse_stride_head = a.lse_stride_head;
  }
};

}  // namespace

XQAJIT_C_API_OP_ENTRY_POINTS(decode, DecodeAbi)
