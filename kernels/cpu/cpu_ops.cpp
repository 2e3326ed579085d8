#include "kernels/cpu/cpu_ops.hpp"

#include <algorithm>
#include <cmath>
#include <new>
#include <optional>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "io/error.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/reference.hpp"

namespace tpsim::cpu {
namespace {

// While make_cpu_op builds an op, the buffers allocated and not freed again: the op's own, which
// CpuOp::evict_operands drops from the caches.
thread_local std::vector<std::pair<const void*, size_t>>* recording = nullptr;

// Buffers start on a cache line (64 bytes, also the widest SIMD load), as GPU and BLAS buffers do.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) {
    T* p = static_cast<T*>(::operator new(n * sizeof(T), kAlign));
    if (recording) recording->emplace_back(p, n * sizeof(T));
    return p;
  }
  void deallocate(T* p, size_t) {
    if (recording) std::erase_if(*recording, [p](const std::pair<const void*, size_t>& b) { return b.first == p; });
    ::operator delete(p, kAlign);
  }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};
using Floats = std::vector<float, CacheLineAllocator<float>>;
using Ids = std::vector<int64_t, CacheLineAllocator<int64_t>>;
using Bf16s = std::vector<uint16_t, CacheLineAllocator<uint16_t>>;
using Bytes = std::vector<uint8_t, CacheLineAllocator<uint8_t>>;

size_t z(int64_t x) { return static_cast<size_t>(x); }

Floats uniform(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Floats x(z(n));
  fill_uniform(x.data(), n, lo, hi, seed);
  return x;
}

Ids indices(int64_t n, int64_t bound, uint64_t seed) {
  Ids x(z(n));
  fill_indices(x.data(), n, bound, seed);
  return x;
}

std::span<const float> in(const Floats& x) { return {x.data(), x.size()}; }
std::span<float> out(Floats& x) { return {x.data(), x.size()}; }

enum class CastDirection { kFp32ToBf16, kBf16ToFp32 };

// A cast op says its formats through its bytes per element (model/ops.cpp: FSDP casts the fp32
// shard to bf16 before a gather, and bf16 gradients to fp32 before a reduction).
std::optional<CastDirection> cast_direction(const Op& op) {
  const double elements = static_cast<double>(op.m) * static_cast<double>(op.n);
  if (!(elements > 0)) return std::nullopt;
  const double in_bytes = op.bytes_read / elements, out_bytes = op.bytes_written / elements;
  auto near = [](double a, double b) { return std::fabs(a - b) < 1e-6 * b; };
  if (near(in_bytes, 4.0) && near(out_bytes, 2.0)) return CastDirection::kFp32ToBf16;
  if (near(in_bytes, 2.0) && near(out_bytes, 4.0)) return CastDirection::kBf16ToFp32;
  return std::nullopt;
}

std::string name_of(const Op& op) { return op.name ? op.name : "(unnamed op)"; }

std::string dims(const Op& op) {
  return std::to_string(op.m) + " x " + std::to_string(op.n) + " x " + std::to_string(op.k);
}

void check_shape(const Op& op) {
  const std::string name = name_of(op);
  switch (op.kind) {
    case OpKind::kGemm:
      if (op.m < 1 || op.n < 1 || op.k < 1)
        throw Error("op " + name + ": GEMM m x n x k " + dims(op) + " must be positive");
      return;
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd:
      if (op.batch < 1 || op.heads < 1 || op.seq < 1 || op.head_dim < 1)
        throw Error("op " + name + ": attention batch, heads, seq, head_dim (" + std::to_string(op.batch) + ", " +
                    std::to_string(op.heads) + ", " + std::to_string(op.seq) + ", " + std::to_string(op.head_dim) +
                    ") must be positive");
      if (op.n != 0 && op.n != op.head_dim)  // latent attention's value heads (ops.hpp attention_op)
        throw Error("op " + name + ": attention with value heads of " + std::to_string(op.n) +
                    " beside score heads of " + std::to_string(op.head_dim) + " is not run by the CPU backend yet");
      return;
    case OpKind::kMemoryBound:
      if (op.m < 1 || op.n < 1)
        throw Error("op " + name + ": memory-bound m x n " + std::to_string(op.m) + " x " + std::to_string(op.n) +
                    " must be positive");
      if ((op.mem == MemKind::kEmbedding || op.mem == MemKind::kEmbeddingBackward) && op.k < 1)
        throw Error("op " + name + ": an embedding needs its table rows in k (got " + std::to_string(op.k) + ")");
      if (op.mem == MemKind::kRope && (op.k < 2 || op.k % 2 != 0 || op.n % op.k != 0))
        throw Error("op " + name + ": RoPE needs an even head_dim in k that divides n " + std::to_string(op.n) +
                    " (got " + std::to_string(op.k) + ")");
      if ((op.mem == MemKind::kRouter || op.mem == MemKind::kRouterBackward) && (op.k < 1 || op.k > op.n))
        throw Error("op " + name + ": a router needs its top k in [1, n experts " + std::to_string(op.n) + "] (got " +
                    std::to_string(op.k) + ")");
      if ((op.mem == MemKind::kPermute || op.mem == MemKind::kUnpermute) && op.k < 1)
        throw Error("op " + name + ": a permutation needs its choices per token in k (got " + std::to_string(op.k) +
                    ")");
      if ((op.mem == MemKind::kDropout || op.mem == MemKind::kDropoutBackward) &&
          (op.k < 0 || op.k > kDropoutPermilleMax))
        throw Error("op " + name + ": dropout needs its probability in k, per mille in [0, " +
                    std::to_string(kDropoutPermilleMax) + "] (got " + std::to_string(op.k) + ")");
      return;
  }
}

// ---- GEMM and attention ---------------------------------------------------------------------

