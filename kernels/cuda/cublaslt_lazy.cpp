// The cuBLASLt entry points the CUDA backend calls, defined here to load libcublasLt on first use.
// Linking the library itself would load it at every start of tpsim, GPU or not, and it is the
// biggest library tpsim touches: about 90 ms of each start-up on this machine (all of tpsim's
// other libraries together take under 25 ms), which a sweep or a predict never needs. The
// declarations in cublasLt.h check each signature below: a mismatch does not compile.
#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

#include "io/error.hpp"

namespace {

// The library of the cuBLAS major version the headers are from.
const std::string kLibrary = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

void* lazy_symbol(const char* name) {
  static void* const library = dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    throw tpsim::Error("cuBLASLt: cannot load " + kLibrary + (why ? std::string(": ") + why : std::string()));
  }
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) throw tpsim::Error("cuBLASLt: " + kLibrary + " has no " + name);
  return symbol;
}

}  // namespace

// Defines `name` (parameters `params`) to call the library's `name` with `args`.
#define TPSIM_LAZY(ret, name, params, args)                                         \
  extern "C" ret name params {                                                      \
    static const auto real = reinterpret_cast<decltype(&name)>(lazy_symbol(#name)); \
    return real args;                                                               \
  }

TPSIM_LAZY(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle))
TPSIM_LAZY(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle), (handle))
TPSIM_LAZY(size_t, cublasLtGetVersion, (void), ())
TPSIM_LAZY(const char*, cublasLtGetStatusName, (cublasStatus_t status), (status))
TPSIM_LAZY(const char*, cublasLtGetStatusString, (cublasStatus_t status), (status))
TPSIM_LAZY(cublasStatus_t, cublasLtMatmulDescCreate,
           (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale), (desc, compute, scale))
TPSIM_LAZY(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
TPSIM_LAZY(cublasStatus_t, cublasLtMatmulDescSetAttribute,
           (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size),
           (desc, attr, buf, size))
TPSIM_LAZY(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
TPSIM_LAZY(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
TPSIM_LAZY(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
           (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf, size_t size),
           (pref, attr, buf, size))
TPSIM_LAZY(cublasStatus_t, cublasLtMatrixLayoutCreate,
           (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
           (layout, type, rows, cols, ld))
TPSIM_LAZY(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
TPSIM_LAZY(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
           (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
            cublasLtMatmulHeuristicResult_t results[], int* returned),
           (handle, op, a, b, c, d, pref, requested, results, returned))
TPSIM_LAZY(cublasStatus_t, cublasLtMatmul,
           (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* a,
            cublasLtMatrixLayout_t a_desc, const void* b, cublasLtMatrixLayout_t b_desc, const void* beta,
            const void* c, cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
            const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t stream),
           (handle, op, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc, algo, workspace, workspace_bytes,
            stream))
