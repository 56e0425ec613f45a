// `xqajit tune`: time every candidate variant per shape bucket on this GPU and
// write the winners to <cache root>/tuning/<device>.json; `--show` prints a table.
//
// The GPU timer: synthetic inputs of the bucket's shape (zeroed Q and pages,
// every request at the bucket's sequence length, pages laid out linearly),
// warm-up launches, then CUDA events around each launch with a 2 x L2 buffer
// rewritten between launches (so the cache does not hold the pages), median.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli.hpp"
#include "cli_common.hpp"
#include "detail/cuda_api.hpp"
#include "xqajit/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/ops/mla_decode.hpp"
#include "xqajit/spec_set.hpp"
#include "xqajit/tuning.hpp"

namespace xqajit::cli {
namespace {

struct TuneArgs {
  bool show = false;
  std::string preset, spec_file, file;
  std::vector<std::string> fields;
  std::vector<int> batches{1, 8, 64};
  std::vector<std::int64_t> seq_lens{1024, 8192, 32768};
  int warmup = 5, iters = 20;
  std::size_t max_specs = kDefaultMaxSpecs;
};

constexpr int kKvHeads = 8;  // GQA: KV heads per request on the synthetic shape

// Device buffers freed on scope exit.
struct DeviceBuffer {
  const detail::CudaApi& api;
  CUdeviceptr ptr = 0;
  DeviceBuffer(const detail::CudaApi& a, std::size_t bytes, CUstream s) : api(a) {
    XQAJIT_CU_CHECK(api, cuMemAlloc(&ptr, std::max<std::size_t>(bytes, 256)));
    XQAJIT_CU_CHECK(api, cuMemsetD8Async(ptr, 0, std::max<std::size_t>(bytes, 256), s));
  }
  ~DeviceBuffer() { api.cuMemFree(ptr); }
  void* get() const { return reinterpret_cast<void*>(ptr); }
};

class GpuTimer : public Timer {
 public:
  GpuTimer(Engine& engine, int device, const TuneArgs& args)
      : engine_(engine), api_(detail::cuda_api()), device_(device), args_(args) {
    CUdevice dev;
    XQAJIT_CU_CHECK(api_, cuDeviceGet(&dev, device));
    XQAJIT_CU_CHECK(api_, cuDevicePrimaryCtxRetain(&ctx_, dev));
    XQAJIT_CU_CHECK(api_, cuCtxPushCurrent(ctx_));
    XQAJIT_CU_CHECK(api_, cuStreamCreate(&stream_, 0));
    const auto& info = Driver::instance().device(device);
    flush_bytes_ = 2 * static_cast<std::size_t>(std::max(info.l2_bytes, 1 << 20));
    flush_ = std::make_unique<DeviceBuffer>(api_, flush_bytes_, stream_);
  }
  ~GpuTimer() override {
    flush_.reset();
    api_.cuStreamDestroy(stream_);
    CUcontext popped;
    api_.cuCtxPopCurrent(&popped);
  }