class GemmOp final : public CpuOp {
 public:
  GemmOp(const Op& op, uint64_t seed)
      : op_(op),
        a_(uniform(op.m * op.k, seed)),
        b_(uniform(op.k * op.n, seed + 1)),
        c_(uniform(op.m * op.n, seed + 2)) {}
  void run() override { gemm_eigen(op_.m, op_.n, op_.k, op_.trans_a, op_.trans_b, a_.data(), b_.data(), c_.data()); }
  double check() override {
    run();
    Floats want(c_.size());
    gemm_reference(op_.m, op_.n, op_.k, op_.trans_a, op_.trans_b, in(a_), in(b_), out(want));
    return max_relative_error(in(c_), in(want));
  }

 private:
  Op op_;
  Floats a_, b_, c_;
};

// q and k in [-2, 2): scaled scores spread with a standard deviation near 1.3 whatever the head
// size, so the softmax is neither flat nor one-hot.
class AttentionForwardOp final : public CpuOp {
 public:
  AttentionForwardOp(const Op& op, uint64_t seed)
      : op_(op),
        q_(uniform(elements(), seed, -2, 2)),
        k_(uniform(elements(), seed + 1, -2, 2)),
        v_(uniform(elements(), seed + 2)),
        o_(uniform(elements(), seed + 3)),
        lse_(uniform(op.batch * op.heads * op.seq, seed + 4)) {}
  void run() override {
    attention_forward_cpu(op_.batch, op_.heads, op_.seq, op_.head_dim, q_.data(), k_.data(), v_.data(), o_.data(),
                          lse_.data());
  }
  double check() override {
    run();
    Floats o(o_.size()), lse(lse_.size());
    attention_forward_reference(op_.batch, op_.heads, op_.seq, op_.head_dim, in(q_), in(k_), in(v_), out(o), out(lse));
    return std::max(max_relative_error(in(o_), in(o)), max_relative_error(in(lse_), in(lse)));
  }

 private:
  int64_t elements() const { return op_.batch * op_.heads * op_.seq * op_.head_dim; }
  Op op_;
  Floats q_, k_, v_, o_, lse_;
};

// The forward's o and lse are inputs of the backward: computed once here, as training keeps them.
class AttentionBackwardOp final : public CpuOp {
 public:
  AttentionBackwardOp(const Op& op, uint64_t seed)
      : op_(op),
        q_(uniform(elements(), seed, -2, 2)),
        k_(uniform(elements(), seed + 1, -2, 2)),
        v_(uniform(elements(), seed + 2)),
        do_(uniform(elements(), seed + 3)),
        o_(uniform(elements(), seed + 4)),
        lse_(uniform(op.batch * op.heads * op.seq, seed + 5)),
        dq_(uniform(elements(), seed + 6)),
        dk_(uniform(elements(), seed + 7)),
        dv_(uniform(elements(), seed + 8)) {
    attention_forward_cpu(op_.batch, op_.heads, op_.seq, op_.head_dim, q_.data(), k_.data(), v_.data(), o_.data(),
                          lse_.data());
  }
  void run() override {
    attention_backward_cpu(op_.batch, op_.heads, op_.seq, op_.head_dim, q_.data(), k_.data(), v_.data(), o_.data(),
                           lse_.data(), do_.data(), dq_.data(), dk_.data(), dv_.data());
  }
  double check() override {
    run();
    Floats dq(dq_.size()), dk(dk_.size()), dv(dv_.size());
    attention_backward_reference(op_.batch, op_.heads, op_.seq, op_.head_dim, in(q_), in(k_), in(v_), in(do_), out(dq),
                                 out(dk), out(dv));
    return std::max({max_relative_error(in(dq_), in(dq)), max_relative_error(in(dk_), in(dk)),
                     max_relative_error(in(dv_), in(dv))});
  }

 private:
  int64_t elements() const { return op_.batch * op_.heads * op_.seq * op_.head_dim; }
  Op op_;
  Floats q_, k_, v_, do_, o_, lse_, dq_, dk_, dv_;
};

// ---- memory-bound kernels -------------------------------------------------------------------

class LayerNormOp final : public CpuOp {
 public:
  LayerNormOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        x_(uniform(m_ * n_, seed, -1, 3)),  // rows off zero mean, as residual streams are
        w_(uniform(n_, seed + 1, 0.5f, 1.5f)),
        b_(uniform(n_, seed + 2, -0.5f, 0.5f)),
        y_(uniform(m_ * n_, seed + 3)),
        mean_(uniform(m_, seed + 4)),
        rstd_(uniform(m_, seed + 5)) {}
  void run() override {
    layer_norm_cpu(m_, n_, x_.data(), w_.data(), b_.data(), y_.data(), mean_.data(), rstd_.data());
  }
  double check() override {
    run();
    Floats y(y_.size()), mean(mean_.size()), rstd(rstd_.size());
    layer_norm_reference(m_, n_, in(x_), in(w_), in(b_), out(y), out(mean), out(rstd));
    return std::max({max_relative_error(in(y_), in(y)), max_relative_error(in(mean_), in(mean)),
                     max_relative_error(in(rstd_), in(rstd))});
  }

 private:
  int64_t m_, n_;
  Floats x_, w_, b_, y_, mean_, rstd_;
};

class LayerNormBackwardOp final : public CpuOp {
 public:
  LayerNormBackwardOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        dy_(uniform(m_ * n_, seed)),
        x_(uniform(m_ * n_, seed + 1, -1, 3)),
        w_(uniform(n_, seed + 2, 0.5f, 1.5f)),
        mean_(z(m_)),
        rstd_(z(m_)),
        dx_(uniform(m_ * n_, seed + 3)),
        dw_(uniform(n_, seed + 4)),
        db_(uniform(n_, seed + 5)) {
    // The statistics the forward saved: computed from x, with the output written into dx's buffer
    // before dx gets its own random values back.
    const Floats bias = uniform(n_, seed + 6);
    layer_norm_cpu(m_, n_, x_.data(), w_.data(), bias.data(), dx_.data(), mean_.data(), rstd_.data());
    fill_uniform(dx_.data(), m_ * n_, -1, 1, seed + 3);
  }
  void run() override {
    layer_norm_backward_cpu(m_, n_, dy_.data(), x_.data(), w_.data(), mean_.data(), rstd_.data(), dx_.data(),
                            dw_.data(), db_.data());
  }
  double check() override {
    run();
    Floats dx(dx_.size()), dw(dw_.size()), db(db_.size());
    layer_norm_backward_reference(m_, n_, in(dy_), in(x_), in(w_), in(mean_), in(rstd_), out(dx), out(dw), out(db));
    return std::max({max_relative_error(in(dx_), in(dx)), max_relative_error(in(dw_), in(dw)),
                     max_relative_error(in(db_), in(db))});
  }

