// The CUDA backend (and, compiled by hipcc through kernels/hip/cuda_to_hip.hpp, the HIP backend):
// runs the ops of model/ops.hpp on one GPU, times them with events, and checks them against the
// plain reference kernels (kernels/reference.hpp).
//
// An op is run in three steps: plan (the tensors it needs: format, element count, how to fill
// them), prepare (allocate, fill with fresh random values, build the launch), launch (enqueue its
// kernels on the backend's stream). GEMMs go to cuBLASLt on CUDA and to gemm_tiled.cu on HIP;
// attention and memory-bound ops to this backend's own kernels (attention.cu, memory_bound.cu).
//
// Timing: warm-up runs, then timed runs, each preceded (TimingOptions::flush_cache) by a write of a
// buffer larger than L2 and bracketed by an event pair on the stream; kernels/timing.hpp decides
// how many runs and summarises them (median, p10, p90).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/gpu_backend.hpp"
#include "kernels/cuda/gpu_kernels.cuh"
#include "kernels/factory.hpp"
#include "kernels/reference.hpp"
#include "kernels/timing.hpp"

#if !defined(TPSIM_HIP)
#include "kernels/cuda/gemm_cublaslt.cuh"
#if defined(TPSIM_HAVE_CUDNN)
#include <cudnn.h>
#endif
#if defined(TPSIM_HAVE_NCCL)
#include "kernels/cuda/nccl_check.hpp"
#endif
#endif

