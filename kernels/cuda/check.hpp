// CUDA_CHECK: the GPU backend's one check for CUDA (and, renamed, HIP) runtime calls. Host-only,
// so that plain C++ sources (the NCCL communicator) use the same check as the .cu files.
#pragma once

#if defined(TPSIM_HIP)
#include "kernels/hip/cuda_to_hip.hpp"
#else
#include <cuda_runtime_api.h>
#endif

#include <string>

#include "io/error.hpp"

// The CUDA and HIP builds of these sources can be linked into one program, so each puts its
// symbols in its own namespace.
#if defined(TPSIM_HIP)
#define TPSIM_GPU_NS hip_backend
#else
#define TPSIM_GPU_NS cuda_backend
#endif

namespace tpsim::TPSIM_GPU_NS {

// Throws tpsim::Error "<error> in `statement` at file:line": the one message of every API's check
// (CUDA, HIP, cuBLASLt, NCCL, MPI), where `error` is the API's name, status and message.
[[noreturn]] inline void throw_api_error(const std::string& error, const char* statement, const char* file, int line) {
  throw Error(error + " in `" + statement + "` at " + file + ":" + std::to_string(line));
}

// "CUDA error cudaErrorMemoryAllocation (out of memory) in `cudaMalloc(&p, bytes)` at file:line".
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* statement, const char* file, int line);

}  // namespace tpsim::TPSIM_GPU_NS

// The one shape of every API's check macro (ggml's CUDA_CHECK_GEN): `statement` evaluated once, its
// status compared with the API's `success` and a failure handed to the API's `thrower` with the
// statement's text as written (`text`: the caller's #statement, before HIP's renames) and file:line.
#define TPSIM_API_CHECK(status_type, success, thrower, statement, text)                                      \
  do {                                                                                                       \
    const status_type tpsim_status_ = (statement);                                                           \
    if (tpsim_status_ != (success)) ::tpsim::TPSIM_GPU_NS::thrower(tpsim_status_, text, __FILE__, __LINE__); \
  } while (0)

#define CUDA_CHECK(statement) TPSIM_API_CHECK(cudaError_t, cudaSuccess, throw_cuda_error, statement, #statement)

// After a kernel launch: launch-configuration errors surface here, execution errors at the next
// synchronisation.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
