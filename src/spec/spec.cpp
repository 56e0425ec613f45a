#include "xqajit/spec/spec.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "spec/arch_rules.hpp"
#include "xqajit/error.hpp"

namespace xqajit {
namespace {

using detail::default_backend;
using detail::default_cta_rows;
using detail::has_hopper;

// Arch numbers xqajit targets; an "a" variant exists only for the listed ones.
const std::vector<int> kArchNumbers = {80, 86, 87, 89, 90, 100, 103, 110, 120, 121};
const std::vector<int> kAccelArchNumbers = {90, 100, 103, 110, 120, 121};
const std::vector<int> kGqaHeadDims = {64, 128, 256};
const std::vector<int> kPageSizes = {16, 32, 64, 128};
const std::vector<int> kKvTiles = {16, 32, 64, 128};
const std::vector<int> kCtaRows = {8, 16, 32, 64};
constexpr int kMlaHeadDim = 576;
constexpr int kMaxGqaGroup = 64;
const std::vector<int> kMlaHeads = {16, 32, 64, 128};
const std::vector<int> kMlaPageSizes = {32, 64};
constexpr int kMaxQLen = 32;
constexpr int kMaxMlaQLen = 4;  // multi-token prediction: 1 + up to 3 drafts
constexpr int kFirstFp8Arch = 89;  // hardware e4m3 conversions start at Ada

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string join_ints(const std::vector<int>& v) { return fmt::format("{}", fmt::join(v, ", ")); }

std::string allowed_archs() {
  std::vector<std::string> out;
  for (int n : kArchNumbers) {
    out.push_back(fmt::format("sm_{}", n));
    if (contains(kAccelArchNumbers, n)) out.push_back(fmt::format("sm_{}a", n));
  }
  return fmt::format("{}", fmt::join(out, ", "));
}

// The kernel's measured best tile (docs/PERF.md, docs/KERNEL_NOTES.md). It lives
// here, not in the launcher, so a prewarmed spec is the one decode() launches.
int default_kv_tile(const KernelSpec& s) {
  // MLA tiles come from each backend's geometry (docs/KERNEL_NOTES.md, MLA).
  if (s.kind == Kind::mla) return s.backend == Backend::hopper ? 64 : 32;
  // GQA hopper: one or two wgmma M blocks of keys per tile. An fp8 cache with one
  // row block of <= 32 rows at D <= 128 on pages of >= 64 tokens takes 128 keys at 2
  // CTAs/SM (H200, session 6 run 3: 64x4096 130.6 vs 134.1 us, 128x8192 510 vs 532,
  // 16x4096 38.2 vs 38.9, B=1 L=65536 39.3 vs 42.0, Hq 64 68.8 vs 73.5; B=1 L=8192 11.0
  // vs 10.8 and 16-token pages 139 vs 135.5 stay at 64; docs/KERNEL_NOTES.md h10).
  // Up to 16 rows: since the lazy max (h29) a 32-row CTA's tile no longer exchanges its
  // max over the warps, and 64 keys won there (session 12 run 3, speculative decoding
  // q_len 8 x group 4, first graph: 129.2-129.5 vs 134.9-135.7 us; 128 had won before, h12).
  // From 64 rows (q_len 8 x group 8) 128 keys again, by far: 64-key tiles ran 2.2-2.6 x
  // slower at every batch (H100, `xqajit tune`, KERNEL_NOTES h42: B=64 L=8192 1192 vs
  // 456 us, B=16 L=4096 169 vs 85, B=4 L=8192 98 vs 67).
  // A 16-row CTA of 32 rows (two row blocks: long speculative decoding, h47) takes 128 keys too
  // (H100, session 18 run 6, fp8 group 4 q_len 8: B=1 L=16384 27.3 vs 24.7 us, L=65536 64.4 vs
  // 61.8, B=2 L=32768 62.1 vs 59.9), and so does an 8-row one (four blocks at B=1, h49: H100,
  // session 19, L=4096 13.8 vs 12.6, L=8192 18.7 vs 17.5).
  if (s.backend == Backend::hopper) {
    const int rows = s.group * s.q_len;
    const bool tall_or_short = rows <= 16 || rows >= 64 || (s.cta_rows != 0 && s.cta_rows <= 16);
    return s.kv == DType::fp8 && tall_or_short && s.head_dim <= 128 && s.page_size >= 64 ? 128 : 64;
  }
  // An fp8 cache halves the bytes per key, so a short tile cannot hide the
  // per-tile work: for one row tile, 128 keys at D <= 128 measured 3-7 % faster
  // than 64, and 64 keys at D = 256 17 % faster than 32 (docs/PERF.md, run 8);
  // 2+ stages of either still fit every arch's shared memory.
  if (s.kv == DType::fp8 && s.group * s.q_len <= 16) return s.head_dim <= 128 ? 128 : 64;
  return s.head_dim >= 256 ? 32 : 64;
}

void validate_gqa(const KernelSpec& s) {
  if (s.input != DType::fp16 && s.input != DType::bf16)
    throw SpecError("input", to_string(s.input), "fp16, bf16 (fp8 input is for kind=mla)");
  if (s.kv == DType::fp8ds)
    throw SpecError(
        "kv", "fp8ds",
        fmt::format("{} (the input type) or fp8 (fp8ds is a kind=mla cache)", to_string(s.input)));
  if (s.kv != s.input && s.kv != DType::fp8)
    throw SpecError("kv", to_string(s.kv),
                    fmt::format("{} (the input type) or fp8", to_string(s.input)));
  if (s.output != s.input && s.output != DType::fp8)
    throw SpecError("output", to_string(s.output),
                    fmt::format("{} (the input type) or fp8", to_string(s.input)));
  if (s.output == DType::fp8 && s.kv != DType::fp8)
    throw SpecError("output", "fp8",
                    fmt::format("{} when kv={} (fp8 output needs an fp8 KV cache)",
                                to_string(s.input), to_string(s.kv)));
  if (!contains(kGqaHeadDims, s.head_dim))
    throw SpecError("head_dim", std::to_string(s.head_dim), join_ints(kGqaHeadDims));
  if (s.group < 1 || s.group > kMaxGqaGroup)
    throw SpecError("group", std::to_string(s.group), fmt::format("1 to {}", kMaxGqaGroup));
}

void validate_mla(const KernelSpec& s) {
  if (s.input != DType::bf16 && s.input != DType::fp8)
    throw SpecError("input", to_string(s.input), "bf16, fp8 (for kind=mla)");
  const bool bf16_q_cache = s.kv == DType::fp8 || s.kv == DType::fp8ds;  // what a bf16 Q may also read
  if (s.kv != s.input && !(s.input == DType::bf16 && bf16_q_cache))
    throw SpecError("kv", to_string(s.kv),
                    s.input == DType::fp8
                        ? "fp8 (kind=mla with an fp8 Q needs an fp8 cache; fp8ds needs input=bf16)"
                        : "bf16, fp8, fp8ds (kind=mla with a bf16 Q)");
  if (s.output != DType::bf16)
    throw SpecError("output", to_string(s.output), "bf16 (kind=mla)");
  if (s.head_dim != kMlaHeadDim)
    throw SpecError("head_dim", std::to_string(s.head_dim), "576 (kind=mla: 512 no-rope + 64 rope)");
  if (!contains(kMlaHeads, s.group))
    throw SpecError("group", std::to_string(s.group),
                    join_ints(kMlaHeads) + " (kind=mla: Q heads per request)");
  if (!contains(kMlaPageSizes, s.page_size))
    throw SpecError("page_size", std::to_string(s.page_size), join_ints(kMlaPageSizes) + " (kind=mla)");
  if (s.q_len < 1 || s.q_len > kMaxMlaQLen)
    throw SpecError("q_len", std::to_string(s.q_len), fmt::format("1 to {} (kind=mla)", kMaxMlaQLen));
  if (s.sliding_window) throw SpecError("sliding_window", "1", "0 (kind=mla)");
}

void validate_sparse(const KernelSpec& s) {
  if (s.sparse && s.kind != Kind::mla) throw SpecError("sparse", "1", "0 (sparse=1 needs kind=mla)");
}

std::string backend_list(const std::vector<Backend>& v) {
  std::vector<std::string> names;
  for (Backend b : v) names.push_back(to_string(b));
  return fmt::format("{}", fmt::join(names, ", "));
}

bool offers(const Arch& arch, Backend b) { return b == Backend::portable || (b == Backend::hopper && has_hopper(arch)); }
void validate_backend(const KernelSpec& s) {
  if (s.backend == Backend::automatic) return;
  if (!offers(s.arch, s.backend)) {
    const auto have = backends_for(s.kind, s.arch);
    throw SpecError("backend", to_string(s.backend),
                    fmt::format("auto, {} (what kind={} has on {}{})", backend_list(have), to_string(s.kind),
                                s.arch.str(),
                                s.backend == Backend::hopper ? "; hopper needs sm_90a" : ""));
  }
  // The GQA hopper kernel's keys are wgmma M blocks of 64.
  if (s.kind == Kind::gqa && s.backend == Backend::hopper && s.kv_tile != 0 && s.kv_tile < 64)
    throw SpecError("kv_tile", std::to_string(s.kv_tile), "0 (default), 64, 128 (kind=gqa backend=hopper)");
}

// Rows per CTA are the hopper GQA kernel's wgmma N; the other kernels have fixed row tiles.
void validate_cta_rows(const KernelSpec& s) {
  if (s.cta_rows == 0) return;
  if (!contains(kCtaRows, s.cta_rows))
    throw SpecError("cta_rows", std::to_string(s.cta_rows), "0 (default), " + join_ints(kCtaRows));
  if (s.kind != Kind::gqa || s.backend != Backend::hopper)
    throw SpecError("cta_rows", std::to_string(s.cta_rows), "0 (cta_rows needs kind=gqa backend=hopper)");
}

}  // namespace

bool operator==(const KernelSpec& a, const KernelSpec& b) {
  return a.kind == b.kind && a.input == b.input && a.kv == b.kv && a.output == b.output &&
         a.head_dim == b.head_dim && a.page_size == b.page_size && a.group == b.group &&
         a.q_len == b.q_len && a.sliding_window == b.sliding_window && a.arch == b.arch &&
         a.kv_tile == b.kv_tile && a.backend == b.backend && a.cta_rows == b.cta_rows && a.sparse == b.sparse;
}

std::string Arch::str() const { return fmt::format("sm_{}{}{}", major, minor, accel ? "a" : ""); }

Arch Arch::parse(const std::string& text) {
  std::string t = text;
  if (t.rfind("sm_", 0) == 0) t = t.substr(3);
  else if (t.rfind("sm", 0) == 0) t = t.substr(2);
  Arch a;
  if (!t.empty() && t.back() == 'a') {
    a.accel = true;
    t.pop_back();
  }
  if (t.size() < 2 || t.size() > 3 ||
      !std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); }))
    throw SpecError("arch", text, allowed_archs());
  const int n = std::stoi(t);
  a.major = n / 10;
  a.minor = n % 10;
  if (!contains(kArchNumbers, n) || (a.accel && !contains(kAccelArchNumbers, n)))
    throw SpecError("arch", text, allowed_archs());
  return a;
}