namespace tpsim::TPSIM_GPU_NS {
namespace {

#if defined(TPSIM_HIP)
constexpr const char* kApi = "HIP";
#else
constexpr const char* kApi = "CUDA";
#endif

// In-place ops (cross-entropy backward, gradient clipping) scale by this: close to 1, so that the
// repeated timed runs on one buffer neither overflow nor underflow.
constexpr float kInPlaceScale = 0.999f;

// The largest tensor a check runs the reference on; bigger ops are checked on a smaller shape of
// the same kind, format, layout and row length (check_shape).
constexpr int64_t kCheckElements = int64_t{1} << 22;

std::string gib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", bytes / double(1ull << 30));
  return s;
}

// How a tensor starts: random values in [lo, hi), random ids in [0, id_rows), or nothing (outputs
// and workspaces, which the op writes before it reads).
enum class Init : uint8_t { kUniform, kIds, kNone };

struct TensorSpec {
  std::string name;
  Elem elem;
  int64_t count;
  Init init = Init::kNone;
  float lo = -1.0f, hi = 1.0f;
  int64_t id_rows = 0;
};

struct Tensor {
  TensorSpec spec;
  DeviceBuffer buf;
  template <class T>
  T* as() const {
    return static_cast<T*>(buf.get());
  }
};

// ---- what each op needs ----

std::optional<Elem> storage_of(DType d) {
  switch (d) {
    case DType::kBf16: return Elem::kBf16;
    case DType::kFp16: return Elem::kF16;
    case DType::kFp32: return Elem::kF32;
    case DType::kTf32:
    case DType::kFp8:
    case DType::kFp4: return std::nullopt;
  }
  return std::nullopt;
}

// GEMM storage: operands and output.
struct GemmElems {
  Elem ab, c;
};
GemmElems gemm_elems(DType d) {
  switch (d) {
    case DType::kFp8: return {Elem::kE4m3, Elem::kBf16};
    case DType::kBf16: return {Elem::kBf16, Elem::kBf16};
    case DType::kFp16: return {Elem::kF16, Elem::kF16};
    case DType::kTf32:
    case DType::kFp32: return {Elem::kF32, Elem::kF32};
    case DType::kFp4: break;  // refused before any buffer is planned (lt_dtype_unsupported, gemm_tiled)
  }
  return {Elem::kF32, Elem::kF32};
}

// fp8 GEMMs run in the one layout cuBLASLt takes for fp8 ("TN": y = x W^T); TransformerEngine's
// cast-transposes, separate ops, produce it for the other products.
bool gemm_trans_a(const Op& op) { return op.dtype == DType::kFp8 ? false : op.trans_a; }
bool gemm_trans_b(const Op& op) { return op.dtype == DType::kFp8 ? true : op.trans_b; }

// What a kCast op converts, read from its bytes per element: fp32 <-> bf16 (FSDP's casts around
// its collectives; a 2-byte target is taken as bf16), or an activation to fp8 e4m3 with its
// transpose (TransformerEngine's cast-transpose: about 2 bytes written per element).
enum class CastKind : uint8_t { kNone, kFp32ToBf16, kBf16ToFp32, kFp8CastTranspose };

CastKind cast_kind(const Op& op) {
  const double elements = double(op.m) * double(op.n);
  if (elements <= 0) return CastKind::kNone;
  const double in = op.bytes_read / elements, out = op.bytes_written / elements;
  auto near = [](double x, double want) { return std::fabs(x - want) < 1e-9 * want; };
  if (near(in, 4) && near(out, 2)) return CastKind::kFp32ToBf16;
  if (near(in, 2) && near(out, 4)) return CastKind::kBf16ToFp32;
  if ((op.dtype == DType::kBf16 || op.dtype == DType::kFp16 || op.dtype == DType::kFp32) && out >= 2.0 &&
      out < 2.0 + 1e-9 + 2.0 * in)
    return CastKind::kFp8CastTranspose;
  return CastKind::kNone;
}

std::string dims(const Op& op) {
  return "m=" + std::to_string(op.m) + " n=" + std::to_string(op.n) +
         (op.kind == OpKind::kGemm ? " k=" + std::to_string(op.k) : "");
}

// "" when this backend's kernels run the memory-bound op, else why not.
std::string membound_unsupported(const Op& op) {
  if (op.m < 1 || op.n < 1) return std::string(op.name) + ": empty shape " + dims(op);
  const bool act = storage_of(op.dtype).has_value();
  const std::string fmt(to_string(op.dtype));
  switch (op.mem) {
    case MemKind::kNone: return std::string(op.name) + ": a memory-bound op without a kernel kind";
    case MemKind::kRmsNorm:
    case MemKind::kRmsNormBackward:
    case MemKind::kSilu:
    case MemKind::kSiluBackward:
    case MemKind::kRelu:
    case MemKind::kReluBackward:
    case MemKind::kMul:
    case MemKind::kMulBackward:
    case MemKind::kRope:
    case MemKind::kRouter:
    case MemKind::kRouterBackward:
    case MemKind::kPermute:
    case MemKind::kUnpermute:
    case MemKind::kSoftmax:
    case MemKind::kSoftmaxBackward:
    case MemKind::kDropout:
    case MemKind::kDropoutBackward:
    case MemKind::kCausalConv1d:
    case MemKind::kCausalConv1dBackward:
    case MemKind::kSsdScan:
    case MemKind::kSsdScanBackward:
    case MemKind::kGatedRmsNorm:
    case MemKind::kGatedRmsNormBackward:
    case MemKind::kGatedDeltaRule:
    case MemKind::kGatedDeltaRuleBackward: return std::string(op.name) + ": the GPU backend has no kernel for it yet";
    case MemKind::kLayerNorm:
    case MemKind::kLayerNormBackward:
    case MemKind::kGelu:
    case MemKind::kGeluBackward:
    case MemKind::kAdd:
    case MemKind::kBiasGrad:
    case MemKind::kCrossEntropyBackward:
    case MemKind::kEmbedding:
      if (!act) return "activations in " + fmt + " are not implemented (bf16, fp16, fp32)";
      if ((op.m + 7) / 8 > 0x7fffffffll) return "more rows than one launch covers";
      if ((op.mem == MemKind::kEmbedding) && op.k < 1) return "embedding without table rows (k)";
      return "";
    case MemKind::kCrossEntropy:
      if (!act) return "activations in " + fmt + " are not implemented (bf16, fp16, fp32)";
      if (op.m > 0x7fffffffll) return "more rows than one launch covers";
      return "";
    case MemKind::kEmbeddingBackward:
      if (!act) return "activations in " + fmt + " are not implemented (bf16, fp16, fp32)";
      if (op.k < 1) return "embedding backward without table rows (k)";
      if ((op.k + 7) / 8 > 0x7fffffffll) return "more table rows than one launch covers";
      return "";
    case MemKind::kCast:
      switch (cast_kind(op)) {
        case CastKind::kNone:
          return "a cast reading " + std::to_string(op.bytes_read / (double(op.m) * double(op.n))) + " and writing " +
                 std::to_string(op.bytes_written / (double(op.m) * double(op.n))) +
                 " bytes per element matches none this backend runs (fp32<->bf16, activation->fp8)";
        case CastKind::kFp8CastTranspose:
          if ((op.m + 31) / 32 > 65535) return "more rows than one cast-transpose launch covers";
          return "";
        default: return "";
      }
    case MemKind::kGradNorm:
    case MemKind::kScale:
    case MemKind::kAdamW: return "";  // fp32 parameters, whatever the op's dtype says
  }
  return "unknown memory-bound kind";
}

std::string attention_unsupported(const Op& op) {
  if (!storage_of(op.dtype))
    return "attention in " + std::string(to_string(op.dtype)) + " is not implemented (bf16, fp16, fp32)";
  if (op.batch < 1 || op.heads < 1 || op.seq < 1 || op.head_dim < 1) return std::string(op.name) + ": empty shape";
  if (!attention_head_dim_supported(op.head_dim))
    return "attention head_dim " + std::to_string(op.head_dim) + " > 128 is not implemented";
  if (op.n != 0 && op.n != op.head_dim)  // latent attention's value heads (ops.hpp attention_op)
    return "attention with value heads of " + std::to_string(op.n) + " beside score heads of " +
           std::to_string(op.head_dim) + " is not implemented";
  if (op.batch * op.heads > 0x7fffffffll || (op.seq + 31) / 32 > 65535) return "attention shape exceeds one launch";
  return "";
}

// A smaller op of the same kind, format, layout and row length, whose reference runs in well under
// a second: GEMM dimensions at most 256 x 256 x 1024, attention one sequence of at most 2 heads and
// 256 positions, at most kCheckElements per tensor elsewhere.
Op check_shape(const Op& op) {
  Op c = op;
  switch (op.kind) {
    case OpKind::kGemm:
      c.m = std::min<int64_t>(op.m, 256);
      c.n = std::min<int64_t>(op.n, 256);
      c.k = std::min<int64_t>(op.k, 1024);
      break;
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd:
      c.batch = 1;
      c.heads = std::min<int64_t>(op.heads, 2);
      c.seq = std::min<int64_t>(op.seq, 256);
      break;
    case OpKind::kMemoryBound: {
      const int64_t rows = std::max<int64_t>(1, kCheckElements / std::max<int64_t>(op.n, 1));
      c.m = std::min(op.m, rows);
      if (op.mem == MemKind::kEmbedding || op.mem == MemKind::kEmbeddingBackward) c.k = std::min(op.k, rows);
      // Keep the cast's bytes per element (they say which cast it is).
      const double scale = (double(c.m) * double(c.n)) / (double(op.m) * double(op.n));
      c.bytes_read = op.bytes_read * scale;
      c.bytes_written = op.bytes_written * scale;
      break;
    }
  }
  return c;
}

// The tensors an op needs, collected in the order its launch uses them.
struct TensorPlan {
  std::vector<TensorSpec> t;
  // An input filled with uniform values in [lo, hi).
  void in(std::string name, Elem e, int64_t count, float lo = -1.0f, float hi = 1.0f) {
    t.push_back({std::move(name), e, count, Init::kUniform, lo, hi, 0});
  }
  // Row ids in [0, rows).
  void ids(std::string name, int64_t count, int64_t rows) {
    t.push_back({std::move(name), Elem::kI64, count, Init::kIds, 0, 0, rows});
  }
  // An output or workspace, written before it is read.
  void out(std::string name, Elem e, int64_t count) { t.push_back({std::move(name), e, count, Init::kNone, 0, 0, 0}); }
};

void plan_gemm_tensors(const Op& op, TensorPlan& t) {
  const GemmElems g = gemm_elems(op.dtype);
  t.in("a", g.ab, op.m * op.k);
  t.in("b", g.ab, op.k * op.n);
  t.out("c", g.c, op.m * op.n);
}

void plan_attention_tensors(const Op& op, TensorPlan& t) {
  const Elem e = *storage_of(op.dtype);
  const int64_t rows = op.batch * op.heads * op.seq, count = rows * op.head_dim;
  t.in("q", e, count, -2.0f, 2.0f);
  t.in("k", e, count, -2.0f, 2.0f);
  t.in("v", e, count);
  if (op.kind == OpKind::kAttentionFwd) {
    t.out("o", e, count);
    t.out("lse", Elem::kF32, rows);
    return;
  }
  t.out("o", e, count);  // from a forward run during preparation
  t.out("lse", Elem::kF32, rows);
  t.in("do", e, count);
  t.out("dq", e, count);
  t.out("dk", e, count);
  t.out("dv", e, count);
  t.out("delta", Elem::kF32, rows);
  t.out("dq_accum", Elem::kF32, count);
}

// A cast's tensors: which formats, cast_kind reads from its bytes per element.
void plan_cast_tensors(const Op& op, Elem e, TensorPlan& t) {
  const int64_t mn = op.m * op.n;
  switch (cast_kind(op)) {
    case CastKind::kFp32ToBf16:
      t.in("x", Elem::kF32, mn);
      t.out("y", Elem::kBf16, mn);
      break;
    case CastKind::kBf16ToFp32:
      t.in("x", Elem::kBf16, mn);
      t.out("y", Elem::kF32, mn);
      break;
    case CastKind::kFp8CastTranspose:
      t.in("x", e, mn, -4.0f, 4.0f);
      t.out("y", Elem::kE4m3, mn);
      t.out("yt", Elem::kE4m3, mn);
      t.out("amax", Elem::kF32, 1);
      break;
    case CastKind::kNone: break;
  }
}

void plan_membound_tensors(const Op& op, TensorPlan& t) {
  const int64_t mn = op.m * op.n;
  const Elem e = storage_of(op.dtype).value_or(Elem::kF32);
  switch (op.mem) {
    default: break;  // kNone and the kinds membound_unsupported() refuses
    case MemKind::kLayerNorm:
      t.in("x", e, mn, -2.0f, 2.0f);
      t.in("w", e, op.n, 0.5f, 1.5f);
      t.in("b", e, op.n, -0.5f, 0.5f);
      t.out("y", e, mn);
      t.out("mean", Elem::kF32, op.m);
      t.out("rstd", Elem::kF32, op.m);
      break;
    case MemKind::kLayerNormBackward:
      t.in("dy", e, mn);
      t.in("x", e, mn, -2.0f, 2.0f);
      t.in("w", e, op.n, 0.5f, 1.5f);
      t.out("mean", Elem::kF32, op.m);  // from a forward run during preparation
      t.out("rstd", Elem::kF32, op.m);
      t.out("dx", e, mn);
      t.out("dw", Elem::kF32, op.n);
      t.out("db", Elem::kF32, op.n);
      t.out("partials", Elem::kF32, column_partial_rows(op.m) * 2 * op.n);
      break;
    case MemKind::kGelu:
      t.in("x", e, mn, -3.0f, 3.0f);
      t.out("y", e, mn);
      break;
    case MemKind::kGeluBackward:
      t.in("dy", e, mn);
      t.in("x", e, mn, -3.0f, 3.0f);
      t.out("dx", e, mn);
      break;
    case MemKind::kAdd:
      t.in("a", e, mn);
      t.in("b", e, mn);
      t.out("y", e, mn);
      break;
    case MemKind::kBiasGrad:
      t.in("dy", e, mn);
      t.out("db", e, op.n);
      t.out("partials", Elem::kF32, column_partial_rows(op.m) * op.n);
      break;
    case MemKind::kCrossEntropy:
      t.in("logits", e, mn, -4.0f, 4.0f);
      t.ids("targets", op.m, op.n);
      t.out("loss", Elem::kF32, op.m);
      break;
    case MemKind::kCrossEntropyBackward: t.in("x", e, mn); break;
    case MemKind::kEmbedding:
      t.in("table", e, op.k * op.n);
      t.ids("ids", op.m, op.k);
      t.out("y", e, mn);
      break;
    case MemKind::kEmbeddingBackward:
      t.in("dy", e, mn);
      t.ids("ids", op.m, op.k);
      t.out("dtable", e, op.k * op.n);
      t.out("counts", Elem::kI64, op.k + 1);
      t.out("offsets", Elem::kI64, op.k + 1);
      t.out("order", Elem::kI64, op.m);
      break;
    case MemKind::kCast: plan_cast_tensors(op, e, t); break;
    case MemKind::kGradNorm:
      t.in("x", Elem::kF32, mn);
      t.out("partials", Elem::kF64, grad_norm_blocks());
      t.out("result", Elem::kF64, 1);
      break;
    case MemKind::kScale: t.in("x", Elem::kF32, mn); break;
    case MemKind::kAdamW:
      t.in("p", Elem::kF32, mn);
      t.in("g", Elem::kF32, mn);
      t.in("m", Elem::kF32, mn, -0.1f, 0.1f);
      t.in("v", Elem::kF32, mn, 0.0f, 0.01f);
      break;
  }
}

// The tensors an op needs, in the order its launch uses them.
std::vector<TensorSpec> plan_tensors(const Op& op) {
  TensorPlan t;
  switch (op.kind) {
    case OpKind::kGemm: plan_gemm_tensors(op, t); break;
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd: plan_attention_tensors(op, t); break;
    case OpKind::kMemoryBound: plan_membound_tensors(op, t); break;
  }
  return std::move(t.t);
}

double plan_bytes(const std::vector<TensorSpec>& specs) {
  double b = 0;
  for (const auto& s : specs) b += double(s.count) * double(elem_bytes(s.elem));
  return b;
}

// An op ready to run: its tensors on the device and the launch that enqueues its kernels.
struct Prepared {
  std::string unsupported;  // "" when it can run
  std::vector<Tensor> tensors;
  std::function<void(cudaStream_t)> launch;

