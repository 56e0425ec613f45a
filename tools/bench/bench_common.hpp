#pragma once
// Pieces the GPU benchmarks share: the copy-bandwidth ceiling, random device
// fills (never zeros: they hide wrong indexing and run faster than real data),
// the paged table of a shape, the workspace, the command-line options both
// benches take (--only, --extras) and the extras' buffers, and per-launch timing
// of a captured graph of back-to-back launches. An op's bench keeps its shapes,
// its params and its columns.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/ragged_lengths.hpp"
#include "support/gpu_buffers.hpp"
#include "support/reference.hpp"
#include "xqajit/error.hpp"
#include "xqajit/runtime/driver.hpp"

namespace xqajit::testing {

inline float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Device-to-device copy bandwidth, bytes read + written per second (median of 10).
inline double copy_bandwidth() {
  const std::size_t n = std::size_t(1) << 31;
  DeviceBuffer a(n), b(n);
  a.fill(1);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    cudaEventRecord(e0);
    XQAJIT_CUDART_CHECK(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice));
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t;
    cudaEventElapsedTime(&t, e0, e1);
    if (i >= 2) ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * n / (median(ms) * 1e-3);
}

/// Prints the device and its copy bandwidth (a table line, then a JSON line on stderr);
/// returns the bandwidth, the ceiling every row is a percentage of.
inline double report_device(const DeviceInfo& info) {
  const double copy_bw = copy_bandwidth();
  std::printf("device: %s (%d SMs), copy bandwidth (read+write): %.0f GB/s\n", info.name.c_str(), info.sm_count,
              copy_bw / 1e9);
  std::fprintf(stderr, "{\"device\": \"%s\", \"copy_GBps\": %.1f}\n", info.name.c_str(), copy_bw / 1e9);
  return copy_bw;
}

/// Fills a device buffer with random finite values of `dt` (a host pattern tiled on the device).
/// fp8ds (a buffer of whole 656-byte rows): the e4m3 codes below, four float32 scales as
/// DeepSeek-V3.2's quantiser makes them (amax / 448 rounded to a power of two: 2^-9..2^-4),
/// the 64 rope values bf16 in [-2, 2) (until session 48 the scale and rope bytes were codes
/// too: scales of 2^-63..2^48, half of them negative).
inline void fill_random(DeviceBuffer& buf, DType dt, std::mt19937& rng) {
  constexpr std::size_t kDsRow = 656, kDsScales = 512, kDsRope = 528;
  std::size_t pattern_bytes = std::min<std::size_t>(buf.bytes(), 16 << 20);
  if (dt == DType::fp8ds) pattern_bytes = std::max(pattern_bytes / kDsRow, std::size_t(1)) * kDsRow;  // rows stay whole
  std::vector<std::uint8_t> host(pattern_bytes);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  const int eb = dtype_bytes(dt);
  for (std::size_t i = 0; i < pattern_bytes / eb; ++i) {
    // e4m3 codes with exponents 4..10: finite, no tiny subnormals
    if (dt == DType::fp8 || dt == DType::fp8ds) {
      const unsigned r = rng();
      host[i] = static_cast<std::uint8_t>(((r & 1) << 7) | ((4 + (r >> 1) % 7) << 3) | ((r >> 4) & 7));
    } else {
      store_element(dt, host.data(), i, u(rng));
    }
  }
  if (dt == DType::fp8ds)
    for (std::size_t row = 0; row < pattern_bytes; row += kDsRow) {
      for (int g = 0; g < 4; ++g) {
        const float scale = std::ldexp(1.f, -4 - static_cast<int>(rng() % 6));
        std::memcpy(&host[row + kDsScales + 4 * g], &scale, 4);
      }
      for (int d = 0; d < 64; ++d) store_element(DType::bf16, host.data() + row + kDsRope, d, u(rng));
    }
  for (std::size_t off = 0; off < buf.bytes(); off += pattern_bytes) {
    const std::size_t n = std::min(pattern_bytes, buf.bytes() - off);
    XQAJIT_CUDART_CHECK(cudaMemcpy(buf.get<char>() + off, host.data(), n, cudaMemcpyHostToDevice));
  }
}

/// `batch` requests of `len` keys each over pages of `page_size` keys, every request's
/// pages drawn from one shuffled pool: the shape first (set_shape: what the plan reads),
/// then the table and lengths on the device (upload, once the shape is kept).
struct BenchPages {
  int batch, len, page_size;
  std::size_t per_seq, count;  // pages per request, pages in the pool
  std::vector<std::int32_t> order;  // the pool shuffled: request b's page j is order[b * per_seq + j]
  DeviceBuffer table, lens;
  std::vector<std::int32_t> lengths;  // upload()'s, on the host

  /// Keys over every request (upload()'s lengths).
  double total_keys() const {
    double n = 0;
    for (std::int32_t l : lengths) n += l;
    return n;
  }

  BenchPages(int batch_, int len_, int page_size_)
      : batch(batch_), len(len_), page_size(page_size_), per_seq((len_ + page_size_ - 1) / page_size_),
        count(per_seq * batch_) {}

  template <class Params>
  void set_shape(Params& p) const {
    p.batch = batch;
    p.page_size = page_size;
    p.num_pages = static_cast<int>(count);
    p.max_pages_per_seq = static_cast<int>(per_seq);
  }

  /// The pool in a random order (`order`), as pages come from a free list.
  void shuffle(std::mt19937& rng) {
    order.resize(count);
    for (std::size_t i = 0; i < count; ++i) order[i] = static_cast<std::int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
  }