 private:
  int64_t m_, n_;
  Floats dy_, x_, w_, mean_, rstd_, dx_, dw_, db_;
};

// x in [-4, 4): both tails of the tanh and the curved middle.
class GeluOp final : public CpuOp {
 public:
  GeluOp(const Op& op, uint64_t seed) : e_(op.m * op.n), x_(uniform(e_, seed, -4, 4)), y_(uniform(e_, seed + 1)) {}
  void run() override { gelu_cpu(e_, x_.data(), y_.data()); }
  double check() override {
    run();
    Floats y(y_.size());
    gelu_reference(in(x_), out(y));
    return max_relative_error(in(y_), in(y));
  }

 private:
  int64_t e_;
  Floats x_, y_;
};

class GeluBackwardOp final : public CpuOp {
 public:
  GeluBackwardOp(const Op& op, uint64_t seed)
      : e_(op.m * op.n), dy_(uniform(e_, seed)), x_(uniform(e_, seed + 1, -4, 4)), dx_(uniform(e_, seed + 2)) {}
  void run() override { gelu_backward_cpu(e_, dy_.data(), x_.data(), dx_.data()); }
  double check() override {
    run();
    Floats dx(dx_.size());
    gelu_backward_reference(in(dy_), in(x_), out(dx));
    return max_relative_error(in(dx_), in(dx));
  }

 private:
  int64_t e_;
  Floats dy_, x_, dx_;
};

class AddOp final : public CpuOp {
 public:
  AddOp(const Op& op, uint64_t seed)
      : e_(op.m * op.n), a_(uniform(e_, seed)), b_(uniform(e_, seed + 1)), y_(uniform(e_, seed + 2)) {}
  void run() override { add_cpu(e_, a_.data(), b_.data(), y_.data()); }
  double check() override {
    run();
    Floats y(y_.size());
    add_reference(in(a_), in(b_), out(y));
    return max_relative_error(in(y_), in(y));
  }

 private:
  int64_t e_;
  Floats a_, b_, y_;
};

class BiasGradOp final : public CpuOp {
 public:
  BiasGradOp(const Op& op, uint64_t seed)
      : m_(op.m), n_(op.n), dy_(uniform(m_ * n_, seed)), db_(uniform(n_, seed + 1)) {}
  void run() override { bias_grad_cpu(m_, n_, dy_.data(), db_.data()); }
  double check() override {
    run();
    Floats db(db_.size());
    bias_grad_reference(m_, n_, in(dy_), out(db));
    return max_relative_error(in(db_), in(db));
  }

 private:
  int64_t m_, n_;
  Floats dy_, db_;
};

// In place: the logits become the gradient softmax - one_hot, which the next run takes as logits.
class CrossEntropyOp final : public CpuOp {
 public:
  CrossEntropyOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        logits_(uniform(m_ * n_, seed, -4, 4)),
        targets_(indices(m_, n_, seed + 1)),
        loss_(uniform(m_, seed + 2)) {}
  void run() override { cross_entropy_cpu(m_, n_, logits_.data(), targets_.data(), loss_.data()); }
  double check() override {
    Floats logits = logits_, loss(loss_.size());
    run();
    cross_entropy_reference(m_, n_, out(logits), targets_, out(loss));
    return std::max(max_relative_error(in(logits_), in(logits)), max_relative_error(in(loss_), in(loss)));
  }

 private:
  int64_t m_, n_;
  Floats logits_;
  Ids targets_;
  Floats loss_;
};

// x *= c in place (gradient clipping; the cross-entropy backward's dL). c alternates between 0.75
// and 4/3 so that repeated runs neither decay into denormals nor grow.
class ScaleOp final : public CpuOp {
 public:
  ScaleOp(const Op& op, uint64_t seed) : e_(op.m * op.n), x_(uniform(e_, seed)) {}
  void run() override {
    scale_cpu(e_, x_.data(), c_);
    c_ = 1.0f / c_;
  }
  double check() override {
    Floats x = x_;
    const float c = c_;
    run();
    scale_reference(out(x), c);
    return max_relative_error(in(x_), in(x));
  }

 private:
  int64_t e_;
  Floats x_;
  float c_ = 0.75f;
};

class EmbeddingOp final : public CpuOp {
 public:
  EmbeddingOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        rows_(op.k),
        table_(uniform(rows_ * n_, seed)),
        ids_(indices(m_, rows_, seed + 1)),
        y_(uniform(m_ * n_, seed + 2)) {}
  void run() override { embedding_cpu(m_, n_, table_.data(), ids_.data(), y_.data()); }
  double check() override {
    run();
    Floats y(y_.size());
    embedding_reference(m_, n_, rows_, in(table_), ids_, out(y));
    return max_relative_error(in(y_), in(y));
  }

 private:
  int64_t m_, n_, rows_;
  Floats table_;
  Ids ids_;
  Floats y_;
};

class EmbeddingBackwardOp final : public CpuOp {
 public:
  EmbeddingBackwardOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        rows_(op.k),
        dy_(uniform(m_ * n_, seed)),
        ids_(indices(m_, rows_, seed + 1)),
        dtable_(uniform(rows_ * n_, seed + 2)) {}
  void run() override { embedding_backward_cpu(m_, n_, rows_, dy_.data(), ids_.data(), dtable_.data()); }
  double check() override {
    run();
    Floats dtable(dtable_.size());
    embedding_backward_reference(m_, n_, rows_, in(dy_), ids_, out(dtable));
    return max_relative_error(in(dtable_), in(dtable));
  }