  const Tensor& t(const char* name) const {
    for (const auto& x : tensors)
      if (x.spec.name == name) return x;
    throw Error(std::string("GPU backend: no tensor named ") + name);
  }
  void* p(const char* name) const { return t(name).buf.get(); }
};

// ---- host copies for the checks ----

std::vector<float> download(const Tensor& t) {
  const size_t n = static_cast<size_t>(t.spec.count);
  std::vector<float> out(n);
  switch (t.spec.elem) {
    case Elem::kF32: CUDA_CHECK(cudaMemcpy(out.data(), t.buf.get(), n * 4, cudaMemcpyDeviceToHost)); break;
    case Elem::kBf16:
    case Elem::kF16: {
      std::vector<uint16_t> raw(n);
      CUDA_CHECK(cudaMemcpy(raw.data(), t.buf.get(), n * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n; ++i)
        out[i] = t.spec.elem == Elem::kBf16 ? bf16_to_float(raw[i]) : half_bits_to_float(raw[i]);
      break;
    }
    case Elem::kE4m3: {
      std::vector<uint8_t> raw(n);
      CUDA_CHECK(cudaMemcpy(raw.data(), t.buf.get(), n, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n; ++i) out[i] = e4m3_to_float(raw[i]);
      break;
    }
    case Elem::kF64: {
      std::vector<double> raw(n);
      CUDA_CHECK(cudaMemcpy(raw.data(), t.buf.get(), n * 8, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(raw[i]);
      break;
    }
    case Elem::kI64: throw Error("GPU backend: ids are read with download_ids");
  }
  return out;
}

std::vector<int64_t> download_ids(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.spec.count));
  CUDA_CHECK(cudaMemcpy(out.data(), t.buf.get(), out.size() * 8, cudaMemcpyDeviceToHost));
  return out;
}

double download_f64(const Tensor& t) {
  double v = 0;
  CUDA_CHECK(cudaMemcpy(&v, t.buf.get(), 8, cudaMemcpyDeviceToHost));
  return v;
}

// ---- the backend ----

class GpuBackend final : public Backend, public GpuCopyProbe {
 public:
  explicit GpuBackend(int index);
  ~GpuBackend() override;

  BackendInfo info() const override;
  std::string unsupported(const Op& op) const override;
  Timing time_op(const Op& op, const TimingOptions& options) override;
  SequenceTiming time_sequence(std::span<const Op> ops, const TimingOptions& options) override;
  CheckResult check_op(const Op& op) override;
  Timing time_copy(double bytes, const TimingOptions& options) override;

 private:
  Prepared prepare(const Op& op);
  // Sets p.launch (or p.unsupported), running what the launch needs set up first (a forward run
  // whose outputs a backward reads) on the backend's stream.
  void build_launch(const Op& op, Prepared& p);
  void build_gemm_launch(const Op& op, Prepared& p);
  void build_attention_launch(const Op& op, Prepared& p);
  void build_membound_launch(const Op& op, Prepared& p);
  double free_bytes() const;
  // Seconds of one run of `launch` between two events, after an L2 flush when asked.
  double run_once(const std::function<void(cudaStream_t)>& launch, bool flush);
  Timing time_launch(const std::function<void(cudaStream_t)>& launch, const TimingOptions& options);
  double compare(const Op& op, const Prepared& p, const std::vector<std::pair<std::string, std::vector<float>>>& inputs,
                 const std::vector<std::vector<int64_t>>& ids);

  int device_ = 0;
  cudaDeviceProp prop_{};
  int cc_ = 0;  // compute capability, major * 10 + minor (CUDA)
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  DeviceBuffer flush_;
  uint32_t flush_value_ = 0;
  uint64_t seed_ = 0x7470'7369'6d00'0001ull;  // advanced per tensor: every run gets fresh inputs
#if !defined(TPSIM_HIP)
  cublasLtHandle_t lt_ = nullptr;
  DeviceBuffer lt_workspace_;
#endif
};

GpuBackend::GpuBackend(int index) : device_(index) {
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaGetDeviceProperties(&prop_, device_));
  cc_ = prop_.major * 10 + prop_.minor;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&start_));
  CUDA_CHECK(cudaEventCreate(&stop_));
  // Twice L2, at least 64 MiB; AMD runtimes may report no L2 size, and MI300X has a 256 MiB
  // Infinity Cache behind it, so 512 MiB there.
  const size_t l2 = prop_.l2CacheSize > 0 ? static_cast<size_t>(prop_.l2CacheSize) : 0;
  const size_t flush_bytes = l2 > 0 ? std::max<size_t>(2 * l2, size_t{64} << 20) : size_t{512} << 20;
  flush_ = DeviceBuffer(flush_bytes);
#if !defined(TPSIM_HIP)
  CUBLAS_CHECK(cublasLtCreate(&lt_));
  lt_workspace_ = DeviceBuffer(kLtWorkspaceBytes);
#endif
}