std::string to_string(Kind k) { return k == Kind::gqa ? "gqa" : "mla"; }

std::string to_string(Backend b) {
  switch (b) {
    case Backend::automatic: return "auto";
    case Backend::portable: return "portable";
    case Backend::hopper: return "hopper";
  }
  return "?";
}

Backend parse_backend(const std::string& text) {
  if (text == "auto") return Backend::automatic;
  if (text == "portable") return Backend::portable;
  if (text == "hopper") return Backend::hopper;
  throw SpecError("backend", text, "auto, portable, hopper");
}

std::string to_string(DType d) {
  switch (d) {
    case DType::fp16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::fp8: return "fp8";
    case DType::fp8ds: return "fp8ds";
  }
  return "?";
}

DType parse_dtype(const std::string& field, const std::string& text) {
  if (text == "fp16" || text == "f16" || text == "half") return DType::fp16;
  if (text == "bf16") return DType::bf16;
  if (text == "fp8" || text == "e4m3" || text == "fp8_e4m3") return DType::fp8;
  if (text == "fp8ds") return DType::fp8ds;
  throw SpecError(field, text, "fp16, bf16, fp8, fp8ds (fp8ds: kind=mla caches only)");
}

int dtype_bytes(DType d) { return d == DType::fp8 || d == DType::fp8ds ? 1 : 2; }