 private:
  int64_t m_, n_, rows_;
  Floats dy_;
  Ids ids_;
  Floats dtable_;
};

Floats widen(const Bf16s& x) {
  Floats y(x.size());
  cast_bf16_to_fp32_reference(x, out(y));
  return y;
}

class CastOp final : public CpuOp {
 public:
  CastOp(const Op& op, uint64_t seed, CastDirection direction)
      : direction_(direction), e_(op.m * op.n), f32_(uniform(e_, seed)), bf16_(z(e_)) {
    // Random bf16 values: random fp32 rounded.
    const Floats source = uniform(e_, seed + 1);
    cast_fp32_to_bf16_cpu(e_, source.data(), bf16_.data());
  }
  void run() override {
    if (direction_ == CastDirection::kFp32ToBf16) cast_fp32_to_bf16_cpu(e_, f32_.data(), bf16_.data());
    else cast_bf16_to_fp32_cpu(e_, bf16_.data(), f32_.data());
  }
  double check() override {
    run();
    if (direction_ == CastDirection::kFp32ToBf16) {
      Bf16s want(bf16_.size());
      cast_fp32_to_bf16_reference(in(f32_), want);
      return max_relative_error(in(widen(bf16_)), in(widen(want)));
    }
    Floats want(f32_.size());
    cast_bf16_to_fp32_reference(bf16_, out(want));
    return max_relative_error(in(f32_), in(want));
  }

 private:
  CastDirection direction_;
  int64_t e_;
  Floats f32_;
  Bf16s bf16_;
};

class GradNormOp final : public CpuOp {
 public:
  GradNormOp(const Op& op, uint64_t seed) : e_(op.m * op.n), x_(uniform(e_, seed)) {}
  void run() override { sum_of_squares_ = sum_of_squares_cpu(e_, x_.data()); }
  double check() override {
    run();
    const double want = sum_of_squares_reference(in(x_));
    return std::fabs(sum_of_squares_ - want) / std::max(std::fabs(want), kErrorScaleFloor);
  }

 private:
  int64_t e_;
  Floats x_;
  double sum_of_squares_ = 0;  // the result, kept so the reduction is not optimised away
};

// v (the second moment) is non-negative. The learning rate is large enough that the update shows
// clearly in p next to p's own rounding, so the check sees the update, not just p.
class AdamWOp final : public CpuOp {
 public:
  AdamWOp(const Op& op, uint64_t seed)
      : e_(op.m * op.n),
        p_(uniform(e_, seed)),
        g_(uniform(e_, seed + 1)),
        m_(uniform(e_, seed + 2, -0.1f, 0.1f)),
        v_(uniform(e_, seed + 3, 1e-4f, 1e-2f)) {
    h_.lr = 1e-2f;
  }
  void run() override { adamw_cpu(e_, p_.data(), g_.data(), m_.data(), v_.data(), h_); }
  double check() override {
    Floats p = p_, m = m_, v = v_;
    const Floats p0 = p_;
    run();
    adamw_reference(out(p), in(g_), out(m), out(v), h_);
    Floats step_fast(p.size()), step_ref(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      step_fast[i] = p_[i] - p0[i];
      step_ref[i] = p[i] - p0[i];
    }
    return std::max({max_relative_error(in(p_), in(p)), max_relative_error(in(step_fast), in(step_ref)),
                     max_relative_error(in(m_), in(m)), max_relative_error(in(v_), in(v))});
  }

 private:
  int64_t e_;
  Floats p_, g_, m_, v_;
  AdamWParams h_;
};

// ---- Llama-family and mixture-of-experts kernels ---------------------------------------------

class RmsNormOp final : public CpuOp {
 public:
  RmsNormOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        x_(uniform(m_ * n_, seed, -1, 3)),  // rows off zero mean, as residual streams are
        w_(uniform(n_, seed + 1, 0.5f, 1.5f)),
        y_(uniform(m_ * n_, seed + 2)),
        rstd_(uniform(m_, seed + 3)) {}
  void run() override { rms_norm_cpu(m_, n_, x_.data(), w_.data(), y_.data(), rstd_.data()); }
  double check() override {
    run();
    Floats y(y_.size()), rstd(rstd_.size());
    rms_norm_reference(m_, n_, in(x_), in(w_), out(y), out(rstd));
    return std::max(max_relative_error(in(y_), in(y)), max_relative_error(in(rstd_), in(rstd)));
  }

 private:
  int64_t m_, n_;
  Floats x_, w_, y_, rstd_;
};

class RmsNormBackwardOp final : public CpuOp {
 public:
  RmsNormBackwardOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        dy_(uniform(m_ * n_, seed)),
        x_(uniform(m_ * n_, seed + 1, -1, 3)),
        w_(uniform(n_, seed + 2, 0.5f, 1.5f)),
        rstd_(z(m_)),
        dx_(uniform(m_ * n_, seed + 3)),
        dw_(uniform(n_, seed + 4)) {
    // The rstd the forward saved, computed from x (the output lands in dx's buffer, refilled after).
    rms_norm_cpu(m_, n_, x_.data(), w_.data(), dx_.data(), rstd_.data());
    fill_uniform(dx_.data(), m_ * n_, -1, 1, seed + 3);
  }
  void run() override {
    rms_norm_backward_cpu(m_, n_, dy_.data(), x_.data(), w_.data(), rstd_.data(), dx_.data(), dw_.data());
  }
  double check() override {
    run();
    Floats dx(dx_.size()), dw(dw_.size());
    rms_norm_backward_reference(m_, n_, in(dy_), in(x_), in(w_), in(rstd_), out(dx), out(dw));
    return std::max(max_relative_error(in(dx_), in(dx)), max_relative_error(in(dw_), in(dw)));
  }