GpuBackend::~GpuBackend() {
  // Nothing to report from a destructor: an error here would hide the one unwinding the stack.
  if (stream_) (void)cudaStreamSynchronize(stream_);
#if !defined(TPSIM_HIP)
  if (lt_) (void)cublasLtDestroy(lt_);
#endif
  if (start_) (void)cudaEventDestroy(start_);
  if (stop_) (void)cudaEventDestroy(stop_);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

std::string version3(long long v, long long major_div) {
  // NVIDIA libraries encode major * major_div + minor * 100 + patch.
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / 100) + "." + std::to_string(v % 100);
}

BackendInfo GpuBackend::info() const {
  CUDA_CHECK(cudaSetDevice(device_));
  BackendInfo i;
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
#if defined(TPSIM_HIP)
  i.backend = "hip";
  i.device_name = std::string(prop_.name) + " (" + prop_.gcnArchName + ")";
  i.driver_version = "HIP driver " + std::to_string(driver) + ", runtime " + std::to_string(runtime);
  i.library_versions = "own kernels (GEMM: shared-memory tiled; no hipBLAS)";
#else
  i.backend = "cuda";
  i.device_name = std::string(prop_.name) + " (sm_" + std::to_string(cc_) + ")";
  i.driver_version = "CUDA driver " + std::to_string(driver / 1000) + "." + std::to_string((driver % 1000) / 10) +
                     ", runtime " + std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10);
  i.library_versions = "cuBLASLt " + version3(static_cast<long long>(cublasLtGetVersion()), 10000);
#if defined(TPSIM_HAVE_CUDNN)
  i.library_versions += ", cuDNN " + version3(static_cast<long long>(cudnnGetVersion()), 10000);
#endif
#if defined(TPSIM_HAVE_NCCL)
  int nccl = 0;
  NCCL_CHECK(ncclGetVersion(&nccl));
  i.library_versions += ", NCCL " + version3(nccl, 10000);
