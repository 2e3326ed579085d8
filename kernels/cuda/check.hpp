// CUDA_CHECK: the GPU backend's one check for CUDA (and, renamed, HIP) runtime calls. Host-only,
// so that plain C++ sources (the NCCL communicator) use the same check as the .cu files.
#pragma once

#if defined(TPSIM_HIP)
#include "kernels/hip/cuda_to_hip.hpp"
#else
#include <cuda_runtime_api.h>
#endif

#include "io/error.hpp"

// The CUDA and HIP builds of these sources can be linked into one program, so each puts its
// symbols in its own namespace.
#if defined(TPSIM_HIP)
#define TPSIM_GPU_NS hip_backend
#else
#define TPSIM_GPU_NS cuda_backend
#endif

namespace tpsim::TPSIM_GPU_NS {

// Throws tpsim::Error naming the failed statement, where it is, and the runtime's message:
// "CUDA error cudaErrorMemoryAllocation (out of memory) in `cudaMalloc(&p, bytes)` at file:line".
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* statement, const char* file, int line);

}  // namespace tpsim::TPSIM_GPU_NS

#define CUDA_CHECK(statement)                                                        \
  do {                                                                               \
    const cudaError_t tpsim_status_ = (statement);                                   \
    if (tpsim_status_ != cudaSuccess)                                                \
      ::tpsim::TPSIM_GPU_NS::throw_cuda_error(tpsim_status_, #statement, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, execution errors at the next
// synchronisation.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
