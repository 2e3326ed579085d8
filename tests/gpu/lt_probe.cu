// A diagnostic of cuBLASLt itself, apart from tpsim's backend: for GEMMs of each format, the
// heuristic's first eight algorithms, each run in place (D = C, as the backend runs them), with D
// apart, and on the legacy stream, with the status of each. It found (2026-11-26, H100 and H200,
// cuBLASLt 13.1.0) that every bf16/fp16/tf32/fp32 algorithm runs, and that cublasLtMatmul refuses
// every fp8 (e4m3 A and B, bf16 C and D, fp32 scales of 1) algorithm the heuristic offers with
// CUBLAS_STATUS_NOT_SUPPORTED (data/kernel-runs/2026-11-26/h200_141gb/probe.txt). The fp8 cases
// now run once per way of giving the scales (the B scale 4 bytes after A's, as then; one pointer
// for both; 16 bytes apart; no scale pointers; fast accumulation): on 2026-11-27 (H200) every way
// ran but the first, so cuBLASLt wants 16-byte-aligned scale pointers (data/kernel-runs/2026-11-27).
// Calls are unchecked on purpose: the statuses are what it prints.
// Build: nvcc -O2 -arch=sm_90 -I. tests/gpu/lt_probe.cu -o lt_probe -lcublasLt
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include "kernels/cuda/gemm_layout.hpp"
using tpsim::gpu::column_major_problem;

int main() {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  size_t ws_bytes = 32u << 20;
  void* ws;
  cudaMalloc(&ws, ws_bytes);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  struct Case {
    const char* name;
    cudaDataType_t ab, cd;
    cublasComputeType_t comp;
    int64_t m, n, k;
    bool ta, tb;
  };
  Case cases[] = {
      {"fp32 131x77x203 NN", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 131, 77, 203, false, false},
      {"fp32 128x64x256 NN", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 128, 64, 256, false, false},
      {"bf16 4096^3 NT", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 4096, 4096, 4096, false, true},
      {"bf16 16384x2304x768 NT", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 16384, 2304, 768, false, true},
      {"bf16 16384x768x3072 NN", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 16384, 768, 3072, false, false},
      {"bf16 768x3072x16384 TN", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 768, 3072, 16384, true, false},
      {"tf32 131x77x203 NN", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 131, 77, 203, false, false},
      {"tf32 1024^3 NT", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 1024, 1024, 1024, false, true},
      {"fp8 144x80x144 NT", CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 144, 80, 144, false, true},
      {"fp8 4096^3 NT", CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 4096, 4096, 4096, false, true},
  };
  float* sc = nullptr;
  {
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    cudaMalloc(&sc, sizeof ones);
    cudaMemcpy(sc, ones, sizeof ones, cudaMemcpyHostToDevice);
  }
  const char* scale_ways[] = {"scales 4 B apart", "one scale pointer", "scales 16 B apart", "no scale pointers",
                              "one scale pointer, fast accumulation"};
  for (const Case& c : cases)
    for (int way = 0; way < (c.ab == CUDA_R_8F_E4M3 ? 5 : 1); ++way) {
      auto p = column_major_problem(c.m, c.n, c.k, c.ta, c.tb);
      cublasLtMatmulDesc_t d;
      cublasLtMatmulDescCreate(&d, c.comp, CUDA_R_32F);
      cublasOperation_t oa = p.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                        ob = p.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa);
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob);
      if (c.ab == CUDA_R_8F_E4M3) {
        const float* as = sc;
        const float* bs = way == 0 ? sc + 1 : way == 2 ? sc + 4 : sc;
        if (way != 3) {
          cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &as, sizeof as);
          cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bs, sizeof bs);
        }
        if (way == 4) {
          const int8_t fast = 1;
          cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
        }
        printf("[%s]\n", scale_ways[way]);
      }
      cublasLtMatrixLayout_t la, lb, lc;
      cublasLtMatrixLayoutCreate(&la, c.ab, p.a.rows, p.a.cols, p.a.ld);
      cublasLtMatrixLayoutCreate(&lb, c.ab, p.b.rows, p.b.cols, p.b.ld);
      cublasLtMatrixLayoutCreate(&lc, c.cd, p.c.rows, p.c.cols, p.c.ld);
      size_t es = c.ab == CUDA_R_32F ? 4 : (c.ab == CUDA_R_8F_E4M3 ? 1 : 2), eo = c.cd == CUDA_R_32F ? 4 : 2;
      void *A, *B, *C, *D;
      cudaMalloc(&A, c.m * c.k * es);
      cudaMalloc(&B, c.k * c.n * es);
      cudaMalloc(&C, c.m * c.n * eo);
      cudaMalloc(&D, c.m * c.n * eo);
      cudaMemset(A, 0, c.m * c.k * es);
      cudaMemset(B, 0, c.k * c.n * es);
      cudaMemset(C, 0, c.m * c.n * eo);
      cudaDeviceSynchronize();
      for (uint64_t pref_ws : {(uint64_t)ws_bytes, (uint64_t)0}) {
        cublasLtMatmulPreference_t pr;
        cublasLtMatmulPreferenceCreate(&pr);
        cublasLtMatmulPreferenceSetAttribute(pr, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &pref_ws, sizeof pref_ws);
        cublasLtMatmulHeuristicResult_t r[8] = {};
        int found = 0;
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, pr, 8, r, &found);
        printf("%s pref_ws=%llu: heuristic %s, %d found\n", c.name, (unsigned long long)pref_ws,
               cublasLtGetStatusName(hs), found);
        const float alpha = 1, beta = 0;
        for (int i = 0; i < (c.ab == CUDA_R_8F_E4M3 ? (found < 3 ? found : 3) : found); ++i) {
          cublasStatus_t s1 =
              cublasLtMatmul(h, d, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &r[i].algo, ws, ws_bytes, st);
          cublasStatus_t s2 =
              cublasLtMatmul(h, d, &alpha, B, la, A, lb, &beta, C, lc, D, lc, &r[i].algo, ws, ws_bytes, st);
          cublasStatus_t s3 =
              cublasLtMatmul(h, d, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &r[i].algo, ws, ws_bytes, 0);
          cudaError_t e = cudaStreamSynchronize(st);
          printf("  algo %d state %s ws %zu waves %.2f: inplace %s, apart %s, legacy-stream %s, sync %s\n", i,
                 cublasLtGetStatusName(r[i].state), r[i].workspaceSize, r[i].wavesCount, cublasLtGetStatusName(s1),
                 cublasLtGetStatusName(s2), cublasLtGetStatusName(s3), cudaGetErrorName(e));
        }
        cublasLtMatmulPreferenceDestroy(pr);
      }
      cudaFree(A);
      cudaFree(B);
      cudaFree(C);
      cudaFree(D);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(d);
    }
  printf("cublasLt version %zu, cudart %d\n", cublasLtGetVersion(), CUDART_VERSION);
  return 0;
}