#endif
#endif
  i.compute_units = prop_.multiProcessorCount;
  i.memory_bytes = static_cast<double>(prop_.totalGlobalMem);
  return i;
}

std::string GpuBackend::unsupported(const Op& op) const {
  if (std::string why = unsupported_by_every_backend(op); !why.empty()) return why;
  switch (op.kind) {
    case OpKind::kGemm:
      if (op.m < 1 || op.n < 1 || op.k < 1) return std::string(op.name) + ": empty GEMM " + dims(op);
#if defined(TPSIM_HIP)
      if (op.dtype == DType::kFp4) return "fp4 GEMMs (NVFP4, MXFP4) are not run by this backend";
      if (op.dtype == DType::kFp8 || op.dtype == DType::kTf32)
        return std::string(to_string(op.dtype)) +
               " GEMMs need hipBLASLt, which this build lacks (Debian packages no hipBLAS); the HIP backend's own "
               "GEMM runs fp32, bf16 and fp16";
      if ((op.m + 63) / 64 > 65535) return "GEMM m = " + std::to_string(op.m) + " exceeds one launch";
      return "";
#else
      return lt_dtype_unsupported(op.dtype, cc_);
#endif
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd: return attention_unsupported(op);
    case OpKind::kMemoryBound: return membound_unsupported(op);
  }
  return "unknown op kind";
}

double GpuBackend::free_bytes() const {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<double>(free);
}

Prepared GpuBackend::prepare(const Op& op) {
  Prepared p;
  p.unsupported = unsupported(op);
  if (!p.unsupported.empty()) return p;
  const std::vector<TensorSpec> specs = plan_tensors(op);
  const double need = plan_bytes(specs), free = free_bytes();
  if (need > 0.9 * free) {
    p.unsupported = std::string(op.name) + " needs " + gib(need) + " of device memory; " + gib(free) + " is free";
    return p;
  }
  for (const auto& s : specs) {
    Tensor t{s, DeviceBuffer(static_cast<size_t>(s.count) * elem_bytes(s.elem))};
    seed_ = seed_ * 6364136223846793005ull + 1442695040888963407ull;
    if (s.init == Init::kUniform) fill_uniform(t.buf.get(), s.elem, s.count, seed_, s.lo, s.hi, stream_);
    if (s.init == Init::kIds) fill_ids(t.as<int64_t>(), s.count, s.id_rows, seed_, stream_);
    p.tensors.push_back(std::move(t));
  }
  build_launch(op, p);
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // inputs and set-up runs done
  return p;
}

void GpuBackend::build_launch(const Op& op, Prepared& p) {
  switch (op.kind) {
    case OpKind::kGemm: build_gemm_launch(op, p); return;
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd: build_attention_launch(op, p); return;
    case OpKind::kMemoryBound: build_membound_launch(op, p); return;
  }
}

void GpuBackend::build_gemm_launch(const Op& op, Prepared& p) {
  const int64_t m = op.m, n = op.n, k = op.k;
  void *a = p.p("a"), *b = p.p("b"), *c = p.p("c");
  const bool ta = gemm_trans_a(op), tb = gemm_trans_b(op);
#if defined(TPSIM_HIP)
  const Elem e = gemm_elems(op.dtype).ab;
  p.launch = [=](cudaStream_t s) { gemm_tiled(e, m, n, k, ta, tb, a, b, c, s); };
#else
  auto plan = std::make_shared<LtMatmul>(lt_, op.dtype, m, n, k, ta, tb);
  void* ws = lt_workspace_.get();
  plan->choose(a, b, c, ws, stream_);
  if (!plan->unsupported().empty()) {
    p.unsupported = plan->unsupported();
    return;
  }
  p.launch = [=](cudaStream_t s) { plan->run(a, b, c, ws, s); };
#endif
}

void GpuBackend::build_attention_launch(const Op& op, Prepared& p) {
  const Elem e = *storage_of(op.dtype);
  const int64_t B = op.batch, H = op.heads, S = op.seq, D = op.head_dim;
  void *q = p.p("q"), *k = p.p("k"), *v = p.p("v"), *o = p.p("o");
  auto* lse = static_cast<float*>(p.p("lse"));
  if (op.kind == OpKind::kAttentionFwd) {
    p.launch = [=](cudaStream_t s) { attention_forward(e, B, H, S, D, q, k, v, o, lse, s); };
    return;
  }
  attention_forward(e, B, H, S, D, q, k, v, o, lse, stream_);  // the o and lse backward reads
  void *d_o = p.p("do"), *dq = p.p("dq"), *dk = p.p("dk"), *dv = p.p("dv");
  auto* delta = static_cast<float*>(p.p("delta"));
  auto* dq_accum = static_cast<float*>(p.p("dq_accum"));
  p.launch = [=](cudaStream_t s) {
    attention_backward(e, B, H, S, D, q, k, v, o, d_o, lse, dq, dk, dv, delta, dq_accum, s);
  };
}

// A cast's launch: which conversion, cast_kind reads from its bytes per element.
void build_cast_launch(const Op& op, Elem e, Prepared& p) {
  const int64_t m = op.m, n = op.n, mn = op.m * op.n;
  void *x = p.p("x"), *y = p.p("y");
  switch (cast_kind(op)) {
    case CastKind::kFp32ToBf16:
      p.launch = [=](cudaStream_t s) { convert(Elem::kF32, x, Elem::kBf16, y, mn, s); };
      return;
    case CastKind::kBf16ToFp32:
      p.launch = [=](cudaStream_t s) { convert(Elem::kBf16, x, Elem::kF32, y, mn, s); };
      return;
    case CastKind::kFp8CastTranspose: {
      auto* yt = static_cast<e4m3*>(p.p("yt"));
      auto* amax = static_cast<uint32_t*>(p.p("amax"));
      p.launch = [=](cudaStream_t s) {
        CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(uint32_t), s));
        cast_transpose_e4m3(e, m, n, x, static_cast<e4m3*>(y), yt, amax, s);
      };
      return;
    }
    case CastKind::kNone: throw Error("GPU backend: unplanned cast");
  }
}

