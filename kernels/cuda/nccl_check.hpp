// NCCL_CHECK: the one check for NCCL calls (the communicator and the version in BackendInfo).
#pragma once

#include <nccl.h>

#include <string>

#include "kernels/cuda/check.hpp"

namespace tpsim::TPSIM_GPU_NS {

// Throws tpsim::Error: "NCCL error 2 (unhandled system error ...) in `statement` at file:line".
[[noreturn]] inline void throw_nccl_error(ncclResult_t status, const char* statement, const char* file, int line) {
  throw Error(std::string("NCCL error ") + std::to_string(static_cast<int>(status)) + " (" +
              ncclGetErrorString(status) + ") in `" + statement + "` at " + file + ":" + std::to_string(line));
}

}  // namespace tpsim::TPSIM_GPU_NS

#define NCCL_CHECK(statement)                                                                  \
  do {                                                                                         \
    const ncclResult_t tpsim_status_ = (statement);                                            \
    if (tpsim_status_ != ncclSuccess)                                                          \
      ::tpsim::TPSIM_GPU_NS::throw_nccl_error(tpsim_status_, #statement, __FILE__, __LINE__); \
  } while (0)
