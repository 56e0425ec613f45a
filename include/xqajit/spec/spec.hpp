#pragma once
/// The kernel spec: what a caller asks for. Pure C++ (no CUDA), so it can be
/// validated, named and turned into compiler flags on any host.
///
///   KernelSpec --validate()--> canonical_name() <--parse_name()
///                         \--> flags()  (the -D options the templates read)

#include <map>
#include <string>
#include <vector>

namespace xqajit {

enum class Kind { gqa, mla };
/// fp8 is e4m3. fp8ds (kind=mla caches only) is DeepSeek-V3.2's "fp8 with scales" row of
/// 656 bytes: 512 e4m3 latent values, 4 float32 scales (one per 128), 64 bf16 rope values
/// (xqajit/mla_args.h: XQAJIT_MLA_FP8DS_ROW_BYTES); such a cache's strides count bytes.
enum class DType { fp16, bf16, fp8, fp8ds };

/// Which implementation of a family runs. `automatic` resolves from the arch
/// (hopper where the family has one and the arch is sm_90a, else portable);
/// the resolved backend is part of the canonical name.
enum class Backend { automatic, portable, hopper };

/// A CUDA target, e.g. sm_90a = {9, 0, true}. `accel` is the arch-specific
/// ("a") variant: its cubin runs only on exactly that arch.
struct Arch {
  int major = 0;
  int minor = 0;
  bool accel = false;

  int number() const { return major * 10 + minor; }  // 90 for sm_90a
  std::string str() const;                            // "sm_90a"
  static Arch parse(const std::string& text);         // "sm_90a", "sm90a", "90a"; throws SpecError
  friend bool operator==(const Arch& a, const Arch& b) {
    return a.major == b.major && a.minor == b.minor && a.accel == b.accel;
  }
  friend bool operator!=(const Arch& a, const Arch& b) { return !(a == b); }
};

/// Every field that changes the binary, and nothing else.
struct KernelSpec {
  Kind kind = Kind::gqa;
  DType input = DType::fp16;
  DType kv = DType::fp16;
  DType output = DType::fp16;
  int head_dim = 128;        // GQA: 64/128/256; MLA: 576 (V dim 512)
  int page_size = 64;        // tokens per KV-cache page
  int group = 1;             // Q heads per KV head (MLA: number of Q heads)
  int q_len = 1;             // query tokens per request (> 1: speculative decoding)
  bool sliding_window = false;
  Arch arch;
  int kv_tile = 0;           // variant knob: KV tokens per CTA step; 0 = the kernel's default
  Backend backend = Backend::automatic;
  /// Variant knob of the GQA hopper kernel: query rows per CTA, its wgmma N (8, 16, 32
  /// or 64); 0 = all of a KV head's rows, up to 64 (32 at head_dim 256). Fewer rows per
  /// CTA run more CTAs per KV head: the launch plan's choice for speculative decoding at
  /// small batch (planned_cta_rows). Named (`_rN`) only where it differs from the default.
  int cta_rows = 0;
  /// MLA only: DeepSeek Sparse Attention (DSA, DeepSeek-V3.2). Each query token attends
  /// to the cache slots its own top-k index list names (no block table, no causal mask);
  /// the portable backend only for now. Named (`_sparse`) only when set.
  bool sparse = false;