  /// shuffle(), then the block table and the lengths on the device, in `p`: each `len`, or
  /// (`ragged`) uniform on [1, len], drawn as ragged_lengths.hpp draws them.
  template <class Params>
  void upload(Params& p, std::mt19937& rng, bool ragged = false) {
    shuffle(rng);
    lengths = ragged ? ragged_lengths(batch, len) : std::vector<std::int32_t>(batch, len);
    table = to_device(order);
    lens = to_device(lengths);
    p.block_table = table.get<std::int32_t>();
    p.seq_lens = lens.get<std::int32_t>();
  }

  /// The cache slot (page * page_size + offset) of request b's key `pos` (after shuffle).
  std::int32_t slot(int b, int pos) const {
    const std::int32_t page = order[std::size_t(b) * per_seq + std::size_t(pos / page_size)];
    return page * page_size + pos % page_size;
  }
};

/// The workspace a plan needs, zeroed once (its counters reset themselves), in `p`.
template <class Params>
DeviceBuffer zeroed_workspace(Params& p, std::size_t bytes) {
  DeviceBuffer ws(std::max<std::size_t>(bytes, 16));
  ws.fill(0);
  p.workspace = ws.get();
  p.workspace_bytes = bytes;
  return ws;
}

/// Whether `flag` is on the command line (anywhere after the program name).
inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}

/// The argument after `flag` on the command line; null when the flag is absent, or last, or
/// followed by another option (`--...`).
inline const char* flag_value(int argc, char** argv, const char* flag) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0)
      return std::strncmp(argv[i + 1], "--", 2) == 0 ? nullptr : argv[i + 1];
  return nullptr;
}

/// `--only "A|B"` on the command line: keep the shapes whose key contains A or B
/// (every shape without the flag).
class ShapeFilter {
 public:
  ShapeFilter(int argc, char** argv) {
    const char* value = flag_value(argc, argv, "--only");
    if (value == nullptr) return;
    const std::string list = value;
    for (std::size_t pos = 0, bar; pos <= list.size(); pos = bar + 1) {
      bar = list.find('|', pos);
      if (bar == std::string::npos) bar = list.size();
      parts_.push_back(list.substr(pos, bar - pos));
    }
  }
  bool keeps(const std::string& key) const {
    return parts_.empty() || std::any_of(parts_.begin(), parts_.end(),
                                         [&](const std::string& p) { return key.find(p) != std::string::npos; });
  }

 private:
  std::vector<std::string> parts_;
};

/// `--extras [lse|sink|both]` (no value: both): every launch also writes the log-sum-exp
/// and/or applies attention sinks, so a run with and one without give their cost. GQA and
/// MLA take both (DecodeParams lse / sinks, MlaDecodeParams lse / attn_sink).
struct BenchExtras {
  bool lse = false, sink = false;

  /// Throws ArgumentError naming the allowed values for any other value.
  static BenchExtras parse(int argc, char** argv) {
    BenchExtras e;
    if (!has_flag(argc, argv, "--extras")) return e;
    const char* value = flag_value(argc, argv, "--extras");
    const std::string which = value ? value : "both";
    if (which != "lse" && which != "sink" && which != "both")
      throw ArgumentError("--extras '" + which + "': allowed lse, sink, both (no value: both)");
    e.lse = which != "sink";
    e.sink = which != "lse";
    return e;
  }
  /// The suffix of a row's label: " +lse", " +sink", " +lse +sink" or nothing.
  std::string label() const { return std::string(lse ? " +lse" : "") + (sink ? " +sink" : ""); }
  /// The same as JSON members to append to a row's object (", \"lse\": true" ...), or nothing.
  std::string json() const {
    return std::string(lse ? ", \"lse\": true" : "") + (sink ? ", \"sink\": true" : "");
  }
};

/// The device buffers of one shape's extras: lse float32 [batch, q_len, heads] (contiguous,
/// cudaMalloc's alignment), and sinks float32 [heads] drawn from [-2, 4) -- around the rows'
/// lse, so the sink factor is neither 0 nor 1 and its math runs in full. Null where not asked.
class ExtrasBuffers {
 public:
  ExtrasBuffers(const BenchExtras& extras, int batch, int q_len, int heads, std::mt19937& rng) {
    if (extras.lse) lse_ = DeviceBuffer(std::size_t(batch) * q_len * heads * sizeof(float));
    if (extras.sink) {
      std::vector<float> sinks(heads);
      std::uniform_real_distribution<float> u(-2.f, 4.f);
      for (float& v : sinks) v = u(rng);
      sinks_ = to_device(sinks);
    }
  }
  float* lse() const { return lse_.get<float>(); }
  const float* sinks() const { return sinks_.get<float>(); }

 private:
  DeviceBuffer lse_, sinks_;
};

/// Median microseconds per launch of a graph holding `launches` back-to-back
/// calls of `launch(i)` (10 timed replays after 3 warm-ups).
template <class Launch>
float graph_us_per_launch(cudaStream_t stream, int launches, Launch&& launch) {
  const CapturedGraph graph(stream, [&](cudaStream_t) {
    for (int i = 0; i < launches; ++i) launch(i);
  });
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> per_launch_us;
  for (int rep = 0; rep < 13; ++rep) {
    cudaEventRecord(e0, stream);
    graph.replay();
    cudaEventRecord(e1, stream);
    XQAJIT_CUDART_CHECK(cudaEventSynchronize(e1));
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (rep >= 3) per_launch_us.push_back(ms * 1e3f / launches);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(per_launch_us);
}

}  // namespace xqajit::testing
