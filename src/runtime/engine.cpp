#include "xqajit/runtime/engine.hpp"
#include "xqajit/tuning/tuning.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "util/log.hpp"
#include "xqajit/cache/bundle.hpp"
#include "xqajit/cache/cache.hpp"
#include "xqajit/compile/compiler.hpp"
#include "xqajit/error.hpp"
#include "xqajit/remote/remote_cache.hpp"

namespace xqajit {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// (normalized spec, device): the launch-path key. Hashing the fields keeps
/// the warm path free of string formatting and allocation.
struct KernelKey {
  KernelSpec spec;
  int device;
  bool operator==(const KernelKey& o) const { return device == o.device && spec == o.spec; }
};

struct KernelKeyHash {
  size_t operator()(const KernelKey& k) const {
    const KernelSpec& s = k.spec;
    size_t h = static_cast<size_t>(k.device);
    for (long v : {long(s.kind), long(s.input), long(s.kv), long(s.output), long(s.head_dim),
                   long(s.page_size), long(s.group), long(s.q_len), long(s.sliding_window),
                   long(s.arch.number()), long(s.arch.accel), long(s.kv_tile), long(s.cta_rows)})
      h = h * 1000003u ^ static_cast<size_t>(v);
    return h;
  }
};

/// The fingerprint directory to read when NVRTC is missing: the newest one
/// built from these templates, whatever NVRTC built it.
std::string fingerprint_without_nvrtc(const Options& o, const std::string& template_hash) {
  namespace fs = std::filesystem;
  const std::string prefix = fmt::format("v{}-", kCacheFormatVersion);
  const std::string suffix = "-t" + template_hash.substr(0, 16);
  std::string best;
  fs::file_time_type best_time{};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(o.cache_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) != 0 || n.size() < suffix.size() ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const auto t = e.last_write_time(ec);
    if (best.empty() || t > best_time) best = n, best_time = t;
  }
  return best.empty() ? toolchain_fingerprint("none", template_hash) : best;
}

}  // namespace

std::string to_string(Source s) {
  switch (s) {
    case Source::memory: return "memory";
    case Source::bundle: return "bundle";
    case Source::disk: return "disk";
    case Source::remote: return "remote";
    case Source::compiled: return "compiled";
  }
  return "?";
}

struct Engine::Impl {
  Options options;
  Compiler compiler;
  std::vector<int> archs;          // NVRTC's; empty when NVRTC is missing
  std::string fingerprint;
  std::string template_suffix;     // "-t<hash16>": what a bundle entry must match
  std::unique_ptr<DiskCache> disk;
  std::unique_ptr<BundleSet> bundles;
  std::unique_ptr<RemoteCache> remote;

  mutable std::mutex mu;  // guards memory, inflight, stats
  std::unordered_map<std::string, CubinRef> memory;
  std::unordered_map<std::string, std::shared_future<CubinRef>> inflight;
  EngineStats stats;
  std::shared_ptr<const TuningTable> tuning;  // what this engine published (guarded by mu)

  std::shared_mutex kernels_mu;
  std::unordered_map<KernelKey, std::shared_ptr<LoadedKernel>, KernelKeyHash> kernels;

  explicit Impl(Options o)
      : options(std::move(o)), compiler(TemplateSet::load(options.template_dir), options.libnvrtc_path) {
    const std::string& hash = compiler.templates().hash();
    template_suffix = "-t" + hash.substr(0, 16);
    if (compiler.available()) {
      archs = compiler.supported_archs();
      fingerprint = toolchain_fingerprint(compiler.nvrtc_version(), hash);
    } else {
      fingerprint = fingerprint_without_nvrtc(options, hash);
      if (!options.no_compile)
        detail::logger()->warn("NVRTC is not available: kernels can come only from bundles and the cache");
    }
    if (options.disk_cache) disk = std::make_unique<DiskCache>(options.cache_dir, fingerprint);
    if (!options.bundles.empty()) bundles = std::make_unique<BundleSet>(options.bundles);
    if (!options.remote_cache.empty()) {
      try {
        remote = std::make_unique<RemoteCache>(options, fingerprint);
      } catch (const Error& e) {
        // A misconfigured or unsupported remote must not stop a host that works locally.
        detail::logger()->error("remote cache (XQAJIT_REMOTE_CACHE) is off: {}", e.what());
      }
    }
  }