 private:
  int64_t m_, n_;
  Floats dy_, x_, w_, rstd_, dx_, dw_;
};

// One input, one output, elementwise: SiLU and ReLU. x in [-6, 6): both tails of the sigmoid and
// both sides of ReLU's kink (the grid never hits 0 exactly).
class UnaryOp final : public CpuOp {
 public:
  using Kernel = void (*)(int64_t, const float*, float*);
  using Reference = void (*)(std::span<const float>, std::span<float>);
  UnaryOp(const Op& op, uint64_t seed, Kernel kernel, Reference reference)
      : kernel_(kernel),
        reference_(reference),
        e_(op.m * op.n),
        x_(uniform(e_, seed, -6, 6)),
        y_(uniform(e_, seed + 1)) {}
  void run() override { kernel_(e_, x_.data(), y_.data()); }
  double check() override {
    run();
    Floats y(y_.size());
    reference_(in(x_), out(y));
    return max_relative_error(in(y_), in(y));
  }

 private:
  Kernel kernel_;
  Reference reference_;
  int64_t e_;
  Floats x_, y_;
};

// dx = dy * f'(x): SiLU's and ReLU's backward.
class UnaryBackwardOp final : public CpuOp {
 public:
  using Kernel = void (*)(int64_t, const float*, const float*, float*);
  using Reference = void (*)(std::span<const float>, std::span<const float>, std::span<float>);
  UnaryBackwardOp(const Op& op, uint64_t seed, Kernel kernel, Reference reference)
      : kernel_(kernel),
        reference_(reference),
        e_(op.m * op.n),
        dy_(uniform(e_, seed)),
        x_(uniform(e_, seed + 1, -6, 6)),
        dx_(uniform(e_, seed + 2)) {}
  void run() override { kernel_(e_, dy_.data(), x_.data(), dx_.data()); }
  double check() override {
    run();
    Floats dx(dx_.size());
    reference_(in(dy_), in(x_), out(dx));
    return max_relative_error(in(dx_), in(dx));
  }

 private:
  Kernel kernel_;
  Reference reference_;
  int64_t e_;
  Floats dy_, x_, dx_;
};

class MulOp final : public CpuOp {
 public:
  MulOp(const Op& op, uint64_t seed)
      : e_(op.m * op.n), a_(uniform(e_, seed)), b_(uniform(e_, seed + 1)), y_(uniform(e_, seed + 2)) {}
  void run() override { mul_cpu(e_, a_.data(), b_.data(), y_.data()); }
  double check() override {
    run();
    Floats y(y_.size());
    mul_reference(in(a_), in(b_), out(y));
    return max_relative_error(in(y_), in(y));
  }

 private:
  int64_t e_;
  Floats a_, b_, y_;
};

class MulBackwardOp final : public CpuOp {
 public:
  MulBackwardOp(const Op& op, uint64_t seed)
      : e_(op.m * op.n),
        dy_(uniform(e_, seed)),
        a_(uniform(e_, seed + 1)),
        b_(uniform(e_, seed + 2)),
        da_(uniform(e_, seed + 3)),
        db_(uniform(e_, seed + 4)) {}
  void run() override { mul_backward_cpu(e_, dy_.data(), a_.data(), b_.data(), da_.data(), db_.data()); }
  double check() override {
    run();
    Floats da(da_.size()), db(db_.size());
    mul_backward_reference(in(dy_), in(a_), in(b_), out(da), out(db));
    return std::max(max_relative_error(in(da_), in(da)), max_relative_error(in(db_), in(db)));
  }

 private:
  int64_t e_;
  Floats dy_, a_, b_, da_, db_;
};

// In place on q and k together (n = q_dim + kv_dim, k = head_dim). Row i is at position i (one
// sequence of m tokens) with Llama 3's rope_theta 500000: angle = i * theta^(-2j / head_dim).
// Runs alternate between the forward rotation and the backward's inverse; rotations keep the
// values' norms, so repeated runs neither grow nor decay.
class RopeOp final : public CpuOp {
 public:
  RopeOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        head_dim_(op.k),
        x_(uniform(m_ * n_, seed)),
        cos_(z(m_ * head_dim_ / 2)),
        sin_(cos_.size()) {
    constexpr double kRopeTheta = 500000.0;  // Llama 3's config.json
    const int64_t half = head_dim_ / 2;
    for (int64_t i = 0; i < m_; ++i)
      for (int64_t j = 0; j < half; ++j) {
        const double angle = static_cast<double>(i) *
                             std::pow(kRopeTheta, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim_));
        cos_[z(i * half + j)] = static_cast<float>(std::cos(angle));
        sin_[z(i * half + j)] = static_cast<float>(std::sin(angle));
      }
  }
  void run() override {
    rope_cpu(m_, n_, head_dim_, cos_.data(), sin_.data(), x_.data(), inverse_);
    inverse_ = !inverse_;
  }
  double check() override {
    Floats x = x_;
    const bool inverse = inverse_;
    run();
    rope_reference(m_, n_, head_dim_, in(cos_), in(sin_), out(x), inverse);
    return max_relative_error(in(x_), in(x));
  }

 private:
  int64_t m_, n_, head_dim_;
  Floats x_, cos_, sin_;
  bool inverse_ = false;
};

// Logits in [-4, 4): probabilities spread over the experts. The chosen experts must agree exactly;
// a different choice counts as an error of 1 (the whole scale).
class RouterOp final : public CpuOp {
 public:
  RouterOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        k_(op.k),
        logits_(uniform(m_ * n_, seed, -4, 4)),
        probs_(uniform(m_ * n_, seed + 1)),
        ids_(z(m_ * k_)),
        weights_(uniform(m_ * k_, seed + 2)) {}
  void run() override { router_cpu(m_, n_, k_, logits_.data(), probs_.data(), ids_.data(), weights_.data()); }
  double check() override {
    run();
    Floats probs(probs_.size()), weights(weights_.size());
    Ids ids(ids_.size());
    router_reference(m_, n_, k_, in(logits_), out(probs), ids, out(weights));
    if (ids != ids_) return 1.0;
    return std::max(max_relative_error(in(probs_), in(probs)), max_relative_error(in(weights_), in(weights)));
  }