void validate(const KernelSpec& s, const std::vector<int>& supported_archs) {
  if (s.kind == Kind::gqa) validate_gqa(s);
  else validate_mla(s);
  if (!contains(kPageSizes, s.page_size))
    throw SpecError("page_size", std::to_string(s.page_size), join_ints(kPageSizes));
  if (s.q_len < 1 || s.q_len > kMaxQLen)
    throw SpecError("q_len", std::to_string(s.q_len), fmt::format("1 to {}", kMaxQLen));
  if (s.kv_tile != 0 && !contains(kKvTiles, s.kv_tile))
    throw SpecError("kv_tile", std::to_string(s.kv_tile), "0 (default), " + join_ints(kKvTiles));
  if (s.arch.major == 0) throw SpecError("arch", "(missing)", allowed_archs());
  if (!contains(kArchNumbers, s.arch.number()) || s.arch.minor > 9 ||
      (s.arch.accel && !contains(kAccelArchNumbers, s.arch.number())))
    throw SpecError("arch", s.arch.str(), allowed_archs());
  const bool uses_fp8 =
      s.kv == DType::fp8 || s.kv == DType::fp8ds || s.input == DType::fp8 || s.output == DType::fp8;
  if (uses_fp8 && s.arch.number() < kFirstFp8Arch)
    throw SpecError("arch", s.arch.str(), "sm_89 or newer when a dtype is fp8");
  validate_sparse(s);
  validate_backend(s);
  validate_cta_rows(s);
  if (!supported_archs.empty() && !contains(supported_archs, s.arch.number()))
    throw SpecError("arch", s.arch.str(),
                    fmt::format("what the installed NVRTC can target: sm_{}",
                                fmt::join(supported_archs, ", sm_")));
}

