#pragma once
/// The CUDA driver, loaded with dlopen on first use so that a host without a
/// GPU driver can still compile and prewarm. Modules are loaded per device
/// (into the device's primary context, which the CUDA runtime and PyTorch share).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xqajit/spec.hpp"

struct CUstream_st;  // CUstream == cudaStream_t

namespace xqajit {

/// A CUDA stream handle from the runtime (cudaStream_t) or the driver (CUstream).
using Stream = CUstream_st*;

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int max_smem_per_block_optin = 0;  // bytes a block may request with the attribute raised
  int l2_bytes = 0;
  std::size_t total_memory = 0;
  /// The best arch to compile for: the "a" variant where one exists (sm_90a on H100).
  Arch best_arch() const;
};

/// Whether a cubin built for `built` can run on a device of compute capability
/// major.minor: an "a" cubin only on exactly that arch, a plain one on the same
/// major with an equal or higher minor.
bool arch_runs_on(const Arch& built, int cc_major, int cc_minor);

/// A kernel loaded on one device, ready to launch.
struct LoadedKernel {
  std::string name;           // canonical spec name
  KernelSpec spec;
  int device = 0;
  void* function = nullptr;   // CUfunction
  /// CUfunction of the family's split-merge launch (MLA: xqajit_mla_merge), null
  /// where the family merges inside the decode kernel only (GQA).
  void* merge_function = nullptr;
  /// CUfunction of its merge of several rows a CTA (MLA hopper: xqajit_mla_merge_rows), null
  /// where the module has none (a cubin built before it: the launch merges a row a CTA).
  void* merge_rows_function = nullptr;
  void* context = nullptr;    // CUcontext (the device's primary context)
  int max_dynamic_smem = 0;   // bytes of dynamic shared memory this kernel may request here
  int static_smem = 0;
  int num_regs = 0;
  /// Thread-block clusters of n CTAs this kernel can have resident at once on its
  /// device (its block and shared memory are its spec's), plus one (0: not asked yet);
  /// Driver::clusters_fit fills it.
  static constexpr int kMaxClusterCtas = 8;  // the portable cluster size
  mutable std::atomic<int> resident_clusters[kMaxClusterCtas + 1] = {};
};

struct LaunchConfig {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_smem = 0;
  bool programmatic_dependent_launch = false;
  /// Thread-block cluster dims (sm_90+; each must divide the grid's); {1, 1, 1}: no cluster.
  unsigned cluster[3] = {1, 1, 1};
};

/// A tiled tensor map over a strided tensor of 1- or 2-byte elements, boxes in the
/// 128-byte swizzle (cuTensorMapEncodeTiled's arguments; dimension 0 is contiguous).
struct TiledTensorMapRequest {
  const void* base = nullptr;         // 16-byte aligned
  int rank = 0;                       // 1 to 5
  int element_bytes = 2;              // 1 or 2
  std::uint64_t dims[5] = {};         // elements per dimension
  std::uint64_t strides_bytes[4] = {};  // byte strides of dimensions 1.. (multiples of 16)
  std::uint32_t box[5] = {};          // box extent per dimension (box[0] * element_bytes <= 128)
};

/// Loads libcuda (once; thread-safe). Throws LibraryError naming the library and
/// where it looked, and saying what works without it.
class Driver {
 public:
  static Driver& instance(const std::string& libcuda_path = {});
  /// Whether libcuda loads and cuInit succeeds (never throws).
  static bool available(const std::string& libcuda_path = {});

  int device_count();
  /// The device's properties, read once and cached (they never change), so the
  /// launch path can consult them without driver calls or allocation.
  const DeviceInfo& device(int ordinal);
  /// "13.0"-style driver CUDA version.
  std::string version();
  /// The device whose context owns `stream` (the current one for the null stream).
  int stream_device(Stream stream);
  bool stream_is_capturing(Stream stream);

  /// Loads `cubin` into `device`'s primary context and finds `symbol` (and
  /// `merge_symbol`, unless empty; `merge_rows_symbol` where the module has it); raises the
  /// kernel's dynamic shared-memory limit to what this device allows.
  std::shared_ptr<LoadedKernel> load(const KernelSpec& spec, const std::string& name,
                                     const std::vector<char>& cubin, const std::string& symbol,
                                     const std::string& merge_symbol, const std::string& merge_rows_symbol,
                                     int device);

  /// cuLaunchKernelEx on `stream`: no sync, no allocation. `params` is the
  /// kernel's parameter array (kernelParams). Checks dynamic_smem against the
  /// kernel's limit on its device first.
  void launch(const LoadedKernel& kernel, const LaunchConfig& config, Stream stream, void** params);
  /// The same for the kernel's split-merge entry (LoadedKernel::merge_function).
  void launch_merge(const LoadedKernel& kernel, const LaunchConfig& config, Stream stream, void** params);
  /// The same for its merge of several rows a CTA (LoadedKernel::merge_rows_function).
  void launch_merge_rows(const LoadedKernel& kernel, const LaunchConfig& config, Stream stream, void** params);
  /// Encodes `request` into the 128-byte tensor map at `map` (a CUtensorMap image). A
  /// host-only call (no device work, no allocation): legal while a stream captures.
  /// Throws ArgumentError naming the request when the driver refuses it.
  void encode_tiled_tensor_map(void* map, const TiledTensorMapRequest& request);
  /// Whether every thread-block cluster of `config` (true without clusters) can be
  /// resident at once: cuOccupancyMaxActiveClusters, asked once per kernel and cluster size.
  bool clusters_fit(const LoadedKernel& kernel, const LaunchConfig& config);

 private:
  explicit Driver(const std::string& libcuda_path);
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace xqajit