  double median_us(const TuningKey& key, const TunedChoice& choice) override {
    const auto& s = key.spec;
    const int batch = key.batch;
    const int pages_per_seq = static_cast<int>((key.seq_len + s.page_size - 1) / s.page_size);
    const std::int64_t pages = static_cast<std::int64_t>(batch) * pages_per_seq;
    std::vector<std::int32_t> table(static_cast<std::size_t>(pages)), lens(batch, static_cast<int>(key.seq_len));
    for (std::int64_t i = 0; i < pages; ++i) table[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    DeviceBuffer d_table(api_, table.size() * 4, stream_), d_lens(api_, lens.size() * 4, stream_);
    XQAJIT_CU_CHECK(api_, cuStreamSynchronize(stream_));
    upload(d_table, table), upload(d_lens, lens);

    std::function<void()> launch;
    std::unique_ptr<DeviceBuffer> q, out, k, v, ws;
    if (s.kind == Kind::gqa) {
      DecodeParams p;
      p.input = s.input, p.kv = s.kv, p.output = s.output;
      p.batch = batch, p.q_len = s.q_len, p.num_kv_heads = kKvHeads, p.num_q_heads = kKvHeads * s.group;
      p.head_dim = s.head_dim, p.page_size = s.page_size, p.max_pages_per_seq = pages_per_seq;
      p.num_pages = static_cast<int>(pages);
      p.kv_tile = choice.kv_tile, p.num_splits = choice.num_splits;
      if (s.sliding_window) p.sliding_window = 4096;
      const std::size_t qo = static_cast<std::size_t>(batch) * s.q_len * p.num_q_heads * s.head_dim * 2;
      const std::size_t kv = static_cast<std::size_t>(pages) * s.page_size * kKvHeads * s.head_dim * dtype_bytes(s.kv);
      q = std::make_unique<DeviceBuffer>(api_, qo, stream_), out = std::make_unique<DeviceBuffer>(api_, qo, stream_);
      k = std::make_unique<DeviceBuffer>(api_, kv, stream_), v = std::make_unique<DeviceBuffer>(api_, kv, stream_);
      p.q = q->get(), p.out = out->get(), p.k_cache = k->get(), p.v_cache = v->get();
      p.block_table = static_cast<const std::int32_t*>(d_table.get());
      p.seq_lens = static_cast<const std::int32_t*>(d_lens.get());
      const auto& info = Driver::instance().device(device_);
      p.workspace_bytes = decode_plan(p, info).workspace_bytes;
      ws = std::make_unique<DeviceBuffer>(api_, p.workspace_bytes, stream_);
      p.workspace = p.workspace_bytes ? ws->get() : nullptr;
      launch = [this, p] { decode(engine_, p, stream_); };
    } else {
      MlaDecodeParams p;
      p.input = s.input, p.kv = s.kv;
      p.batch = batch, p.q_len = s.q_len, p.num_heads = s.group, p.page_size = s.page_size;
      p.max_pages_per_seq = pages_per_seq, p.num_pages = static_cast<int>(pages);
      p.sm_scale = 1.f / std::sqrt(192.f);
      p.backend = choice.backend, p.kv_tile = choice.kv_tile, p.num_splits = choice.num_splits;
      const std::size_t qb = static_cast<std::size_t>(batch) * s.q_len * s.group * 576 * dtype_bytes(s.input);
      const std::size_t ob = static_cast<std::size_t>(batch) * s.q_len * s.group * 512 * 2;
      const std::size_t kv = static_cast<std::size_t>(pages) * s.page_size * 576 * dtype_bytes(s.kv);
      q = std::make_unique<DeviceBuffer>(api_, qb, stream_), out = std::make_unique<DeviceBuffer>(api_, ob, stream_);
      k = std::make_unique<DeviceBuffer>(api_, kv, stream_);
      p.q = q->get(), p.out = out->get(), p.kv_cache = k->get();
      p.block_table = static_cast<const std::int32_t*>(d_table.get());
      p.seq_lens = static_cast<const std::int32_t*>(d_lens.get());
      const auto& info = Driver::instance().device(device_);
      p.workspace_bytes = mla_decode_plan(p, info).workspace_bytes;
      ws = std::make_unique<DeviceBuffer>(api_, p.workspace_bytes, stream_);
      p.workspace = p.workspace_bytes ? ws->get() : nullptr;
      launch = [this, p] { mla_decode(engine_, p, stream_); };
    }
    XQAJIT_CU_CHECK(api_, cuStreamSynchronize(stream_));
    for (int i = 0; i < args_.warmup; ++i) launch();
    CUevent e0, e1;
    XQAJIT_CU_CHECK(api_, cuEventCreate(&e0, 0));
    XQAJIT_CU_CHECK(api_, cuEventCreate(&e1, 0));
    std::vector<float> ms;
    for (int i = 0; i < args_.iters; ++i) {
      XQAJIT_CU_CHECK(api_, cuMemsetD32Async(flush_->ptr, static_cast<unsigned>(i), flush_bytes_ / 4, stream_));
      XQAJIT_CU_CHECK(api_, cuEventRecord(e0, stream_));
      launch();
      XQAJIT_CU_CHECK(api_, cuEventRecord(e1, stream_));
      XQAJIT_CU_CHECK(api_, cuEventSynchronize(e1));
      float t = 0;
      XQAJIT_CU_CHECK(api_, cuEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    api_.cuEventDestroy(e0), api_.cuEventDestroy(e1);
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    return ms[ms.size() / 2] * 1000.0;
  }

 private:
  void upload(const DeviceBuffer& b, const std::vector<std::int32_t>& host) {
    // Small and once per key: write word by word with async memsets (no cuMemcpy in the table).
    for (std::size_t i = 0; i < host.size(); ++i)
      XQAJIT_CU_CHECK(api_, cuMemsetD32Async(b.ptr + i * 4, static_cast<unsigned>(host[i]), 1, stream_));
  }

  Engine& engine_;
  const detail::CudaApi& api_;
  int device_;
  const TuneArgs& args_;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::size_t flush_bytes_ = 0;
  std::unique_ptr<DeviceBuffer> flush_;
};

std::string choice_label(const TunedChoice& c, Kind kind) {
  std::string s = kind == Kind::mla ? to_string(c.backend) : fmt::format("t{}", c.kv_tile);
  return s + (c.num_splits ? fmt::format("/s{}", c.num_splits) : "/auto");
}

void print_entry(const TuningEntry& e) {
  double heur = 0, best = 1e300;
  for (const auto& c : e.candidates) {
    if (c.heuristic) heur = c.median_us;
    if (c.choice == e.winner) best = c.median_us;
  }
  const auto& s = e.key.spec;
  fmt::print("{} {} kv={} d{} g{} q{} {}  batch {:>4}  seq {:>6}  winner {:<12} {:8.2f} us  heuristic {:8.2f} us  "
             "gain {:.3f}x\n",
             to_string(s.kind), to_string(s.input), to_string(s.kv), s.head_dim, s.group, s.q_len, s.arch.str(),
             e.key.batch, e.key.seq_len, choice_label(e.winner, s.kind), best, heur, heur > 0 ? heur / best : 0.0);
}

std::vector<KernelSpec> collect(const TuneArgs& args, const Options& options) {
  if (!args.spec_file.empty() && !args.preset.empty()) throw UsageError("give --spec-file or --preset, not both");
  if (args.spec_file.empty() && args.preset.empty() && args.fields.empty())
    throw UsageError("nothing to tune: give --spec-file FILE, --preset NAME or FIELD=VALUE[,VALUE...]");
  FieldProduct overrides = parse_field_args(args.fields);
  std::vector<FieldProduct> products;
  std::optional<Arch> arch = current_gpu_arch(options);
  if (!args.preset.empty()) {
    std::vector<Arch> archs;
    if (arch) archs.push_back(*arch);
    products = with_overrides(preset(args.preset, archs), overrides);
  } else if (!args.spec_file.empty()) {
    products = with_overrides(read_spec_file(args.spec_file), overrides);
  } else {
    products = {overrides};
  }
  ExpandOptions eo;
  eo.skip_invalid = true;
  if (arch) eo.default_arch = &*arch;
  SpecSet set = expand(products, eo);
  refuse_large_spec_set(set.specs.size(), args.max_specs, products);
  return set.specs;
}

void run_tune(const TuneArgs& args, const GlobalFlags& flags) {
  Options options = make_options(flags);
  const auto file_for = [&](const std::string& device) {
    return args.file.empty() ? tuning_file(options.cache_dir, device) : std::filesystem::path(args.file);
  };
  if (args.show) {
    std::vector<std::filesystem::path> files;
    if (!args.file.empty()) files.push_back(args.file);
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(options.cache_dir / "tuning", ec))
      if (args.file.empty() && f.path().extension() == ".json") files.push_back(f.path());
    nlohmann::json out = nlohmann::json::array();
    for (const auto& f : files) {
      const TuningTable t = load_tuning(f);
      if (flags.json) {
        out.push_back({{"file", f.string()}, {"table", nlohmann::json::parse(t.to_json())}});
        continue;
      }
      fmt::print("{} ({} entries)\n", f.string(), t.entries().size());
      for (const auto& e : t.entries()) print_entry(e);
    }
    if (flags.json) fmt::print("{}\n", out.dump(1));
    return;
  }

  const std::vector<KernelSpec> specs = collect(args, options);  // refuses an exploding set first
  Engine engine(options);
  Driver& driver = Driver::instance();
  const DeviceInfo& info = driver.device(0);
  TuningDevice device{info.name, info.cc_major, info.cc_minor, info.sm_count, engine.fingerprint()};
  GpuTimer timer(engine, 0, args);
  TuningTable table;
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t total = specs.size() * args.batches.size() * args.seq_lens.size();
  std::size_t done = 0;
  nlohmann::json report = nlohmann::json::array();
  for (const auto& spec : specs)
    for (int b : args.batches)
      for (std::int64_t sl : args.seq_lens) {
        TuningKey key{device, spec, batch_bucket(b), seq_bucket(sl)};
        auto entry = tune_key(key, timer);
        ++done;
        fmt::print(stderr, "\r[{:>4}/{}] tuning...", done, total);
        if (!entry) continue;
        if (!flags.json) fmt::print(stderr, "\n"), print_entry(*entry), std::fflush(stdout);
        table.put(*entry);
      }
  fmt::print(stderr, "\n");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto file = file_for(info.name);
  save_tuning(file, table);
  if (flags.json) {
    nlohmann::json doc = nlohmann::json::parse(table.to_json());
    doc["file"] = file.string();
    doc["seconds"] = secs;
    fmt::print("{}\n", doc.dump(1));
  } else {
    fmt::print("{} keys tuned in {:.1f} s; written to {}\n", table.entries().size(), secs, file.string());
  }
}

}  // namespace

void add_tune_command(CLI::App& app, GlobalFlags& flags, int& exit_code) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand("tune", "Time every variant per shape bucket on this GPU; write the tuning table");
  cmd->add_flag("--show", args->show, "Print the tuning tables in the cache root (or --file) and exit");
  cmd->add_option("--preset", args->preset, "A built-in spec set");
  cmd->add_option("--spec-file", args->spec_file, "A spec-set file");
  cmd->add_option("--file", args->file, "The tuning table to write/show (default <cache>/tuning/<device>.json)");
  cmd->add_option("--batch", args->batches, "Batch sizes (comma-separated)")->delimiter(',');
  cmd->add_option("--seq-len", args->seq_lens, "Longest sequence lengths (comma-separated)")->delimiter(',');
  cmd->add_option("--iters", args->iters, "Timed launches per candidate (median)");
  cmd->add_option("--max-specs", args->max_specs, "Refuse spec sets larger than this (default 4096)");
  cmd->add_option("fields", args->fields, "FIELD=VALUE[,VALUE...]");
  cmd->callback([args, &flags, &exit_code] {
    run_tune(*args, flags);
    exit_code = 0;
  });
}

}  // namespace xqajit::cli
