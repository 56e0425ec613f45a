#pragma once
// CUDA-runtime helpers for GPU tests and benchmarks (header-only: only targets
// that link cudart include it): device buffers, a stream, a captured graph. Every
// call is checked; failures throw with the call's text and file:line.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#define XQAJIT_CUDART_CHECK(call)                                                          \
  do {                                                                                     \
    const cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess)                                                               \
      throw std::runtime_error(std::string(#call) + " failed: " + cudaGetErrorName(err_) + \
                               " (" + cudaGetErrorString(err_) + ") at " + __FILE__ + ":" + \
                               std::to_string(__LINE__));                                  \
  } while (0)

namespace xqajit::testing {

/// Move-only owner of a cudaMalloc'ed buffer.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes) XQAJIT_CUDART_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <class T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }

  void upload(const void* src, std::size_t n) {
    XQAJIT_CUDART_CHECK(cudaMemcpy(ptr_, src, n, cudaMemcpyHostToDevice));
  }
  template <class T>
  void upload(const std::vector<T>& v) { upload(v.data(), v.size() * sizeof(T)); }
  void download(void* dst, std::size_t n) const {
    XQAJIT_CUDART_CHECK(cudaMemcpy(dst, ptr_, n, cudaMemcpyDeviceToHost));
  }
  // Synchronous: cudaMemset runs on the legacy stream, which kernels launched on a
  // non-blocking stream do not wait for; without the sync a poison fill (or a
  // workspace zeroing) can land after a kernel's stores.
  void fill(int byte) {
    XQAJIT_CUDART_CHECK(cudaMemset(ptr_, byte, bytes_));
    XQAJIT_CUDART_CHECK(cudaDeviceSynchronize());
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(std::max<std::size_t>(16, v.size() * sizeof(T)));
  if (!v.empty()) b.upload(v);
  return b;
}

/// Move-only owner of a non-blocking stream.
class CudaStream {
 public:
  CudaStream() { XQAJIT_CUDART_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~CudaStream() {
    if (s_) cudaStreamDestroy(s_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/// The work `record(stream)` enqueues on `stream`, captured once (thread-local mode) into an
/// executable graph that replay() launches on the same stream; graph and executable are
/// destroyed with the object. A `record` that throws ends the capture first, so the stream
/// is usable again, and the exception goes on.
class CapturedGraph {
 public:
  template <class Record>
  CapturedGraph(cudaStream_t stream, Record&& record) : stream_(stream) {
    XQAJIT_CUDART_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      record(stream_);
    } catch (...) {
      end_capture();  // its status would hide the exception that ended the recording
      throw;
    }
    XQAJIT_CUDART_CHECK(end_capture());
    cudaGraphExec_t exec = nullptr;
    XQAJIT_CUDART_CHECK(cudaGraphInstantiate(&exec, graph_.get(), 0));
    exec_.reset(exec);
  }

  /// One launch of the whole graph on the capturing stream (asynchronous).
  void replay() const { XQAJIT_CUDART_CHECK(cudaGraphLaunch(exec_.get(), stream_)); }

 private:
  struct Destroy {
    void operator()(cudaGraph_t g) const { cudaGraphDestroy(g); }
    void operator()(cudaGraphExec_t e) const { cudaGraphExecDestroy(e); }
  };
  cudaError_t end_capture() {
    cudaGraph_t graph = nullptr;
    const cudaError_t err = cudaStreamEndCapture(stream_, &graph);
    graph_.reset(graph);
    return err;
  }

  cudaStream_t stream_;
  std::unique_ptr<CUgraph_st, Destroy> graph_;
  std::unique_ptr<CUgraphExec_st, Destroy> exec_;  // after graph_: destroyed first
};

}  // namespace xqajit::testing
