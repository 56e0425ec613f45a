#pragma once
// Move-only owners for what the tuner borrows from the driver: a current
// context for a scope, device memory, a pair of events. Used by the library's
// tuner (src/tuning/tuner_gpu.cpp) and the CLI's synthetic problems.

#include <cstddef>
#include <utility>

#include "runtime/cuda_api.hpp"
#include "xqajit/error.hpp"

namespace xqajit::detail {

/// Makes a context current for a scope: the stream's, else the current one,
/// else device `device`'s primary context (retained and released).
class ContextScope {
 public:
  ContextScope(const CudaApi& api, CUstream stream, int device) : api_(api) {
    CUcontext ctx = nullptr;
    if (stream) {
      XQAJIT_CU_CHECK(api_, cuStreamGetCtx(stream, &ctx));
    } else {
      XQAJIT_CU_CHECK(api_, cuCtxGetCurrent(&ctx));
      if (!ctx) {
        XQAJIT_CU_CHECK(api_, cuDeviceGet(&device_, device));
        XQAJIT_CU_CHECK(api_, cuDevicePrimaryCtxRetain(&ctx, device_));
        retained_ = true;
      }
    }
    try {
      XQAJIT_CU_CHECK(api_, cuCtxPushCurrent(ctx));
    } catch (...) {
      if (retained_) api_.cuDevicePrimaryCtxRelease(device_);
      throw;
    }
  }
  ~ContextScope() {
    CUcontext popped;
    api_.cuCtxPopCurrent(&popped);
    if (retained_) api_.cuDevicePrimaryCtxRelease(device_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const CudaApi& api_;
  CUdevice device_ = 0;
  bool retained_ = false;
};

/// Device memory (in the current context), freed on scope exit.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const CudaApi& api, std::size_t bytes) : api_(&api), bytes_(bytes) {
    if (bytes) XQAJIT_CU_CHECK(api, cuMemAlloc(&ptr_, bytes));
  }
  ~DeviceMemory() { reset(); }
  DeviceMemory(DeviceMemory&& o) noexcept { *this = std::move(o); }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = std::exchange(o.api_, nullptr);
      ptr_ = std::exchange(o.ptr_, 0);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  void reset() {
    if (ptr_) api_->cuMemFree(ptr_);
    ptr_ = 0, bytes_ = 0;
  }
  CUdeviceptr ptr() const { return ptr_; }
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t bytes() const { return bytes_; }

 private:
  const CudaApi* api_ = nullptr;
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

/// Two events around a launch.
class EventPair {
 public:
  explicit EventPair(const CudaApi& api) : api_(api) {
    XQAJIT_CU_CHECK(api_, cuEventCreate(&start, CU_EVENT_DEFAULT));
    try {
      XQAJIT_CU_CHECK(api_, cuEventCreate(&stop, CU_EVENT_DEFAULT));
    } catch (...) {
      api_.cuEventDestroy(start);
      throw;
    }
  }
  ~EventPair() {
    api_.cuEventDestroy(start);
    api_.cuEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  CUevent start = nullptr, stop = nullptr;

 private:
  const CudaApi& api_;
};

/// A stream of the caller's own (in the current context), destroyed on scope exit.
class OwnedStream {
 public:
  OwnedStream(const CudaApi& api, unsigned flags) : api_(api) { XQAJIT_CU_CHECK(api_, cuStreamCreate(&stream_, flags)); }
  ~OwnedStream() { api_.cuStreamDestroy(stream_); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  CUstream get() const { return stream_; }

 private:
  const CudaApi& api_;
  CUstream stream_ = nullptr;
};

/// The launches `record` makes on `stream`, captured once into an executable graph.
/// A failed capture ends it, so the stream is usable again.
class CapturedGraph {
 public:
  template <class Record>
  CapturedGraph(const CudaApi& api, CUstream stream, Record&& record) : api_(api), stream_(stream) {
    XQAJIT_CU_CHECK(api_, cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    try {
      record();
    } catch (...) {
      CUgraph broken = nullptr;
      api_.cuStreamEndCapture(stream_, &broken);
      if (broken) api_.cuGraphDestroy(broken);
      throw;
    }
    XQAJIT_CU_CHECK(api_, cuStreamEndCapture(stream_, &graph_));
    try {
      XQAJIT_CU_CHECK(api_, cuGraphInstantiate(&exec_, graph_, 0));
    } catch (...) {
      api_.cuGraphDestroy(graph_);
      throw;
    }
  }
  ~CapturedGraph() {
    api_.cuGraphExecDestroy(exec_);
    api_.cuGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void replay() const { XQAJIT_CU_CHECK(api_, cuGraphLaunch(exec_, stream_)); }

 private:
  const CudaApi& api_;
  CUstream stream_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace xqajit::detail
