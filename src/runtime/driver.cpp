#include "xqajit/runtime/driver.hpp"

#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/cuda_api.hpp"
#include "util/log.hpp"
#include "xqajit/error.hpp"

namespace xqajit {

using detail::CudaApi;

struct Driver::Impl {
  const CudaApi& api;
  std::mutex mu;
  std::vector<CUcontext> primary;  // retained on first use, per device; kept for the process
  std::vector<std::unique_ptr<DeviceInfo>> infos;  // read on first use, per device

  explicit Impl(const CudaApi& a) : api(a) {}

  CUcontext context(int ordinal) {
    std::lock_guard<std::mutex> lock(mu);
    if (primary.empty()) {
      int n = 0;
      XQAJIT_CU_CHECK(api, cuDeviceGetCount(&n));
      primary.assign(static_cast<size_t>(n), nullptr);
    }
    if (ordinal < 0 || ordinal >= static_cast<int>(primary.size()))
      throw ArgumentError(fmt::format("device {} does not exist (this host has {} CUDA devices)",
                                      ordinal, primary.size()));
    if (!primary[ordinal]) {
      CUdevice dev;
      XQAJIT_CU_CHECK(api, cuDeviceGet(&dev, ordinal));
      XQAJIT_CU_CHECK(api, cuDevicePrimaryCtxRetain(&primary[ordinal], dev));
    }
    return primary[ordinal];
  }
};

namespace {

/// Makes `ctx` current for a scope and restores the previous one. Where `ctx`
/// is current already (the usual case under torch, whose current device's
/// primary context is current) it costs one cuCtxGetCurrent instead of a
/// push and a pop: these sit on every launch's host path.
class ScopedContext {
 public:
  ScopedContext(const CudaApi& api, CUcontext ctx) : api_(api) {
    CUcontext current = nullptr;
    if (api_.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == ctx) return;
    XQAJIT_CU_CHECK(api_, cuCtxPushCurrent(ctx));
    pushed_ = true;
  }
  ~ScopedContext() {
    if (!pushed_) return;
    CUcontext popped;
    api_.cuCtxPopCurrent(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const CudaApi& api_;
  bool pushed_ = false;
};

}  // namespace

Arch DeviceInfo::best_arch() const {
  Arch a{cc_major, cc_minor, false};
  // The arch-specific variant unlocks wgmma/TMA-class instructions and runs
  // only on exactly this arch, which is what we are compiling for.
  a.accel = (cc_major == 9 && cc_minor == 0) || cc_major == 10 || cc_major == 11 || cc_major == 12;
  return a;
}

bool arch_runs_on(const Arch& built, int cc_major, int cc_minor) {
  if (built.accel) return built.major == cc_major && built.minor == cc_minor;
  return built.major == cc_major && built.minor <= cc_minor;
}

Driver::Driver(const std::string& libcuda_path)
    : impl_(std::make_shared<Impl>(detail::cuda_api(libcuda_path))) {}

Driver& Driver::instance(const std::string& libcuda_path) {
  static std::mutex mu;
  static Driver* driver = nullptr;  // intentionally leaked: outlives static destructors
  std::lock_guard<std::mutex> lock(mu);
  if (!driver) driver = new Driver(libcuda_path);
  return *driver;
}

bool Driver::available(const std::string& libcuda_path) {
  try {
    return instance(libcuda_path).device_count() > 0;
  } catch (const Error&) {
    return false;
  }
}

int Driver::device_count() {
  int n = 0;
  XQAJIT_CU_CHECK(impl_->api, cuDeviceGetCount(&n));
  return n;
}

std::string Driver::version() {
  int v = 0;
  XQAJIT_CU_CHECK(impl_->api, cuDriverGetVersion(&v));
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

const DeviceInfo& Driver::device(int ordinal) {
  const CudaApi& api = impl_->api;
  impl_->context(ordinal);  // validates the ordinal (and sizes the tables)
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->infos.empty()) impl_->infos.resize(impl_->primary.size());
  if (impl_->infos[ordinal]) return *impl_->infos[ordinal];
  CUdevice dev;
  XQAJIT_CU_CHECK(api, cuDeviceGet(&dev, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  XQAJIT_CU_CHECK(api, cuDeviceGetName(name, sizeof(name), dev));
  info.name = name;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    XQAJIT_CU_CHECK(api, cuDeviceGetAttribute(&v, a, dev));
    return v;
  };
  info.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.max_smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  info.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  size_t total = 0;
  XQAJIT_CU_CHECK(api, cuDeviceTotalMem(&total, dev));
  info.total_memory = total;
  impl_->infos[ordinal] = std::make_unique<DeviceInfo>(std::move(info));
  return *impl_->infos[ordinal];
}

int Driver::stream_device(Stream stream) {
  const CudaApi& api = impl_->api;
  CUcontext ctx = nullptr;
  if (stream) {
    XQAJIT_CU_CHECK(api, cuStreamGetCtx(reinterpret_cast<CUstream>(stream), &ctx));
  } else {
    XQAJIT_CU_CHECK(api, cuCtxGetCurrent(&ctx));
    if (!ctx) return 0;  // no current context: the runtime would use device 0 too
  }
  {
    // A primary context this driver retained stays valid (and on its device) for
    // the process: its ordinal is known without making it current.
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (size_t i = 0; i < impl_->primary.size(); ++i)
      if (impl_->primary[i] == ctx) return static_cast<int>(i);
  }
  ScopedContext scope(api, ctx);
  CUdevice dev;
  XQAJIT_CU_CHECK(api, cuCtxGetDevice(&dev));
  return static_cast<int>(dev);
}

bool Driver::stream_is_capturing(Stream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  XQAJIT_CU_CHECK(impl_->api, cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &status));
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

std::shared_ptr<LoadedKernel> Driver::load(const KernelSpec& spec, const std::string& name,
                                           const std::vector<char>& cubin, const std::string& symbol,
                                           const std::string& merge_symbol, const std::string& merge_rows_symbol,
                                           int device) {
  const CudaApi& api = impl_->api;
  const DeviceInfo& info = this->device(device);
  if (!arch_runs_on(spec.arch, info.cc_major, info.cc_minor))
    throw ArgumentError(fmt::format(
        "kernel {} is built for {} and cannot run on device {} ({}, sm_{}{}); ask for arch={}",
        name, spec.arch.str(), device, info.name, info.cc_major, info.cc_minor, info.best_arch().str()));
  CUcontext ctx = impl_->context(device);
  ScopedContext scope(api, ctx);
  CUmodule module = nullptr;
  XQAJIT_CU_CHECK(api, cuModuleLoadData(&module, cubin.data()));
  // The module lives exactly as long as the LoadedKernel that uses it.
  auto impl = impl_;
  std::shared_ptr<LoadedKernel> kernel(new LoadedKernel, [impl, module](LoadedKernel* k) {
    impl->api.cuModuleUnload(module);  // errors at process teardown are harmless
    delete k;
  });
  kernel->name = name;
  kernel->spec = spec;
  kernel->device = device;
  kernel->context = ctx;
  CUfunction fn = nullptr;
  XQAJIT_CU_CHECK(api, cuModuleGetFunction(&fn, module, symbol.c_str()));
  kernel->function = fn;
  if (!merge_symbol.empty()) {
    CUfunction merge = nullptr;
    XQAJIT_CU_CHECK(api, cuModuleGetFunction(&merge, module, merge_symbol.c_str()));
    kernel->merge_function = merge;
  }
  if (!merge_rows_symbol.empty()) {  // optional: a module built before the entry existed merges a row a CTA
    CUfunction rows = nullptr;
    const CUresult found = api.cuModuleGetFunction(&rows, module, merge_rows_symbol.c_str());
    if (found != CUDA_SUCCESS && found != CUDA_ERROR_NOT_FOUND)  // again, to raise with the call's text
      XQAJIT_CU_CHECK(api, cuModuleGetFunction(&rows, module, merge_rows_symbol.c_str()));
    kernel->merge_rows_function = found == CUDA_SUCCESS ? rows : nullptr;
  }
  XQAJIT_CU_CHECK(api, cuFuncGetAttribute(&kernel->static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn));
  XQAJIT_CU_CHECK(api, cuFuncGetAttribute(&kernel->num_regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
  // Raised per device (per context), from this device's own limit: setting it
  // once on device 0 is the classic multi-GPU launch failure.
  kernel->max_dynamic_smem = info.max_smem_per_block_optin - kernel->static_smem;
  XQAJIT_CU_CHECK(api, cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          kernel->max_dynamic_smem));
  detail::logger()->debug("loaded {} on device {} ({} regs, {} B static smem)", name, device,
                          kernel->num_regs, kernel->static_smem);
  return kernel;
}

namespace {

// cuLaunchKernelEx's configuration of a LaunchConfig (the attributes live beside it).
struct LaunchAttrs {
  CUlaunchConfig cfg = {};
  CUlaunchAttribute attrs[2] = {};
  LaunchAttrs(const LaunchConfig& config, Stream stream) {
    cfg.gridDimX = config.grid[0];
    cfg.gridDimY = config.grid[1];
    cfg.gridDimZ = config.grid[2];
    cfg.blockDimX = config.block[0];
    cfg.blockDimY = config.block[1];
    cfg.blockDimZ = config.block[2];
    cfg.sharedMemBytes = config.dynamic_smem;
    cfg.hStream = reinterpret_cast<CUstream>(stream);
    cfg.attrs = attrs;
    if (config.programmatic_dependent_launch) {
      CUlaunchAttribute& a = attrs[cfg.numAttrs++];
      a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      a.value.programmaticStreamSerializationAllowed = 1;
    }
    if (config.cluster[0] * config.cluster[1] * config.cluster[2] > 1) {
      CUlaunchAttribute& a = attrs[cfg.numAttrs++];
      a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      a.value.clusterDim.x = config.cluster[0];
      a.value.clusterDim.y = config.cluster[1];
      a.value.clusterDim.z = config.cluster[2];
    }
  }
  LaunchAttrs(const LaunchAttrs&) = delete;  // cfg.attrs points into this object
  LaunchAttrs& operator=(const LaunchAttrs&) = delete;
};

// One entry point of `kernel`'s module (`fn`: its decode or its merge function), launched in its context.
void launch_entry(const CudaApi& api, const LoadedKernel& kernel, void* fn, const LaunchConfig& config,
                  Stream stream, void** params) {
  LaunchAttrs launch(config, stream);
  ScopedContext scope(api, static_cast<CUcontext>(kernel.context));
  XQAJIT_CU_CHECK(api, cuLaunchKernelEx(&launch.cfg, static_cast<CUfunction>(fn), params, nullptr));
}

}  // namespace

void Driver::launch(const LoadedKernel& kernel, const LaunchConfig& config, Stream stream, void** params) {
  const CudaApi& api = impl_->api;
  if (static_cast<int>(config.dynamic_smem) > kernel.max_dynamic_smem)
    throw ArgumentError(fmt::format(
        "kernel {} needs {} B of dynamic shared memory but device {} allows {} B per block; "
        "choose a smaller kv_tile or head_dim",
        kernel.name, config.dynamic_smem, kernel.device, kernel.max_dynamic_smem));
  launch_entry(api, kernel, kernel.function, config, stream, params);
}

void Driver::launch_merge(const LoadedKernel& kernel, const LaunchConfig& config, Stream stream, void** params) {
  if (!kernel.merge_function)
    throw ArgumentError(fmt::format("kernel {} has no split-merge entry point", kernel.name));
  launch_entry(impl_->api, kernel, kernel.merge_function, config, stream, params);
}

void Driver::launch_merge_rows(const LoadedKernel& kernel, const LaunchConfig& config, Stream stream,
                               void** params) {
  if (!kernel.merge_rows_function)
    throw ArgumentError(fmt::format("kernel {} has no merge entry of several rows a CTA", kernel.name));
  launch_entry(impl_->api, kernel, kernel.merge_rows_function, config, stream, params);
}

void Driver::encode_tiled_tensor_map(void* map, const TiledTensorMapRequest& r) {
  const CudaApi& api = impl_->api;
  cuuint64_t dims[5] = {}, strides[4] = {};
  cuuint32_t box[5] = {}, element_strides[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < r.rank; ++i) {
    dims[i] = r.dims[i];
    box[i] = r.box[i];
    if (i > 0) strides[i - 1] = r.strides_bytes[i - 1];
  }
  const CUtensorMapDataType type =
      r.element_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16;
  CUtensorMap encoded;  // cuda.h's alignment (128 B); the kernel parameter needs 64 (xqajit/tensor_map.h)
  const CUresult res = api.cuTensorMapEncodeTiled(
      &encoded, type, static_cast<cuuint32_t>(r.rank), const_cast<void*>(r.base), dims,
      strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res == CUDA_SUCCESS) {
    std::memcpy(map, &encoded, sizeof(encoded));
    return;
  }
  std::string shape;
  for (int i = 0; i < r.rank; ++i)
    shape += fmt::format("{}dim {} = {} (box {}{})", i ? ", " : "", i, r.dims[i], r.box[i],
                         i ? fmt::format(", stride {} B", r.strides_bytes[i - 1]) : std::string());
  throw ArgumentError(fmt::format("cuTensorMapEncodeTiled refused a {}-byte-element tensor at {}: {}: {}",
                                  r.element_bytes, r.base, shape, detail::cu_error_text(api, res)));
}

bool Driver::clusters_fit(const LoadedKernel& kernel, const LaunchConfig& config) {
  const unsigned n = config.cluster[0] * config.cluster[1] * config.cluster[2];
  if (n <= 1) return true;
  if (n > static_cast<unsigned>(LoadedKernel::kMaxClusterCtas)) return false;
  int resident = kernel.resident_clusters[n].load(std::memory_order_relaxed) - 1;
  if (resident < 0) {  // a race here only asks twice
    const CudaApi& api = impl_->api;
    LaunchAttrs query(config, nullptr);
    ScopedContext scope(api, static_cast<CUcontext>(kernel.context));
    int clusters = 0;
    const CUresult res =
        api.cuOccupancyMaxActiveClusters(&clusters, static_cast<CUfunction>(kernel.function), &query.cfg);
    if (res != CUDA_SUCCESS) {
      detail::logger()->debug("{}: clusters of {} not available ({})", kernel.name, n,
                              detail::cu_error_text(api, res));
      clusters = 0;
    }
    resident = clusters;
    kernel.resident_clusters[n].store(resident + 1, std::memory_order_relaxed);
  }
  const unsigned long long ctas =
      static_cast<unsigned long long>(config.grid[0]) * config.grid[1] * config.grid[2];
  return static_cast<unsigned long long>(resident) * n >= ctas;
}

}  // namespace xqajit
