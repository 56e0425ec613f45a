#ifndef XQAJIT_C_API_H
#define XQAJIT_C_API_H
/* A small C ABI over libxqajit, for language bindings (the Python package calls
 * it through ctypes, so one library serves every Python version).
 *
 * Every function returns an XqajitStatus; on failure the message (and, per error
 * type, a few details) stay readable on the calling thread until its next call:
 * xqajit_last_error(), xqajit_last_error_detail("field"). Strings a function
 * returns through `const char**` live in a thread-local buffer with the same
 * lifetime. JSON is used where a C struct would churn (options, spec fields).
 * No function throws. */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below or a signature changes. */
#define XQAJIT_C_ABI_VERSION 2

typedef enum XqajitStatus {
  XQAJIT_OK = 0,
  XQAJIT_ERROR = 1,          /* xqajit::Error of no more specific type */
  XQAJIT_SPEC_ERROR = 2,     /* details: field, value, allowed */
  XQAJIT_ARGUMENT_ERROR = 3,
  XQAJIT_COMPILE_ERROR = 4,  /* details: spec_name, options, log */
  XQAJIT_CUDA_ERROR = 5,     /* details: call, code, code_name */
  XQAJIT_LIBRARY_ERROR = 6,
  XQAJIT_CACHE_ERROR = 7,
  XQAJIT_BUNDLE_ERROR = 8,
  XQAJIT_NOT_AVAILABLE = 9,
  /* The launch needs a larger split-KV workspace than it was given; the bytes it
   * needs are in the args' `needed_workspace_bytes`. Nothing was launched. */
  XQAJIT_NEED_WORKSPACE = 10,
  XQAJIT_INTERNAL_ERROR = 11 /* a std::exception that is not an xqajit::Error */
} XqajitStatus;

/* XQAJIT_FP8DS: an MLA cache of DeepSeek-V3.2's 656-byte "fp8 with scales" rows (512 e4m3,
 * 4 float32 scales, 64 bf16 rope; strides in bytes). */
typedef enum XqajitDType { XQAJIT_FP16 = 0, XQAJIT_BF16 = 1, XQAJIT_FP8 = 2, XQAJIT_FP8DS = 3 } XqajitDType;
/* xqajit::Backend: which kernel family member runs (auto picks by the arch). */
typedef enum XqajitBackend { XQAJIT_BACKEND_AUTO = 0, XQAJIT_BACKEND_PORTABLE = 1, XQAJIT_BACKEND_HOPPER = 2 } XqajitBackend;

typedef struct XqajitEngine XqajitEngine; /* an xqajit::Engine */

int xqajit_c_abi_version(void);
const char* xqajit_version(void);
const char* xqajit_last_error(void);
/* A named detail of the last error ("" when it has none). */
const char* xqajit_last_error_detail(const char* key);

/* --- engine ------------------------------------------------------------------
 * options_json: an object whose keys override Options::from_env(): cache_dir,
 * disk_cache, cache_max_bytes, bundles (list), no_compile, template_dir,
 * log_level, libcuda, libnvrtc. NULL or "{}": the environment alone. */
int xqajit_engine_create(const char* options_json, XqajitEngine** engine);
void xqajit_engine_destroy(XqajitEngine* engine);
/* The process-wide engine (xqajit::default_engine()); never destroy it. */
int xqajit_engine_default(XqajitEngine** engine);
/* {"memory_hits", ..., "fingerprint", "cache_dir"} */
int xqajit_engine_stats(XqajitEngine* engine, const char** json);

/* --- specs -------------------------------------------------------------------
 * spec_json: {"name": "gqa_..."} or spec fields as strings or numbers
 * ({"input": "bf16", "group": 8, ...}); a missing arch is the best arch of GPU
 * `device` (default 0) where a GPU is visible. Result:
 * {"name", "flags": [...], "fields": {...}}. */
int xqajit_spec(const char* spec_json, const char** result_json);
/* specs_json: a list of such specs. Result: a list of
 * {"name", "ok", "source", "seconds", "error"}; one bad spec never fails the call. */
int xqajit_prewarm(XqajitEngine* engine, const char* specs_json, int jobs, const char** result_json);
/* The cubin of one spec through the engine's tiers (Engine::cubin; no GPU needed).
 * Result: {"name", "source", "path", "cubin_bytes", "seconds"}. Raises what the
 * engine raises: CompileError with the NVRTC log, NotAvailableError in no-compile mode. */
int xqajit_engine_cubin(XqajitEngine* engine, const char* spec_json, const char** result_json);
/* The best arch of GPU `device` ("sm_90a"); needs libcuda and a GPU. */
int xqajit_device_arch(int device, const char** arch);

/* --- ops: decode -------------------------------------------------------------
 * Mirrors xqajit::DecodeParams; every stride is explicit (elements), pointers
 * are device pointers, `stream` is a CUstream / cudaStream_t. */
