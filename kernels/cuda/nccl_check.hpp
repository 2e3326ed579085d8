// NCCL_CHECK: the one check for NCCL calls (the communicator and the version in BackendInfo).
#pragma once

#include <nccl.h>

#include <string>

#include "kernels/cuda/check.hpp"

namespace tpsim::TPSIM_GPU_NS {

// "NCCL error 2 (unhandled system error ...) in `statement` at file:line" (throw_api_error).
[[noreturn]] inline void throw_nccl_error(ncclResult_t status, const char* statement, const char* file, int line) {
  throw_api_error("NCCL error " + std::to_string(static_cast<int>(status)) + " (" + ncclGetErrorString(status) + ")",
                  statement, file, line);
}

}  // namespace tpsim::TPSIM_GPU_NS

#define NCCL_CHECK(statement) TPSIM_API_CHECK(ncclResult_t, ncclSuccess, throw_nccl_error, statement, #statement)
