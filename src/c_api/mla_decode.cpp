// The C ABI of MLA decode (include/xqajit/c_api.h): XqajitMlaDecodeArgs -> MlaDecodeParams.
// The shared fields and the entry points' bodies are c_api/op_entry.hpp's.

#include "c_api/op_entry.hpp"
#include "xqajit/ops/mla_decode.hpp"

using namespace xqajit;

namespace {

Backend backend_of(std::int32_t code) {
  switch (code) {
    case XQAJIT_BACKEND_AUTO: return Backend::automatic;
    case XQAJIT_BACKEND_PORTABLE: return Backend::portable;
    case XQAJIT_BACKEND_HOPPER: return Backend::hopper;
    default: throw ArgumentError("mla_decode: backend code " + std::to_string(code) + " is unknown");
  }
}

struct MlaDecodeAbi : c_api::OpBinding<XqajitMlaDecodeArgs, MlaDecodeParams, &mla_decode,
                                        &mla_decode_workspace_size, &mla_decode_spec> {
  static constexpr const char* kName = "mla_decode";
  static constexpr const char* kArgsName = "XqajitMlaDecodeArgs";

  static void fill(const Args& a, Params& p) {
    p.backend = backend_of(a.backend);
    p.kv_cache = a.kv_cache;
    p.num_heads = a.num_heads;
    p.kv_stride_page = a.kv_stride_page;
    p.kv_stride_token = a.kv_stride_token;
    p.sm_scale = a.sm_scale;
    p.topk = a.topk;
    p.indices = a.indices;
    p.topk_length = a.topk_length;
    p.lse = a.lse;
    p.attn_sink = a.attn_sink;
    p.indices_stride_batch = a.indices_stride_batch;
    p.indices_stride_token = a.indices_stride_token;
    p.lse_stride_batch = a.lse_stride_batch;
    p.lse_stride_token = a.lse_stride_token;
    p.lse_stride_head = a.lse_stride_head;
  }
  // MLA's spec query checks the whole call first (decode's does not): kept as it was.
  static KernelSpec spec(const Params& p, const Arch& arch) {
    xqajit::validate(p);
    return mla_decode_spec(p, arch);
  }
};

}  // namespace

XQAJIT_C_API_OP_ENTRY_POINTS(mla_decode, MlaDecodeAbi)
