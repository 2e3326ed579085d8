#include "kernels/cuda/gemm_cublaslt.cuh"

#include "kernels/cuda/gemm_layout.hpp"

namespace tpsim::TPSIM_GPU_NS {

void throw_cublas_error(cublasStatus_t status, const char* statement, const char* file, int line) {
  throw_api_error(
      std::string("cuBLASLt error ") + cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")",
      statement, file, line);
}

std::string lt_dtype_unsupported(DType dtype, int cc) {
  switch (dtype) {
    case DType::kFp8:
      if (cc < 89)
        return "fp8 GEMMs need compute capability 8.9 or newer (this device: " + std::to_string(cc / 10) + "." +
               std::to_string(cc % 10) + ")";
      return "";
    case DType::kBf16:
    case DType::kTf32:
      if (cc < 80)
        return std::string(dtype == DType::kBf16 ? "bf16" : "tf32") + " GEMMs need compute capability 8.0 or newer";
      return "";
    case DType::kFp16:
    case DType::kFp32: return "";
    case DType::kFp4: return "fp4 GEMMs (NVFP4, MXFP4) are not run by this backend";
  }
  return "unknown format";
}

namespace {

using gpu::column_major_problem;
using gpu::LtOperand;
using gpu::LtProblem;

struct LtTypes {
  cudaDataType_t ab, cd;
  cublasComputeType_t compute;
};

LtTypes lt_types(DType dtype) {
  switch (dtype) {
    case DType::kFp8: return {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::kBf16: return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::kFp16: return {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::kTf32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
    case DType::kFp32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::kFp4: break;  // refused by lt_dtype_unsupported
  }
  throw Error("cuBLASLt: no fp4 GEMMs in this backend");
}

cublasOperation_t op_of(const LtOperand& o) { return o.transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

uint64_t u64(int64_t x) { return static_cast<uint64_t>(x); }

}  // namespace

LtMatmul::LtMatmul(cublasLtHandle_t handle, DType dtype, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b)
    : handle_(handle) {
  if (dtype == DType::kFp8 && (trans_a || !trans_b))
    throw Error("cuBLASLt fp8 GEMMs take only trans_a = false, trans_b = true (TN); the caller arranges it");
  const LtProblem p = column_major_problem(m, n, k, trans_a, trans_b);
  const LtTypes t = lt_types(dtype);

  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, t.compute, CUDA_R_32F));
  const cublasOperation_t op_a = op_of(p.a), op_b = op_of(p.b);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  if (dtype == DType::kFp8) {
    const float one = 1.0f;
    CUDA_CHECK(cudaMalloc(&scales_, sizeof one));
    CUDA_CHECK(cudaMemcpy(scales_, &one, sizeof one, cudaMemcpyHostToDevice));
    // A pageable copy may return before its DMA lands, and the matmuls run on a non-blocking
    // stream that does not wait for the legacy stream.
    CUDA_CHECK(cudaDeviceSynchronize());
    // Both scales are 1, read from one allocation's start: cuBLASLt 13.1 takes only 16-byte-aligned
    // scale pointers, and with the B scale 4 bytes after A's it refused every fp8 algorithm at run
    // time (tests/gpu/lt_probe.cu, data/kernel-runs/2026-11-27).
    const float* a_scale = scales_;
    const float* b_scale = scales_;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_a_, t.ab, u64(p.a.rows), u64(p.a.cols), p.a.ld));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_b_, t.ab, u64(p.b.rows), u64(p.b.cols), p.b.ld));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_c_, t.cd, u64(p.c.rows), u64(p.c.cols), p.c.ld));

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = kLtWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t results[kMaxCandidates] = {};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace, sizeof workspace);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle_, desc_, layout_a_, layout_b_, layout_c_, layout_c_, preference,
                                            kMaxCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  shape_ = std::string(to_string(dtype)) + " GEMM m=" + std::to_string(m) + " n=" + std::to_string(n) +
           " k=" + std::to_string(k) + (trans_a ? " A^T" : "") + (trans_b ? " B^T" : "");
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    reason_ = "cuBLASLt's heuristic has no algorithm for a " + shape_;
    return;
  }
  CUBLAS_CHECK(status);
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) candidates_[candidate_count_++] = results[i].algo;
  if (candidate_count_ == 0) {
    reason_ = "cuBLASLt's heuristic has no usable algorithm for a " + shape_;
    return;
  }
  algo_ = candidates_[0];
}

void LtMatmul::choose(const void* a, const void* b, void* c, void* workspace, cudaStream_t stream) {
  if (!reason_.empty()) return;
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = 0; i < candidate_count_; ++i) {
    const cublasLtMatmulAlgo_t& algo = candidates_[i];
    const cublasStatus_t status = cublasLtMatmul(handle_, desc_, &alpha, b, layout_a_, a, layout_b_, &beta, c,
                                                 layout_c_, c, layout_c_, &algo, workspace, kLtWorkspaceBytes, stream);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) continue;
    CUBLAS_CHECK(status);
    algo_ = algo;
    return;
  }
  reason_ = "cublasLtMatmul refused (CUBLAS_STATUS_NOT_SUPPORTED) each of the " + std::to_string(candidate_count_) +
            " algorithms its heuristic offered for a " + shape_;
}

LtMatmul::~LtMatmul() {
  // Destructors report nothing: an error here would hide the one that unwound the stack.
  if (layout_c_) cublasLtMatrixLayoutDestroy(layout_c_);
  if (layout_b_) cublasLtMatrixLayoutDestroy(layout_b_);
  if (layout_a_) cublasLtMatrixLayoutDestroy(layout_a_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  if (scales_) (void)cudaFree(scales_);
}

void LtMatmul::run(const void* a, const void* b, void* c, void* workspace, cudaStream_t stream) const {
  if (!reason_.empty()) throw Error("cuBLASLt: " + reason_);
  const float alpha = 1.0f, beta = 0.0f;
  // cuBLASLt's A is our B and its B our A (gemm_layout.hpp); C is read with beta = 0, so D = C.
  CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, &alpha, b, layout_a_, a, layout_b_, &beta, c, layout_c_, c, layout_c_,
                              &algo_, workspace, kLtWorkspaceBytes, stream));
}

}  // namespace tpsim::TPSIM_GPU_NS