void GpuBackend::build_membound_launch(const Op& op, Prepared& p) {
  const int64_t m = op.m, n = op.n, mn = op.m * op.n;
  const Elem e = storage_of(op.dtype).value_or(Elem::kF32);
  switch (op.mem) {
    default: throw Error("GPU backend: no kernel for memory-bound op " + std::string(op.name));
    case MemKind::kLayerNorm: {
      void *x = p.p("x"), *w = p.p("w"), *b = p.p("b"), *y = p.p("y");
      auto *mean = static_cast<float*>(p.p("mean")), *rstd = static_cast<float*>(p.p("rstd"));
      p.launch = [=](cudaStream_t s) { layer_norm_forward(e, m, n, x, w, b, y, mean, rstd, s); };
      return;
    }
    case MemKind::kLayerNormBackward: {
      void *dy = p.p("dy"), *x = p.p("x"), *w = p.p("w"), *dx = p.p("dx");
      auto *mean = static_cast<float*>(p.p("mean")), *rstd = static_cast<float*>(p.p("rstd"));
      auto *dw = static_cast<float*>(p.p("dw")), *db = static_cast<float*>(p.p("db"));
      auto* partials = static_cast<float*>(p.p("partials"));
      // The statistics backward reads: a forward run over x (w doubles as the bias; dx as y).
      layer_norm_forward(e, m, n, x, w, w, dx, mean, rstd, stream_);
      p.launch = [=](cudaStream_t s) { layer_norm_backward(e, m, n, dy, x, w, mean, rstd, dx, dw, db, partials, s); };
      return;
    }
    case MemKind::kGelu: {
      void *x = p.p("x"), *y = p.p("y");
      p.launch = [=](cudaStream_t s) { gelu_forward(e, mn, x, y, s); };
      return;
    }
    case MemKind::kGeluBackward: {
      void *dy = p.p("dy"), *x = p.p("x"), *dx = p.p("dx");
      p.launch = [=](cudaStream_t s) { gelu_backward(e, mn, dy, x, dx, s); };
      return;
    }
    case MemKind::kAdd: {
      void *a = p.p("a"), *b = p.p("b"), *y = p.p("y");
      p.launch = [=](cudaStream_t s) { add(e, mn, a, b, y, s); };
      return;
    }
    case MemKind::kBiasGrad: {
      void *dy = p.p("dy"), *db = p.p("db");
      auto* partials = static_cast<float*>(p.p("partials"));
      p.launch = [=](cudaStream_t s) { bias_grad(e, m, n, dy, db, partials, s); };
      return;
    }
    case MemKind::kCrossEntropy: {
      void* logits = p.p("logits");
      auto* targets = static_cast<const int64_t*>(p.p("targets"));
      auto* loss = static_cast<float*>(p.p("loss"));
      p.launch = [=](cudaStream_t s) { cross_entropy(e, m, n, logits, targets, loss, s); };
      return;
    }
    case MemKind::kCrossEntropyBackward: {
      void* x = p.p("x");
      p.launch = [=](cudaStream_t s) { scale(e, mn, x, kInPlaceScale, s); };
      return;
    }
    case MemKind::kEmbedding: {
      void *table = p.p("table"), *y = p.p("y");
      auto* ids = static_cast<const int64_t*>(p.p("ids"));
      p.launch = [=](cudaStream_t s) { embedding_forward(e, m, n, table, ids, y, s); };
      return;
    }
    case MemKind::kEmbeddingBackward: {
      void *dy = p.p("dy"), *dtable = p.p("dtable");
      auto* ids = static_cast<const int64_t*>(p.p("ids"));
      auto *counts = static_cast<int64_t*>(p.p("counts")), *offsets = static_cast<int64_t*>(p.p("offsets"));
      auto* order = static_cast<int64_t*>(p.p("order"));
      const int64_t rows = op.k;
      p.launch = [=](cudaStream_t s) { embedding_backward(e, m, n, rows, dy, ids, dtable, counts, offsets, order, s); };
      return;
    }
    case MemKind::kCast: build_cast_launch(op, e, p); return;
    case MemKind::kGradNorm: {
      auto* x = static_cast<const float*>(p.p("x"));
      auto *partials = static_cast<double*>(p.p("partials")), *result = static_cast<double*>(p.p("result"));
      p.launch = [=](cudaStream_t s) { sum_of_squares(mn, x, partials, result, s); };
      return;
    }
    case MemKind::kScale: {
      void* x = p.p("x");
      p.launch = [=](cudaStream_t s) { scale(Elem::kF32, mn, x, kInPlaceScale, s); };
      return;
    }
    case MemKind::kAdamW: {
      auto *pp = static_cast<float*>(p.p("p")), *g = static_cast<float*>(p.p("g"));
      auto *mm = static_cast<float*>(p.p("m")), *vv = static_cast<float*>(p.p("v"));
      const AdamWParams r;
      const AdamW h{r.lr, r.beta1, r.beta2, r.eps, r.weight_decay, r.step};
      p.launch = [=](cudaStream_t s) { adamw(mn, pp, g, mm, vv, h, s); };
      return;
    }
  }
}

double GpuBackend::run_once(const std::function<void(cudaStream_t)>& launch, bool flush) {
  if (flush) flush_write(flush_.get(), flush_.bytes(), ++flush_value_, stream_);
  CUDA_CHECK(cudaEventRecord(start_, stream_));
  launch(stream_);
  CUDA_CHECK(cudaEventRecord(stop_, stream_));
  CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return static_cast<double>(ms) * 1e-3;
}

Timing GpuBackend::time_launch(const std::function<void(cudaStream_t)>& launch, const TimingOptions& options) {
  return summarize_timings(repeat_timed(options, [&] { return run_once(launch, options.flush_cache); }));
}

Timing GpuBackend::time_op(const Op& op, const TimingOptions& options) {
  validate(options);
  CUDA_CHECK(cudaSetDevice(device_));
  const Prepared p = prepare(op);
  if (!p.unsupported.empty()) {
    Timing t;
    t.supported = false;
    t.reason = p.unsupported;
    return t;
  }
  return time_launch(p.launch, options);
}

