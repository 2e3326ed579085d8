// How a row-major GEMM of model/ops.hpp maps onto cuBLASLt's column-major one. Plain C++ with no
// CUDA dependency, so that the mapping is tested on machines without a GPU
// (tests/test_kernels_gpu.cpp runs it through a host column-major GEMM).
//
// ops.hpp: C[m,n] = op(A)[m,k] * op(B)[k,n], all row-major; A is [m,k] (or [k,m] when trans_a),
// B is [k,n] (or [n,k] when trans_b). A row-major [r,c] matrix is the column-major [c,r] one with
// the same bytes, so C^T[n,m] = op(B)^T[n,k] * op(A)^T[k,m] in column-major terms: cuBLASLt's
// "A" is our B and its "B" is our A, its m is our n and its n is our m.
#pragma once

#include <cstdint>

namespace tpsim::gpu {

// One operand as cuBLASLt describes it: the stored column-major matrix (rows x cols, leading
// dimension ld) and whether the product reads it transposed (CUBLAS_OP_T).
struct LtOperand {
  int64_t rows = 0, cols = 0, ld = 0;
  bool transposed = false;
};

// D[m,n] = op(A)[m,k] * op(B)[k,n] in cuBLASLt's column-major terms.
struct LtProblem {
  int64_t m = 0, n = 0, k = 0;
  LtOperand a;  // our B
  LtOperand b;  // our A
  LtOperand c;  // our C: never transposed
};

inline LtProblem column_major_problem(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
  LtProblem p;
  p.m = n;
  p.n = m;
  p.k = k;
  // Our B, row-major [k,n] = column-major [n,k] (ld n), read as is: op(A_lt) = [n,k].
  // Transposed, it is row-major [n,k] = column-major [k,n] (ld k), read transposed.
  p.a = trans_b ? LtOperand{k, n, k, true} : LtOperand{n, k, n, false};
  // Our A, row-major [m,k] = column-major [k,m] (ld k): op(B_lt) = [k,m].
  // Transposed, it is row-major [k,m] = column-major [m,k] (ld m), read transposed.
  p.b = trans_a ? LtOperand{m, k, m, true} : LtOperand{k, m, k, false};
  p.c = LtOperand{n, m, n, false};
  return p;
}

}  // namespace tpsim::gpu