 private:
  int64_t m_, n_, k_;
  Floats logits_, probs_;
  Ids ids_;
  Floats weights_;
};

// The forward's probabilities and choices are inputs: computed once here, as training keeps them.
class RouterBackwardOp final : public CpuOp {
 public:
  RouterBackwardOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        k_(op.k),
        probs_(z(m_ * n_)),
        ids_(z(m_ * k_)),
        dweights_(uniform(m_ * k_, seed)),
        dlogits_(uniform(m_ * n_, seed + 1)) {
    const Floats logits = uniform(m_ * n_, seed + 2, -4, 4);
    Floats weights(z(m_ * k_));
    router_cpu(m_, n_, k_, logits.data(), probs_.data(), ids_.data(), weights.data());
  }
  void run() override {
    router_backward_cpu(m_, n_, k_, probs_.data(), ids_.data(), dweights_.data(), dlogits_.data());
  }
  double check() override {
    run();
    Floats dlogits(dlogits_.size());
    router_backward_reference(m_, n_, k_, in(probs_), ids_, in(dweights_), out(dlogits));
    return max_relative_error(in(dlogits_), in(dlogits));
  }

 private:
  int64_t m_, n_, k_;
  Floats probs_;
  Ids ids_;
  Floats dweights_, dlogits_;
};

// Gathers m * k rows (each token's k choices, in expert order) from m tokens.
class PermuteOp final : public CpuOp {
 public:
  PermuteOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        k_(op.k),
        x_(uniform(m_ * n_, seed)),
        src_(indices(m_ * k_, m_, seed + 1)),
        out_(uniform(m_ * k_ * n_, seed + 2)) {}
  void run() override { permute_cpu(m_, n_, k_, x_.data(), src_.data(), out_.data()); }
  double check() override {
    run();
    Floats want(out_.size());
    permute_reference(m_, n_, k_, in(x_), src_, out(want));
    return max_relative_error(in(out_), in(want));
  }

 private:
  int64_t m_, n_, k_;
  Floats x_;
  Ids src_;
  Floats out_;
};

// Sums each token's k expert outputs (rows of m * k) weighted by its router weights.
class UnpermuteOp final : public CpuOp {
 public:
  UnpermuteOp(const Op& op, uint64_t seed)
      : m_(op.m),
        n_(op.n),
        k_(op.k),
        y_(uniform(m_ * k_ * n_, seed)),
        ids_(indices(m_ * k_, m_ * k_, seed + 1)),
        weights_(uniform(m_ * k_, seed + 2, 0, 1)),
        out_(uniform(m_ * n_, seed + 3)) {}
  void run() override { unpermute_cpu(m_, n_, k_, y_.data(), ids_.data(), weights_.data(), out_.data()); }
  double check() override {
    run();
    Floats want(out_.size());
    unpermute_reference(m_, n_, k_, m_ * k_, in(y_), ids_, in(weights_), out(want));
    return max_relative_error(in(out_), in(want));
  }

 private:
  int64_t m_, n_, k_;
  Floats y_;
  Ids ids_;
  Floats weights_, out_;
};

// Scores in [-4, 4): rows neither flat nor one-hot. The entries past each row's diagonal hold
// values too, which the kernel must not read into its sums.
class CausalSoftmaxOp final : public CpuOp {
 public:
  CausalSoftmaxOp(const Op& op, uint64_t seed)
      : m_(op.m), n_(op.n), x_(uniform(m_ * n_, seed, -4, 4)), y_(uniform(m_ * n_, seed + 1)) {}
  void run() override { causal_softmax_cpu(m_, n_, x_.data(), y_.data()); }
  double check() override {
    run();
    Floats y(y_.size());
    causal_softmax_reference(m_, n_, in(x_), out(y));
    return max_relative_error(in(y_), in(y));
  }

 private:
  int64_t m_, n_;
  Floats x_, y_;
};

// The forward's probabilities are an input: computed once here, as training keeps them.
class CausalSoftmaxBackwardOp final : public CpuOp {
 public:
  CausalSoftmaxBackwardOp(const Op& op, uint64_t seed)
      : m_(op.m), n_(op.n), y_(z(m_ * n_)), dy_(uniform(m_ * n_, seed)), dx_(uniform(m_ * n_, seed + 1)) {
    const Floats x = uniform(m_ * n_, seed + 2, -4, 4);
    causal_softmax_cpu(m_, n_, x.data(), y_.data());
  }
  void run() override { causal_softmax_backward_cpu(m_, n_, y_.data(), dy_.data(), dx_.data()); }
  double check() override {
    run();
    Floats dx(dx_.size());
    causal_softmax_backward_reference(m_, n_, in(y_), in(dy_), out(dx));
    return max_relative_error(in(dx_), in(dx));
  }

 private:
  int64_t m_, n_;
  Floats y_, dy_, dx_;
};

// Each run draws a new mask, as each training step does (PyTorch advances its Philox offset per
// call): run r uses seed + r. The mask must match the reference's draw exactly; a different mask
// counts as an error of 1 (the whole scale).
class DropoutOp final : public CpuOp {
 public:
  DropoutOp(const Op& op, uint64_t seed)
      : e_(op.m * op.n), permille_(op.k), seed_(seed), x_(uniform(e_, seed)), mask_(z(e_)), y_(uniform(e_, seed + 1)) {}
  void run() override { dropout_cpu(e_, permille_, seed_ + runs_++, x_.data(), mask_.data(), y_.data()); }
  double check() override {
    const uint64_t seed = seed_ + runs_;
    run();
    Bytes mask(mask_.size());
    Floats y(y_.size());
    dropout_mask_reference(permille_, seed, {mask.data(), mask.size()});
    if (mask != mask_) return 1.0;
    dropout_reference(permille_, in(x_), {mask.data(), mask.size()}, out(y));
    return max_relative_error(in(y_), in(y));
  }