SequenceTiming GpuBackend::time_sequence(std::span<const Op> ops, const TimingOptions& options) {
  validate(options);
  CUDA_CHECK(cudaSetDevice(device_));
  SequenceTiming result;
  // Every op's buffers at once, as a step holds them; say so when they do not fit.
  double need = 0;
  for (const Op& op : ops) {
    const std::string why = unsupported(op);
    if (!why.empty()) {
      result.supported = false;
      result.reason = std::string(op.name) + ": " + why;
      return result;
    }
    need += plan_bytes(plan_tensors(op));
  }
  const double free = free_bytes();
  if (need > 0.9 * free) {
    result.supported = false;
    result.out_of_memory = true;
    result.reason = "the sequence's buffers need " + gib(need) + " of device memory; " + gib(free) + " is free";
    return result;
  }
  std::vector<Prepared> prepared;
  prepared.reserve(ops.size());
  for (const Op& op : ops) {
    prepared.push_back(prepare(op));
    if (!prepared.back().unsupported.empty()) {
      result.supported = false;
      result.reason = std::string(op.name) + ": " + prepared.back().unsupported;
      return result;
    }
  }
  const Timing whole = time_launch(
      [&](cudaStream_t s) {
        for (const auto& p : prepared) p.launch(s);
      },
      options);
  result.total_median_s = whole.median_s;
  for (const auto& p : prepared) result.per_op.push_back(time_launch(p.launch, options));
  return result;
}

Timing GpuBackend::time_copy(double bytes, const TimingOptions& options) {
  validate(options);
  CUDA_CHECK(cudaSetDevice(device_));
  if (!(bytes >= 16)) throw Error("copy bandwidth: " + std::to_string(bytes) + " bytes; at least 16");
  const size_t n = (static_cast<size_t>(bytes) + 15) / 16 * 16;
  if (2.0 * double(n) > 0.9 * free_bytes()) {
    Timing t;
    t.supported = false;
    t.reason = "a copy of " + gib(double(n)) + " needs twice that of device memory; " + gib(free_bytes()) + " is free";
    return t;
  }
  DeviceBuffer src(n), dst(n);
  fill_uniform(src.get(), Elem::kF32, static_cast<int64_t>(n / 4), ++seed_, -1.0f, 1.0f, stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  void *d = dst.get(), *s = src.get();
  return time_launch([=](cudaStream_t st) { copy_bytes(d, s, n, st); }, options);
}

// ---- checks ----

CheckResult GpuBackend::check_op(const Op& full) {
  CUDA_CHECK(cudaSetDevice(device_));
  CheckResult r;
  r.reason = unsupported(full);
  if (!r.reason.empty()) {
    r.supported = false;
    return r;
  }
  const Op op = check_shape(full);
  const Prepared p = prepare(op);
  if (!p.unsupported.empty()) {
    r.supported = false;
    r.reason = p.unsupported;
    return r;
  }
  // The inputs as the kernels see them (after the preparation's set-up runs), before the run:
  // several ops work in place.
  std::vector<std::pair<std::string, std::vector<float>>> inputs;
  std::vector<std::vector<int64_t>> ids;
  for (const auto& t : p.tensors) {
    if (t.spec.elem == Elem::kI64) {
      if (t.spec.init == Init::kIds) ids.push_back(download_ids(t));
      continue;
    }
    if (t.spec.init != Init::kNone || t.spec.name == "mean" || t.spec.name == "rstd" || t.spec.name == "o" ||
        t.spec.name == "lse")
      inputs.emplace_back(t.spec.name, download(t));
  }
  p.launch(stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  r.max_rel_error = compare(op, p, inputs, ids);
  return r;
}

// What a check compares: the inputs as the kernels saw them, the ids they read, the outputs on the
// device, and the largest relative error found so far.
struct Comparison {
  const Prepared& p;
  const std::vector<std::pair<std::string, std::vector<float>>>& inputs;
  const std::vector<std::vector<int64_t>>& ids;
  double err = 0;

  const std::vector<float>& in(const char* name) const {
    for (const auto& [n, v] : inputs)
      if (n == name) return v;
    throw Error(std::string("GPU check: no input named ") + name);
  }
  std::vector<float> out(const char* name) const { return download(p.t(name)); }
  void worst(const std::vector<float>& got, const std::vector<float>& want) {
    err = std::max(err, max_relative_error(got, want));
  }
};

std::vector<float> zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n)); }

double compare_gemm(const Op& op, Comparison& c) {
  auto out = zeros(op.m * op.n);
  gemm_reference(op.m, op.n, op.k, gemm_trans_a(op), gemm_trans_b(op), c.in("a"), c.in("b"), out);
  c.worst(c.out("c"), out);
  return c.err;
}

double compare_attention(const Op& op, Comparison& c) {
  if (op.kind == OpKind::kAttentionFwd) {
    const int64_t rows = op.batch * op.heads * op.seq;
    auto o = zeros(rows * op.head_dim), lse = zeros(rows);
    attention_forward_reference(op.batch, op.heads, op.seq, op.head_dim, c.in("q"), c.in("k"), c.in("v"), o, lse);
    c.worst(c.out("o"), o);
    c.worst(c.out("lse"), lse);
    return c.err;
  }
  const int64_t count = op.batch * op.heads * op.seq * op.head_dim;
  auto dq = zeros(count), dk = zeros(count), dv = zeros(count);
  attention_backward_reference(op.batch, op.heads, op.seq, op.head_dim, c.in("q"), c.in("k"), c.in("v"), c.in("do"), dq,
                               dk, dv);
  c.worst(c.out("dq"), dq);
  c.worst(c.out("dk"), dk);
  c.worst(c.out("dv"), dv);
  return c.err;
}

