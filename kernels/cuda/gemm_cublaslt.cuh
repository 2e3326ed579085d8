// GEMMs through cuBLASLt, its heuristic choosing the algorithm (CUDA only; the HIP build uses
// gemm_tiled.cu). The row-major to column-major mapping is gemm_layout.hpp's.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/check.hpp"
#include "model/training.hpp"

namespace tpsim::TPSIM_GPU_NS {

// "cuBLASLt error CUBLAS_STATUS_... (message) in `statement` at file:line" (throw_api_error).
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* statement, const char* file, int line);

}  // namespace tpsim::TPSIM_GPU_NS

#define CUBLAS_CHECK(statement) \
  TPSIM_API_CHECK(cublasStatus_t, CUBLAS_STATUS_SUCCESS, throw_cublas_error, statement, #statement)

namespace tpsim::TPSIM_GPU_NS {

// Bytes of workspace cuBLASLt may use (NVIDIA recommends 32 MiB on Hopper).
inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// "" when cuBLASLt can run a GEMM in `dtype` on a device of compute capability `cc` (major * 10 +
// minor) at all, else why not. Shapes are judged by the heuristic (LtMatmul::unsupported).
std::string lt_dtype_unsupported(DType dtype, int cc);

// One planned matmul: descriptors and the algorithm cuBLASLt's heuristic chose, reused by every
// run. Formats: bf16 and fp16 (fp32 accumulation), tf32 (fp32 storage, TF32 tensor cores), fp32
// (no TF32), fp8 (A and B e4m3 with per-tensor fp32 scales of 1, C and D bf16, fp32 accumulation;
// cuBLASLt accepts fp8 only as "TN", i.e. our trans_b && !trans_a).
class LtMatmul {
 public:
  LtMatmul(cublasLtHandle_t handle, DType dtype, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // "" when the heuristic found an algorithm (and, after choose(), one of them ran), else why not.
  const std::string& unsupported() const { return reason_; }
  // Runs the heuristic's candidates in its order on these buffers until one runs, and keeps it for
  // run(). cuBLASLt's heuristic can offer an algorithm that cublasLtMatmul then refuses with
  // CUBLAS_STATUS_NOT_SUPPORTED; when it refuses all, unsupported() says so. Writes C.
  void choose(const void* a, const void* b, void* c, void* workspace, cudaStream_t stream);
  // C = op(A) op(B) (row-major, ops.hpp's layouts); workspace: kLtWorkspaceBytes of device memory.
  void run(const void* a, const void* b, void* c, void* workspace, cudaStream_t stream) const;

 private:
  cublasLtHandle_t handle_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t layout_a_ = nullptr, layout_b_ = nullptr, layout_c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  // The heuristic's usable algorithms, best first (a plain array: nvcc 13.0's front end fails on a
  // std::vector of this type).
  static constexpr int kMaxCandidates = 8;
  cublasLtMatmulAlgo_t candidates_[kMaxCandidates] = {};
  int candidate_count_ = 0;
  std::string shape_;        // "bf16 GEMM m=... n=... k=..." for messages
  float* scales_ = nullptr;  // fp8: the A and B scale factors, on the device
  std::string reason_;
};

}  // namespace tpsim::TPSIM_GPU_NS