 private:
  int64_t e_, permille_;
  uint64_t seed_, runs_ = 0;
  Floats x_;
  Bytes mask_;
  Floats y_;
};

// The forward's mask is an input: drawn once here, as training keeps it (the forward's output
// lands in dx's buffer, refilled after).
class DropoutBackwardOp final : public CpuOp {
 public:
  DropoutBackwardOp(const Op& op, uint64_t seed)
      : e_(op.m * op.n), permille_(op.k), dy_(uniform(e_, seed)), mask_(z(e_)), dx_(z(e_)) {
    dropout_cpu(e_, permille_, seed + 1, dy_.data(), mask_.data(), dx_.data());
    fill_uniform(dx_.data(), e_, -1, 1, seed + 2);
  }
  void run() override { dropout_backward_cpu(e_, permille_, dy_.data(), mask_.data(), dx_.data()); }
  double check() override {
    run();
    Floats dx(dx_.size());
    dropout_reference(permille_, in(dy_), {mask_.data(), mask_.size()}, out(dx));
    return max_relative_error(in(dx_), in(dx));
  }

 private:
  int64_t e_, permille_;
  Floats dy_;
  Bytes mask_;
  Floats dx_;
};

std::unique_ptr<CpuOp> make_memory_bound(const Op& op, uint64_t seed) {
  switch (op.mem) {
    case MemKind::kLayerNorm: return std::make_unique<LayerNormOp>(op, seed);
    case MemKind::kLayerNormBackward: return std::make_unique<LayerNormBackwardOp>(op, seed);
    case MemKind::kGelu: return std::make_unique<GeluOp>(op, seed);
    case MemKind::kGeluBackward: return std::make_unique<GeluBackwardOp>(op, seed);
    case MemKind::kAdd: return std::make_unique<AddOp>(op, seed);
    case MemKind::kBiasGrad: return std::make_unique<BiasGradOp>(op, seed);
    case MemKind::kCrossEntropy: return std::make_unique<CrossEntropyOp>(op, seed);
    case MemKind::kCrossEntropyBackward:
    case MemKind::kScale: return std::make_unique<ScaleOp>(op, seed);
    case MemKind::kEmbedding: return std::make_unique<EmbeddingOp>(op, seed);
    case MemKind::kEmbeddingBackward: return std::make_unique<EmbeddingBackwardOp>(op, seed);
    case MemKind::kCast: return std::make_unique<CastOp>(op, seed, *cast_direction(op));
    case MemKind::kGradNorm: return std::make_unique<GradNormOp>(op, seed);
    case MemKind::kAdamW: return std::make_unique<AdamWOp>(op, seed);
    case MemKind::kRmsNorm: return std::make_unique<RmsNormOp>(op, seed);
    case MemKind::kRmsNormBackward: return std::make_unique<RmsNormBackwardOp>(op, seed);
    case MemKind::kSilu: return std::make_unique<UnaryOp>(op, seed, silu_cpu, silu_reference);
    case MemKind::kSiluBackward:
      return std::make_unique<UnaryBackwardOp>(op, seed, silu_backward_cpu, silu_backward_reference);
    case MemKind::kRelu: return std::make_unique<UnaryOp>(op, seed, relu_cpu, relu_reference);
    case MemKind::kReluBackward:
      return std::make_unique<UnaryBackwardOp>(op, seed, relu_backward_cpu, relu_backward_reference);
    case MemKind::kMul: return std::make_unique<MulOp>(op, seed);
    case MemKind::kMulBackward: return std::make_unique<MulBackwardOp>(op, seed);
    case MemKind::kRope: return std::make_unique<RopeOp>(op, seed);
    case MemKind::kRouter: return std::make_unique<RouterOp>(op, seed);
    case MemKind::kRouterBackward: return std::make_unique<RouterBackwardOp>(op, seed);
    case MemKind::kPermute: return std::make_unique<PermuteOp>(op, seed);
    case MemKind::kUnpermute: return std::make_unique<UnpermuteOp>(op, seed);
    case MemKind::kSoftmax: return std::make_unique<CausalSoftmaxOp>(op, seed);
    case MemKind::kSoftmaxBackward: return std::make_unique<CausalSoftmaxBackwardOp>(op, seed);
    case MemKind::kDropout: return std::make_unique<DropoutOp>(op, seed);
    case MemKind::kDropoutBackward: return std::make_unique<DropoutBackwardOp>(op, seed);
    case MemKind::kCausalConv1d:
    case MemKind::kCausalConv1dBackward:
    case MemKind::kSsdScan:
    case MemKind::kSsdScanBackward:
    case MemKind::kGatedRmsNorm:
    case MemKind::kGatedRmsNormBackward:
    case MemKind::kGatedDeltaRule:
    case MemKind::kGatedDeltaRuleBackward:  // unsupported_by_every_backend refuses them first
    case MemKind::kNone: break;
  }
  throw Error("op " + name_of(op) + ": memory-bound op without a CPU kernel");
}

}  // namespace

std::string unsupported_reason(const Op& op) {
  if (std::string why = unsupported_by_every_backend(op); !why.empty()) return why;
  if (op.dtype != DType::kFp32)
    return "the CPU backend computes in fp32 only (Eigen and vectorised fp32 loops); " +
           std::string(to_string(op.dtype)) + " needs a GPU backend";
  if (op.kind == OpKind::kMemoryBound) {
    if (op.mem == MemKind::kNone) return "a memory-bound op without a kernel kind (MemKind::kNone)";
    if (op.mem == MemKind::kCast && op.m > 0 && op.n > 0 && !cast_direction(op)) {
      const double elements = static_cast<double>(op.m) * static_cast<double>(op.n);
      return "a cast of " + std::to_string(op.bytes_read / elements) + " to " +
             std::to_string(op.bytes_written / elements) +
             " bytes per element; the CPU backend converts fp32 <-> bf16 only";
    }
  }
  return "";
}