double compare_cast(const Op& op, Comparison& c) {
  const int64_t m = op.m, n = op.n, mn = op.m * op.n;
  switch (cast_kind(op)) {
    case CastKind::kFp32ToBf16: {
      std::vector<uint16_t> bits(static_cast<size_t>(mn));
      cast_fp32_to_bf16_reference(c.in("x"), bits);
      std::vector<float> y(bits.size());
      for (size_t i = 0; i < bits.size(); ++i) y[i] = bf16_to_float(bits[i]);
      c.worst(c.out("y"), y);
      return c.err;
    }
    case CastKind::kBf16ToFp32: {
      const auto& x = c.in("x");  // bf16 values, already widened exactly
      std::vector<uint16_t> bits(x.size());
      for (size_t i = 0; i < x.size(); ++i) bits[i] = float_to_bf16(x[i]);
      auto y = zeros(mn);
      cast_bf16_to_fp32_reference(bits, y);
      c.worst(c.out("y"), y);
      return c.err;
    }
    case CastKind::kFp8CastTranspose: {
      // No fp8 in the reference kernels: the expected values are the round-to-nearest-even,
      // saturating e4m3 encodings of the inputs (common.cuh), and the transpose of them.
      const auto& x = c.in("x");
      std::vector<float> y(x.size()), yt(x.size());
      float amax = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const float v = x[static_cast<size_t>(i * n + j)];
          const float q = e4m3_to_float(float_to_e4m3(v));
          y[static_cast<size_t>(i * n + j)] = q;
          yt[static_cast<size_t>(j * m + i)] = q;
          amax = std::max(amax, std::fabs(v));
        }
      c.worst(c.out("y"), y);
      c.worst(c.out("yt"), yt);
      uint32_t bits = 0;
      CUDA_CHECK(cudaMemcpy(&bits, c.p.p("amax"), 4, cudaMemcpyDeviceToHost));
      c.worst({bits_to_float(bits)}, {amax});
      return c.err;
    }
    case CastKind::kNone: break;
  }
  throw Error("GPU check: unplanned cast");
}

double compare_membound(const Op& op, Comparison& c) {
  const int64_t m = op.m, n = op.n, mn = op.m * op.n;
  switch (op.mem) {
    default: break;  // kNone and the kinds membound_unsupported() refuses
    case MemKind::kLayerNorm: {
      auto y = zeros(mn), mean = zeros(m), rstd = zeros(m);
      layer_norm_reference(m, n, c.in("x"), c.in("w"), c.in("b"), y, mean, rstd);
      c.worst(c.out("y"), y);
      c.worst(c.out("mean"), mean);
      c.worst(c.out("rstd"), rstd);
      return c.err;
    }
    case MemKind::kLayerNormBackward: {
      auto dx = zeros(mn), dw = zeros(n), db = zeros(n);
      layer_norm_backward_reference(m, n, c.in("dy"), c.in("x"), c.in("w"), c.in("mean"), c.in("rstd"), dx, dw, db);
      c.worst(c.out("dx"), dx);
      c.worst(c.out("dw"), dw);
      c.worst(c.out("db"), db);
      return c.err;
    }
    case MemKind::kGelu: {
      auto y = zeros(mn);
      gelu_reference(c.in("x"), y);
      c.worst(c.out("y"), y);
      return c.err;
    }
    case MemKind::kGeluBackward: {
      auto dx = zeros(mn);
      gelu_backward_reference(c.in("dy"), c.in("x"), dx);
      c.worst(c.out("dx"), dx);
      return c.err;
    }
    case MemKind::kAdd: {
      auto y = zeros(mn);
      add_reference(c.in("a"), c.in("b"), y);
      c.worst(c.out("y"), y);
      return c.err;
    }
    case MemKind::kBiasGrad: {
      auto db = zeros(n);
      bias_grad_reference(m, n, c.in("dy"), db);
      c.worst(c.out("db"), db);
      return c.err;
    }
    case MemKind::kCrossEntropy: {
      auto logits = c.in("logits");
      auto loss = zeros(m);
      cross_entropy_reference(m, n, logits, c.ids.at(0), loss);
      c.worst(c.out("logits"), logits);
      c.worst(c.out("loss"), loss);
      return c.err;
    }
    case MemKind::kCrossEntropyBackward:
    case MemKind::kScale: {
      auto x = c.in("x");
      scale_reference(x, kInPlaceScale);
      c.worst(c.out("x"), x);
      return c.err;
    }
    case MemKind::kEmbedding: {
      auto y = zeros(mn);
      embedding_reference(m, n, op.k, c.in("table"), c.ids.at(0), y);
      c.worst(c.out("y"), y);
      return c.err;
    }
    case MemKind::kEmbeddingBackward: {
      auto dtable = zeros(op.k * n);
      embedding_backward_reference(m, n, op.k, c.in("dy"), c.ids.at(0), dtable);
      c.worst(c.out("dtable"), dtable);
      return c.err;
    }
    case MemKind::kCast: return compare_cast(op, c);
    case MemKind::kGradNorm: {
      const double want = sum_of_squares_reference(c.in("x"));
      const double got = download_f64(c.p.t("result"));
      return std::fabs(got - want) / std::max(std::fabs(want), kErrorScaleFloor);
    }
    case MemKind::kAdamW: {
      auto pp = c.in("p"), mm = c.in("m"), vv = c.in("v");
      adamw_reference(pp, c.in("g"), mm, vv, AdamWParams{});
      c.worst(c.out("p"), pp);
      c.worst(c.out("m"), mm);
      c.worst(c.out("v"), vv);
      return c.err;
    }
  }
  throw Error("GPU check: unknown op kind");
}

double GpuBackend::compare(const Op& op, const Prepared& p,
                           const std::vector<std::pair<std::string, std::vector<float>>>& inputs,
                           const std::vector<std::vector<int64_t>>& ids) {
  Comparison c{p, inputs, ids};
  switch (op.kind) {
    case OpKind::kGemm: return compare_gemm(op, c);
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd: return compare_attention(op, c);
    case OpKind::kMemoryBound: return compare_membound(op, c);
  }
  throw Error("GPU check: unknown op kind");
}

}  // namespace
}  // namespace tpsim::TPSIM_GPU_NS

namespace tpsim {

#if defined(TPSIM_HIP)
std::unique_ptr<Backend> make_hip_backend(int index)
#else
std::unique_ptr<Backend> make_cuda_backend(int index)
#endif
{
  using namespace TPSIM_GPU_NS;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error of the failed query
    throw Error(std::string("no ") + kApi + " device: the device count query failed with " + cudaGetErrorName(status) +
                " (" + cudaGetErrorString(status) + ")");
  }
  if (count == 0) throw Error(std::string("no ") + kApi + " device: the runtime found none");
  if (index < 0 || index >= count)
    throw Error("--device-index " + std::to_string(index) + ": this machine has " + std::to_string(count) + " " + kApi +
                " device" + (count == 1 ? "" : "s") + " (0.." + std::to_string(count - 1) + ")");
  return std::make_unique<GpuBackend>(index);
}

}  // namespace tpsim
