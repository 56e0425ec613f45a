// Main for GPU tests: without a usable CUDA device, say so loudly and exit 77,
// which CTest reports as "Skipped" (never as a pass).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::fprintf(stderr,
                 "\n*** SKIPPED [gpu]: no usable CUDA device (%s). These GPU tests did NOT run. ***\n\n",
                 err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