double op_buffer_bytes(const Op& op) {
  const double m = static_cast<double>(op.m), n = static_cast<double>(op.n), k = static_cast<double>(op.k);
  const double f = 4.0, id = 8.0;  // fp32 and int64 bytes
  switch (op.kind) {
    case OpKind::kGemm: return f * (m * k + k * n + m * n);
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd: {
      const double rows = static_cast<double>(op.batch) * static_cast<double>(op.heads) * static_cast<double>(op.seq);
      const double tensors = op.kind == OpKind::kAttentionFwd ? 4.0 : 8.0;  // q k v o (+ dO dQ dK dV)
      return f * (tensors * rows * static_cast<double>(op.head_dim) + rows);
    }
    case OpKind::kMemoryBound: break;
  }
  const double e = m * n;
  switch (op.mem) {
    case MemKind::kLayerNorm: return f * (2 * e + 2 * n + 2 * m);
    case MemKind::kLayerNormBackward: return f * (4 * e + 3 * n + 2 * m);
    case MemKind::kGelu: return f * 2 * e;
    case MemKind::kGeluBackward: return f * 3 * e;
    case MemKind::kAdd: return f * 3 * e;
    case MemKind::kBiasGrad: return f * (e + n);
    case MemKind::kCrossEntropy: return f * (e + m) + id * m;
    case MemKind::kCrossEntropyBackward:
    case MemKind::kScale:
    case MemKind::kGradNorm: return f * e;
    case MemKind::kEmbedding:
    case MemKind::kEmbeddingBackward: return f * (k * n + e) + id * m;
    case MemKind::kCast: return 6.0 * e;
    case MemKind::kAdamW: return f * 4 * e;
    case MemKind::kRmsNorm: return f * (2 * e + n + m);
    case MemKind::kRmsNormBackward: return f * (3 * e + 2 * n + m);
    case MemKind::kSilu:
    case MemKind::kRelu: return f * 2 * e;
    case MemKind::kSiluBackward:
    case MemKind::kReluBackward:
    case MemKind::kMul: return f * 3 * e;
    case MemKind::kMulBackward: return f * 5 * e;
    case MemKind::kRope: return f * (e + m * k);  // x and the cos and sin tables (m x k/2 each)
    case MemKind::kRouter:
    case MemKind::kRouterBackward: return f * (2 * e + m * k) + id * m * k;
    case MemKind::kPermute: return f * (e + e * k) + id * m * k;
    case MemKind::kUnpermute: return f * (e * k + e + m * k) + id * m * k;
    case MemKind::kSoftmax: return f * 2 * e;
    case MemKind::kSoftmaxBackward: return f * 3 * e;
    case MemKind::kDropout:
    case MemKind::kDropoutBackward: return f * 2 * e + e;  // and the one-byte mask
    case MemKind::kCausalConv1d:
    case MemKind::kCausalConv1dBackward:
    case MemKind::kSsdScan:
    case MemKind::kSsdScanBackward:
    case MemKind::kGatedRmsNorm:
    case MemKind::kGatedRmsNormBackward:
    case MemKind::kGatedDeltaRule:
    case MemKind::kGatedDeltaRuleBackward:  // no CPU kernel (unsupported_by_every_backend)
    case MemKind::kNone: break;
  }
  return 0;
}

namespace {
std::unique_ptr<CpuOp> make_op_of_kind(const Op& op, uint64_t seed) {
  switch (op.kind) {
    case OpKind::kGemm: return std::make_unique<GemmOp>(op, seed);
    case OpKind::kAttentionFwd: return std::make_unique<AttentionForwardOp>(op, seed);
    case OpKind::kAttentionBwd: return std::make_unique<AttentionBackwardOp>(op, seed);
    case OpKind::kMemoryBound: return make_memory_bound(op, seed);
  }
  throw Error("op " + name_of(op) + ": unknown op kind");
}

// Writes a cache line back if dirty and drops it from every level of the hierarchy.
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("clflushopt"))) void flush_lines_opt(const char* p, const char* end) {
  for (; p < end; p += 64) _mm_clflushopt(const_cast<char*>(p));
  _mm_sfence();
}
void flush_lines(const char* p, const char* end) {
  // CPUID leaf 7, EBX bit 23 (clang 14's __builtin_cpu_supports does not know "clflushopt").
  static const bool opt = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (b & (1u << 23)) != 0;
  }();
  if (opt) return flush_lines_opt(p, end);
  for (; p < end; p += 64) _mm_clflush(p);
  _mm_mfence();
}
#elif defined(__aarch64__)
void flush_lines(const char* p, const char* end) {
  for (; p < end; p += 64) asm volatile("dc civac, %0" : : "r"(p) : "memory");
  asm volatile("dsb ish" : : : "memory");
}
#else
void flush_lines(const char*, const char*) {}
#endif
}  // namespace

bool can_evict_operands() {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

void CpuOp::evict_operands() const {
  for (const auto& [p, bytes] : buffers_) {
    const auto* begin = static_cast<const char*>(p);
    flush_lines(begin, begin + bytes);
  }
}

std::unique_ptr<CpuOp> make_cpu_op(const Op& op, uint64_t seed) {
  const std::string why = unsupported_reason(op);
  if (!why.empty()) throw Error("op " + name_of(op) + ": " + why);
  check_shape(op);
  std::vector<std::pair<const void*, size_t>> buffers;
  recording = &buffers;
  std::unique_ptr<CpuOp> made;
  try {
    made = make_op_of_kind(op, seed);
  } catch (...) {
    recording = nullptr;
    throw;
  }
  recording = nullptr;
  made->buffers_ = std::move(buffers);
  return made;
}

}  // namespace tpsim::cpu