  /// Bundles, then disk, then the remote, then (under the entry's cross-process
  /// lock and the remote's fleet-wide lease) disk and remote again, then NVRTC;
  /// a compile is published to disk, then to the remote. Runs once per name at a
  /// time (see cubin()).
  CubinRef resolve(const KernelSpec& spec, const std::string& name) {
    const auto start = std::chrono::steady_clock::now();
    CubinRef ref;
    ref.name = name;
    auto found = [&](Source src, std::vector<char> bytes, std::filesystem::path path,
                     const std::string& built_by) {
      ref.source = src;
      ref.fingerprint = built_by;
      ref.cubin = std::make_shared<const std::vector<char>>(std::move(bytes));
      ref.path = std::move(path);
      ref.seconds = seconds_since(start);
      return ref;
    };
    if (bundles)
      if (auto hit = bundles->find(name, template_suffix)) return found(Source::bundle, std::move(hit->cubin), hit->file, hit->entry.fingerprint);
    if (disk)
      if (auto bytes = disk->load(name)) return found(Source::disk, std::move(*bytes), disk->entry_dir(name), fingerprint);
    const std::string arch = spec.arch.str();
    // A remote hit goes to the local disk too, so the next process on this host hits disk.
    auto from_remote = [&](std::vector<char> bytes) {
      std::filesystem::path path;
      if (disk) {
        const nlohmann::json meta = {{"source", "remote"}, {"remote", remote->url().display()}};
        if (auto dir = disk->publish(name, bytes, meta.dump())) path = *dir;
      }
      return found(Source::remote, std::move(bytes), path, fingerprint);
    };
    if (remote)
      if (auto bytes = remote->get(name, arch)) return from_remote(std::move(*bytes));
    if (options.no_compile)
      throw NotAvailableError(fmt::format(
          "kernel {} is in no bundle ({} bundle(s) searched) and not in the cache at {}, and compiling "
          "is disabled (XQAJIT_NO_COMPILE / --no-compile). Add it to a bundle on a build host with "
          "`xqajit bundle pack --out FILE {}` and list FILE in XQAJIT_BUNDLES.",
          name, bundles ? bundles->size() : 0, options.cache_dir.string(), name));
    EntryLock lock;
    if (disk) {
      lock = disk->lock(name);
      // Another process may have published while we waited for the lock.
      if (auto bytes = disk->load(name)) return found(Source::disk, std::move(*bytes), disk->entry_dir(name), fingerprint);
    }
    RemoteLease lease;  // released when this returns: after both publishes
    if (remote) {
      FetchOrLease fetched = remote->fetch_or_lease(name, arch);
      if (fetched.cubin) return from_remote(std::move(*fetched.cubin));
      lease = std::move(fetched.lease);
    }
    CompiledKernel compiled = compiler.compile(spec);
    std::filesystem::path path;
    if (disk) {
      const nlohmann::json meta = {{"nvrtc", compiler.nvrtc_version()},
                                   {"seconds", compiled.seconds},
                                   {"templates", compiler.templates().origin()},
                                   {"options", compiled.options}};
      if (auto dir = disk->publish(name, compiled.cubin, meta.dump())) path = *dir;
      if (options.cache_max_bytes) disk->gc(options.cache_max_bytes);
    }
    if (remote) remote->put(name, arch, compiled.cubin);
    {
      std::lock_guard<std::mutex> g(mu);
      stats.compile_seconds += compiled.seconds;
    }
    return found(Source::compiled, std::move(compiled.cubin), path, fingerprint);
  }

  void count(Source s) {
    switch (s) {
      case Source::memory: ++stats.memory_hits; break;
      case Source::bundle: ++stats.bundle_hits; break;
      case Source::disk: ++stats.disk_hits; break;
      case Source::remote: ++stats.remote_hits; break;
      case Source::compiled: ++stats.compiles; break;
    }
  }
};

Engine::Engine(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {
  set_log_level(impl_->options.log_level);
  activate_tuning();
}

// Tuning (#8): publish the tuning table(s) for decode_plan / mla_decode_plan.
// Never fatal: an unreadable table means heuristic plans.
void Engine::activate_tuning() {
  auto table = std::make_shared<const TuningTable>(load_tuning_tables(impl_->options));
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->tuning = table;
  }
  // The snapshot is process-wide: the engine made last decides (empty = heuristic).
  if (table->empty()) return set_active_tuning(nullptr);
  try {
    set_active_tuning(std::move(table), fingerprint());
  } catch (const std::exception& e) {
    detail::logger()->warn("tuning table not used: {}", e.what());
  }
}

std::shared_ptr<const TuningTable> Engine::tuning() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->tuning;
}

std::vector<KernelSpec> Engine::prewarm_specs(const std::vector<KernelSpec>& specs) const {
  const auto table = tuning();
  return table ? with_tuned_variants(specs, *table, fingerprint()) : specs;
}

void Engine::publish_tuning(const TuningEntry& entry) {
  const Options& o = impl_->options;
  if (o.tuning == "off") return;  // plans are heuristic by request: nothing would read it
  std::shared_ptr<const TuningTable> next;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto table = std::make_shared<TuningTable>(impl_->tuning ? *impl_->tuning : TuningTable{});
    table->put(entry);
    impl_->tuning = next = std::move(table);
  }
  set_active_tuning(next, fingerprint());
  if (!o.tuning.empty() || impl_->disk) {  // persisted where this engine reads tables from
    TuningTable one;
    one.put(entry);
    const auto file =
        o.tuning.empty() ? tuning_file(o.cache_dir, entry.key.device.name) : std::filesystem::path(o.tuning);
    try {
      save_tuning(file, one);
    } catch (const std::exception& e) {
      detail::logger()->warn("tuned choice kept in memory only: {}", e.what());
    }
  }
}
Engine::~Engine() = default;