  friend bool operator==(const KernelSpec& a, const KernelSpec& b);
  friend bool operator!=(const KernelSpec& a, const KernelSpec& b) { return !(a == b); }
};

std::string to_string(Kind k);
std::string to_string(DType d);
std::string to_string(Backend b);
Backend parse_backend(const std::string& text);
/// The backends `kind` has on `arch` (never empty for a valid arch). The first is what
/// backend=auto resolves to where nothing else decides (GQA's launch plan decides per call on sm_90a).
std::vector<Backend> backends_for(Kind kind, const Arch& arch);
/// The backend a launch of `spec` runs when no tuning table overrides it: its own
/// when set; for backend=auto the launch plan's measured rule (GQA on sm_90a: hopper
/// for an fp8 cache, and for a 16-bit cache at head_dim 128 and q_len 1 when the
/// launch splits the sequence (`split_launch`); else what the spec resolves to; MLA:
/// hopper on sm_90a, portable elsewhere, as its spec resolves).
/// Allocates nothing (decode_plan calls it per launch).
Backend planned_backend(const KernelSpec& spec, bool split_launch = false);
/// The cta_rows a launch of `spec` runs (its backend resolved): its own when set; for
/// the GQA hopper kernel with q_len > 1 at head_dim 128 (256 with an fp8 cache) the measured small-batch rule
/// (KERNEL_NOTES h43, h47) from the launch's batch x KV heads, the device's SMs and the keys a
/// request can need (`keys`: past 256 per query row of a KV head, two row blocks instead of four);
/// else 0. Allocates nothing.
int planned_cta_rows(const KernelSpec& spec, long long batch_kv_heads, int sm_count, long long keys = 0);
/// The backends a launch of `spec` may run: its own when set; for backend=auto, the
/// one the spec resolves to and whatever planned_backend picks, split or not.
/// Prewarming an auto spec compiles all of them, so no launch compiles.
std::vector<Backend> launch_backends(const KernelSpec& spec);
/// `specs` with each backend=auto spec that may run more than one backend replaced
/// by one spec per launch backend (explicit backends), and each hopper one followed by
/// the cta_rows variants planned_cta_rows may pick, order kept: the kernels a prewarm
/// of `specs` compiles.
std::vector<KernelSpec> launch_variants(const std::vector<KernelSpec>& specs);
DType parse_dtype(const std::string& field, const std::string& text);
/// Bytes of one element (fp8ds: 1, its strides count bytes).
int dtype_bytes(DType d);

/// Throws SpecError naming the first invalid field. `supported_archs` (from
/// nvrtcGetSupportedArchs, as numbers like 90) is checked when not empty.
void validate(const KernelSpec& spec, const std::vector<int>& supported_archs = {});

/// The spec with defaults resolved (backend, kv_tile; cta_rows 0 where it is the
/// kernel's default), so equal kernels get equal names.
/// Validates first.
KernelSpec normalized(const KernelSpec& spec, const std::vector<int>& supported_archs = {});

/// Deterministic, filesystem-safe name, e.g.
///   gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_t64_portable_sm90a
///   gqa_bf16_kvbf16_obf16_d128_p64_g4_q8_sw0_t64_r8_hopper_sm90a  (cta_rows 8)
///   mla_bf16_kvbf16_obf16_d576_p64_g128_q2_sw0_t32_sparse_portable_sm90  (sparse MLA)
///   mla_bf16_kvfp8ds_obf16_d576_p64_g64_q1_sw0_t32_sparse_portable_sm90  (DeepSeek-V3.2's cache)
/// Normalizes (and so validates) first.
std::string canonical_name(const KernelSpec& spec);

/// Inverse of canonical_name(); throws SpecError on a malformed name.
KernelSpec parse_name(const std::string& name);

/// Whether `text` looks like a canonical name rather than FIELD=VALUE.
bool looks_like_name(const std::string& text);

/// Preprocessor flags for the kernel templates ("-DHEAD_ELEMS=128", ...).
std::vector<std::string> flags(const KernelSpec& spec);

/// CLI/JSON field names <-> spec. Missing fields take their defaults
/// (kv=input, output=input, ...); `arch` is required unless `default_arch` is set.
KernelSpec spec_from_fields(const std::map<std::string, std::string>& fields,
                            const Arch* default_arch = nullptr);
std::map<std::string, std::string> spec_to_fields(const KernelSpec& spec);
/// The field names spec_from_fields() accepts, in display order.
const std::vector<std::string>& spec_field_names();

}  // namespace xqajit