typedef struct XqajitDecodeArgs {
  uint64_t struct_size; /* sizeof(XqajitDecodeArgs): a binding built against another layout fails */
  XqajitEngine* engine; /* NULL: the default engine */
  void* stream;
  const void* q;
  void* out;
  const void* k_cache;
  const void* v_cache;
  const int32_t* block_table;
  const int32_t* seq_lens;
  const float* sinks;
  const uint32_t* spec_mask;
  const float* q_scale_ptr;
  const float* kv_scale_ptr;
  const float* rcp_out_scale_ptr;
  void* workspace;
  uint64_t workspace_bytes;
  uint64_t needed_workspace_bytes; /* out: set with XQAJIT_NEED_WORKSPACE */
  int64_t q_stride_batch, q_stride_token, q_stride_head;
  int64_t out_stride_batch, out_stride_token, out_stride_head;
  int64_t k_stride_page, k_stride_token, k_stride_head;
  int64_t v_stride_page, v_stride_token, v_stride_head;
  int64_t block_table_stride;
  int32_t input, kv, output; /* XqajitDType */
  int32_t batch, q_len, num_q_heads, num_kv_heads, head_dim, page_size, num_pages, max_pages_per_seq;
  int32_t sliding_window, num_splits, kv_tile, programmatic_dependent_launch;
  float q_scale, kv_scale, rcp_out_scale;
  float* lse; /* [batch, q_len, num_q_heads] float32 (strides below) or NULL */
  int64_t lse_stride_batch, lse_stride_token, lse_stride_head; /* 0 = contiguous */
} XqajitDecodeArgs;

/* Launches xqajit::decode on args->stream. */
int xqajit_decode(XqajitDecodeArgs* args);
/* xqajit::validate only: no GPU, nothing launched (for tests and dry runs). */
int xqajit_decode_validate(XqajitDecodeArgs* args);
/* Workspace bytes a decode with these args needs on GPU `device`. */
int xqajit_decode_workspace_size(XqajitDecodeArgs* args, int device, uint64_t* bytes);
/* The spec (as xqajit_spec's result) a decode with these args runs on GPU `device`,
 * or on `arch` ("sm_90a") when it is not NULL (no GPU needed then). */
int xqajit_decode_spec(XqajitDecodeArgs* args, int device, const char* arch, const char** result_json);

/* --- ops: MLA decode ---------------------------------------------------------
 * Mirrors xqajit::MlaDecodeParams (include/xqajit/ops/mla_decode.hpp): q
 * [batch, q_len, num_heads, 576], one shared latent cache [num_pages, page_size,
 * 576] (K = all 576 values of a row, V = its first 512), out [batch, q_len,
 * num_heads, 512] bf16. Strides in elements, pointers on the device. */
typedef struct XqajitMlaDecodeArgs {
  uint64_t struct_size; /* sizeof(XqajitMlaDecodeArgs) */
  XqajitEngine* engine; /* NULL: the default engine */
  void* stream;
  const void* q;
  void* out;
  const void* kv_cache;
  const int32_t* block_table;
  const int32_t* seq_lens;
  const uint32_t* spec_mask; /* [batch, q_len] packed bits, or NULL (causal) */
  const float* q_scale_ptr;
  const float* kv_scale_ptr;
  void* workspace;
  uint64_t workspace_bytes;
  uint64_t needed_workspace_bytes; /* out: set with XQAJIT_NEED_WORKSPACE */
  int64_t q_stride_batch, q_stride_token, q_stride_head;
  int64_t out_stride_batch, out_stride_token, out_stride_head;
  int64_t kv_stride_page, kv_stride_token;
  int64_t block_table_stride;
  int32_t input, kv; /* XqajitDType: bf16/bf16, fp8/fp8, bf16/fp8 or bf16/fp8ds */
  int32_t batch, q_len, num_heads, page_size, num_pages, max_pages_per_seq;
  int32_t backend; /* XqajitBackend */
  int32_t num_splits, kv_tile, programmatic_dependent_launch;
  float sm_scale, q_scale, kv_scale;
  /* Sparse MLA (DSA; indices set: block_table, seq_lens and spec_mask NULL) and the
   * optional outputs of every MLA call; zeros and NULL for a plain dense call. */
  int32_t topk;                  /* entries per index list */
  const int32_t* indices;        /* [batch, q_len, topk] slots page * page_size + offset; -1 skips */
  const int32_t* topk_length;    /* [batch] or NULL */
  float* lse;                    /* [batch, q_len, num_heads] float32 (strides below) or NULL */
  const float* attn_sink;        /* [num_heads] float32 or NULL */
  int64_t indices_stride_batch, indices_stride_token;          /* 0 = contiguous */
  int64_t lse_stride_batch, lse_stride_token, lse_stride_head; /* 0 = contiguous */
} XqajitMlaDecodeArgs;

/* Launches xqajit::mla_decode on args->stream. */
int xqajit_mla_decode(XqajitMlaDecodeArgs* args);
/* xqajit::validate only: no GPU, nothing launched. */
int xqajit_mla_decode_validate(XqajitMlaDecodeArgs* args);
/* Workspace bytes an MLA decode with these args needs on GPU `device`. */
int xqajit_mla_decode_workspace_size(XqajitMlaDecodeArgs* args, int device, uint64_t* bytes);
/* The spec an MLA decode with these args runs on GPU `device`, or on `arch` when not NULL. */
int xqajit_mla_decode_spec(XqajitMlaDecodeArgs* args, int device, const char* arch, const char** result_json);

#ifdef __cplusplus
}
#endif
#endif /* XQAJIT_C_API_H */