CubinRef Engine::cubin(const KernelSpec& requested) {
  Impl& m = *impl_;
  const auto start = std::chrono::steady_clock::now();
  const KernelSpec spec = normalized(requested, m.archs);
  const std::string name = canonical_name(spec);

  std::promise<CubinRef> promise;
  std::shared_future<CubinRef> waiting;
  {
    std::lock_guard<std::mutex> g(m.mu);
    if (auto it = m.memory.find(name); it != m.memory.end()) {
      ++m.stats.memory_hits;
      CubinRef ref = it->second;
      ref.source = Source::memory;
      ref.seconds = seconds_since(start);
      return ref;
    }
    if (auto it = m.inflight.find(name); it != m.inflight.end()) {
      waiting = it->second;
    } else {
      m.inflight.emplace(name, promise.get_future().share());
    }
  }
  if (waiting.valid()) {
    // Another thread is resolving this name: share its result (or its error).
    CubinRef ref = waiting.get();
    std::lock_guard<std::mutex> g(m.mu);
    ++m.stats.memory_hits;
    ref.source = Source::memory;
    ref.seconds = seconds_since(start);
    return ref;
  }
  try {
    CubinRef ref = m.resolve(spec, name);
    std::lock_guard<std::mutex> g(m.mu);
    m.count(ref.source);
    m.memory.emplace(name, ref);
    m.inflight.erase(name);
    promise.set_value(ref);
    return ref;
  } catch (...) {
    std::lock_guard<std::mutex> g(m.mu);
    ++m.stats.failures;
    m.inflight.erase(name);  // a later call may retry (e.g. after a fix)
    promise.set_exception(std::current_exception());
    throw;
  }
}

const LoadedKernel& Engine::kernel(const KernelSpec& requested, int device, Stream capturing_stream) {
  Impl& m = *impl_;
  KernelKey key{normalized(requested, m.archs), device};
  {
    std::shared_lock<std::shared_mutex> g(m.kernels_mu);
    if (auto it = m.kernels.find(key); it != m.kernels.end()) return *it->second;
  }
  Driver& driver = Driver::instance(m.options.libcuda_path);
  if (capturing_stream && driver.stream_is_capturing(capturing_stream))
    throw NotAvailableError(fmt::format(
        "kernel {} is not loaded on device {} yet and the stream is capturing a CUDA graph, where "
        "xqajit never compiles or loads. Prewarm first: launch once (or call Engine::kernel) before "
        "capture.",
        canonical_name(key.spec), device));
  CubinRef ref = cubin(key.spec);
  auto loaded = driver.load(key.spec, ref.name, *ref.cubin, kernel_symbol(key.spec),
                             merge_kernel_symbol(key.spec), merge_rows_kernel_symbol(key.spec), device);
  std::unique_lock<std::shared_mutex> g(m.kernels_mu);
  auto [it, inserted] = m.kernels.emplace(key, std::move(loaded));
  return *it->second;
}

std::vector<PrewarmResult> Engine::prewarm(const std::vector<KernelSpec>& requested, int jobs,
                                           const std::function<void(const PrewarmResult&)>& on_done) {
  // Every kernel a launch may use: each backend an auto spec's plan picks from
  // (launch_variants), plus the tuned variants the table names (prewarm_specs).
  const std::vector<KernelSpec> specs = prewarm_specs(launch_variants(requested));
  std::vector<PrewarmResult> results(specs.size());
  if (jobs <= 0) jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  jobs = std::min<int>(jobs, static_cast<int>(std::max<size_t>(1, specs.size())));
  std::atomic<size_t> next{0};
  std::mutex done_mu;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < specs.size();) {
      PrewarmResult& r = results[i];
      r.spec = specs[i];
      const auto start = std::chrono::steady_clock::now();
      try {
        r.name = canonical_name(specs[i]);
        const CubinRef ref = cubin(specs[i]);
        r.source = ref.source;
        r.ok = true;
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      r.seconds = seconds_since(start);
      if (on_done) {
        std::lock_guard<std::mutex> g(done_mu);
        on_done(r);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < jobs; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return results;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->stats;
}
const Options& Engine::options() const { return impl_->options; }
DiskCache* Engine::disk_cache() { return impl_->disk.get(); }
RemoteCache* Engine::remote_cache() { return impl_->remote.get(); }
const Compiler& Engine::compiler() const { return impl_->compiler; }
std::string Engine::fingerprint() const { return impl_->fingerprint; }

Engine& default_engine() {
  static Engine engine;  // built from the environment on first use
  return engine;
}

}  // namespace xqajit