KernelSpec normalized(const KernelSpec& spec, const std::vector<int>& supported_archs) {
  validate(spec, supported_archs);
  KernelSpec s = spec;
  if (s.backend == Backend::automatic) s.backend = default_backend(s.kind, s.arch);
  // MLA's portable backend uses no arch-specific instruction: it is built for the
  // plain arch, so one cubin serves every GPU of that major (sm_90 runs on sm_90a).
  if (s.kind == Kind::mla && s.backend == Backend::portable) s.arch.accel = false;
  if (s.kv_tile == 0) s.kv_tile = default_kv_tile(s);
  if (s.cta_rows >= default_cta_rows(s)) s.cta_rows = 0;  // the kernel's own N
  return s;
}

std::vector<std::string> flags(const KernelSpec& spec) {
  const KernelSpec s = normalized(spec);
  const bool mla = s.kind == Kind::mla;
  auto def = [](const char* name, long value) { return fmt::format("-D{}={}", name, value); };
  return {
      def("IS_MLA", mla),
      def("CACHE_ELEM_ENUM", s.kv == DType::fp8 || s.kv == DType::fp8ds ? 2 : 0),
      def("INPUT_FP16", s.input == DType::fp16),
      def("HEAD_ELEMS", s.head_dim),
      def("HEAD_GRP_SIZE", s.group),
      def("TOKENS_PER_PAGE", s.page_size),
      def("BEAM_WIDTH", 1),
      def("SLIDING_WINDOW", s.sliding_window),
      def("LOW_PREC_OUTPUT", s.output == DType::fp8),
      def("SPEC_DEC", s.q_len > 1),
      def("SPEC_Q_SEQ_LEN", s.q_len),
      def("MLA_BF16", mla && s.input == DType::bf16 && s.kv == DType::bf16),
      def("INPUT_FP8", s.input == DType::fp8),
      def("KV_TILE_TOKENS", s.kv_tile),
      def("CTA_ROWS", s.cta_rows),
      def("MLA_SPARSE", s.sparse),
      def("MLA_FP8DS", s.kv == DType::fp8ds),
  };
}

}  // namespace xqajit
