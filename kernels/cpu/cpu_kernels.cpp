#include "kernels/cpu/cpu_kernels.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <utility>

// This file is compiled for this machine's instruction set (-march=native, kernels/cpu/
// CMakeLists.txt); the rest of the program, Ceres included, instantiates Eigen for the default one.
// Eigen's templates have the same names under both but not the same code or layout (packet sizes,
// blocking, 64- against 16-byte aligned allocation), and the linker keeps one copy of each: memory
// one copy allocates, the other frees. Renaming the namespace here gives this file its own Eigen.
#define Eigen tpsim_native_eigen
#include <Eigen/Core>

namespace tpsim::cpu {
namespace {

using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapR = Eigen::Map<MatR>;
using MapCR = Eigen::Map<const MatR>;
using ArrMap = Eigen::Map<Eigen::ArrayXf>;
using ArrMapC = Eigen::Map<const Eigen::ArrayXf>;

// Elements per parallel task of the elementwise kernels: 64 KiB of fp32, large enough that
// scheduling costs nothing beside the memory traffic, small enough to balance two to a few dozen
// threads. Below one chunk a kernel runs on the calling thread (no fork).
constexpr int64_t kChunk = int64_t{1} << 14;

// Query and key block of the attention kernels: a 64 x 64 score tile (16 KiB) and the 64 x d_h
// output tile stay in L1/L2 beside the streamed K and V tiles.
constexpr int64_t kAttentionBlock = 64;

int g_threads = std::max(1, omp_get_max_threads());

template <class F>
void for_chunks(int64_t elements, F&& f) {
  const int64_t chunks = (elements + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(g_threads) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(elements, (c + 1) * kChunk));
}

template <class F>
void for_rows(int64_t m, int64_t n, F&& f) {
#pragma omp parallel for schedule(static) num_threads(g_threads) if (m * n > kChunk && m > 1)
  for (int64_t i = 0; i < m; ++i) f(i);
}

// Columns [begin, end) of n that thread t of T owns.
std::pair<int64_t, int64_t> column_range(int64_t n, int t, int T) { return {n * t / T, n * (t + 1) / T}; }

// Elements [b, e) of dropout_cpu. Each element hashes its own draw of 4 (four times the hashing
// of one hash per draw, but no loop-carried state), branch-free on local values and restrict
// pointers, so that the loop vectorises: AVX-512 has the 64-bit multiplies SplitMix64 needs, and
// without `restrict` the byte stores, which may alias anything, would reload every input each
// element. x * 0 keeps NaN and infinity NaN, as the reference does.
void dropout_chunk(int64_t b, int64_t e, uint64_t key, uint32_t threshold, float scale, const float* __restrict x,
                   uint8_t* __restrict mask, float* __restrict y) {
  for (int64_t i = b; i < e; ++i) {
    const uint64_t bits = splitmix64(key ^ static_cast<uint64_t>(i / 4));
    const bool keep = ((bits >> (16 * (i % 4))) & 0xFFFFu) >= threshold;
    mask[i] = static_cast<uint8_t>(keep);
    y[i] = x[i] * (keep ? scale : 0.0f);
  }
}

}  // namespace

void set_threads(int threads) {
  g_threads = std::max(1, threads);
  Eigen::setNbThreads(g_threads);
}

int threads() { return g_threads; }

int default_threads() { return std::max(1, omp_get_max_threads()); }

void gemm_eigen(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, const float* a, const float* b, float* c) {
  const MapCR A(a, trans_a ? k : m, trans_a ? m : k);
  const MapCR B(b, trans_b ? n : k, trans_b ? k : n);
  MapR C(c, m, n);
  // C in column panels of at most kGemmPanelColumns, each its own product. Eigen's one-thread GEMM
  // (3.4) falls from 100-125 to 35-50 GFLOP/s on this project's machine once C is about 16,380
  // columns wide at k >= 512 (a step between 16,350 and 16,383 columns at m = k = 512, every
  // layout; measured 2026-11-28, docs/backends.md); panels of 8,192 or fewer run at the narrow
  // rate, and narrower products are unchanged. Each element of C is still one dot product over k.
  const int64_t panels = (n + kGemmPanelColumns - 1) / kGemmPanelColumns;
  const int64_t width = panels <= 1 ? n : ((n + panels - 1) / panels + 15) / 16 * 16;
  for (int64_t j = 0; j < n; j += width) {
    const int64_t w = std::min(width, n - j);
    auto Cj = C.middleCols(j, w);
    if (!trans_a && !trans_b) Cj.noalias() = A * B.middleCols(j, w);
    else if (!trans_a) Cj.noalias() = A * B.middleRows(j, w).transpose();
    else if (!trans_b) Cj.noalias() = A.transpose() * B.middleCols(j, w);
    else Cj.noalias() = A.transpose() * B.middleRows(j, w).transpose();
  }
}

void attention_forward_cpu(int64_t batch, int64_t heads, int64_t seq, int64_t dh, const float* q, const float* k,
                           const float* v, float* o, float* lse) {
  constexpr int64_t B = kAttentionBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int64_t blocks = (seq + B - 1) / B;
  const int64_t tasks = batch * heads * blocks;
#pragma omp parallel num_threads(g_threads)
  {
    // Per-thread scratch: the scaled query tile, one score tile, the running output and the
    // online-softmax state (running max m and sum l of each query row).
    Eigen::VectorXf qs_buf(B * dh), s_buf(B * B), acc_buf(B * dh);
    Eigen::ArrayXf m_run(B), l_run(B), m_new(B), alpha(B);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      // The last query blocks see the most keys: hand them out first.
      const int64_t bh = task / blocks, qb = blocks - 1 - task % blocks;
      const int64_t base = bh * seq * dh, q0 = qb * B, rows = std::min(B, seq - q0);
      MapR Qs(qs_buf.data(), rows, dh);
      Qs = MapCR(q + base + q0 * dh, rows, dh) * scale;
      MapR acc(acc_buf.data(), rows, dh);
      acc.setZero();
      auto m = m_run.head(rows);
      auto l = l_run.head(rows);
      m.setConstant(-std::numeric_limits<float>::infinity());
      l.setZero();
      for (int64_t kb = 0; kb <= qb; ++kb) {
        const int64_t k0 = kb * B, cols = std::min(B, seq - k0);
        const MapCR K(k + base + k0 * dh, cols, dh), V(v + base + k0 * dh, cols, dh);
        MapR S(s_buf.data(), rows, cols);
        S.noalias() = Qs * K.transpose();
        if (kb == qb)  // the diagonal tile: key j > query i is masked (q0 == k0 here)
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = i + 1; j < cols; ++j) S(i, j) = -std::numeric_limits<float>::infinity();
        auto mn = m_new.head(rows);
        mn = m.max(S.rowwise().maxCoeff().array());
        auto al = alpha.head(rows);
        al = (m - mn).exp();
        S.array() = (S.array().colwise() - mn).exp();
        l = l * al + S.rowwise().sum().array();
        acc.array().colwise() *= al;
        acc.noalias() += S * V;
        m = mn;
      }
      MapR(o + base + q0 * dh, rows, dh) = (acc.array().colwise() / l).matrix();
      Eigen::Map<Eigen::ArrayXf>(lse + bh * seq + q0, rows) = m + l.log();
    }
  }
}

void attention_backward_cpu(int64_t batch, int64_t heads, int64_t seq, int64_t dh, const float* q, const float* k,
                            const float* v, const float* o, const float* lse, const float* d_o, float* dq, float* dk,
                            float* dv) {
  constexpr int64_t B = kAttentionBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int64_t blocks = (seq + B - 1) / B;
  const int64_t bhs = batch * heads;
#pragma omp parallel num_threads(g_threads)
  {
    Eigen::VectorXf s_buf(B * B), dp_buf(B * B), dk_buf(B * dh), dv_buf(B * dh);
    Eigen::ArrayXf delta(seq);  // D_i = dO_i . O_i = sum_j P_ij dP_ij, the softmax backward's row term
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < bhs; ++bh) {
      const int64_t base = bh * seq * dh;
      const MapCR Q(q + base, seq, dh), K(k + base, seq, dh), V(v + base, seq, dh), O(o + base, seq, dh),
          dO(d_o + base, seq, dh);
      const ArrMapC L(lse + bh * seq, seq);
      delta = (dO.array() * O.array()).rowwise().sum();
      MapR dQ(dq + base, seq, dh);
      dQ.setZero();
      for (int64_t kb = 0; kb < blocks; ++kb) {
        const int64_t k0 = kb * B, cols = std::min(B, seq - k0);
        const auto Kj = K.middleRows(k0, cols);
        const auto Vj = V.middleRows(k0, cols);
        MapR dKj(dk_buf.data(), cols, dh), dVj(dv_buf.data(), cols, dh);
        dKj.setZero();
        dVj.setZero();
        for (int64_t qb = kb; qb < blocks; ++qb) {
          const int64_t q0 = qb * B, rows = std::min(B, seq - q0);
          const auto Qi = Q.middleRows(q0, rows);
          const auto dOi = dO.middleRows(q0, rows);
          MapR P(s_buf.data(), rows, cols), dP(dp_buf.data(), rows, cols);
          P.noalias() = Qi * Kj.transpose();
          P *= scale;
          if (qb == kb)
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t j = i + 1; j < cols; ++j) P(i, j) = -std::numeric_limits<float>::infinity();
          P.array() = (P.array().colwise() - L.segment(q0, rows)).exp();  // masked entries -> 0
          dVj.noalias() += P.transpose() * dOi;
          dP.noalias() = dOi * Vj.transpose();
          // dS = P * (dP - D), folded with the score scale for both products below.
          dP.array() = P.array() * (dP.array().colwise() - delta.segment(q0, rows)) * scale;
          dQ.middleRows(q0, rows).noalias() += dP * Kj;
          dKj.noalias() += dP.transpose() * Qi;
        }
        MapR(dk + base + k0 * dh, cols, dh) = dKj;
        MapR(dv + base + k0 * dh, cols, dh) = dVj;
      }
    }
  }
}

void layer_norm_cpu(int64_t m, int64_t n, const float* x, const float* w, const float* b, float* y, float* mean,
                    float* rstd) {
  const ArrMapC W(w, n), Bias(b, n);
  for_rows(m, n, [&](int64_t i) {
    const ArrMapC xr(x + i * n, n);
    const float mu = xr.mean();
    const float var = (xr - mu).square().mean();  // two passes: no cancellation for offset rows
    const float r = 1.0f / std::sqrt(var + kLayerNormEps);
    ArrMap(y + i * n, n) = (xr - mu) * r * W + Bias;
    mean[i] = mu;
    rstd[i] = r;
  });
}

void layer_norm_backward_cpu(int64_t m, int64_t n, const float* dy, const float* x, const float* w, const float* mean,
                             const float* rstd, float* dx, float* dw, float* db) {
  // dx row by row; dw and db are column sums, accumulated per thread and added at the end.
  const int T = g_threads;
  Eigen::VectorXf partial = Eigen::VectorXf::Zero(2 * n * T);
  const ArrMapC W(w, n);
#pragma omp parallel num_threads(T) if (m * n > kChunk && m > 1)
  {
    const int t = omp_get_thread_num();
    ArrMap pdw(partial.data() + 2 * n * t, n), pdb(partial.data() + 2 * n * t + n, n);
    Eigen::ArrayXf xhat(n), g(n);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      const ArrMapC xr(x + i * n, n), dyr(dy + i * n, n);
      xhat = (xr - mean[i]) * rstd[i];
      g = dyr * W;
      const float g_mean = g.mean(), gx_mean = (g * xhat).mean();
      ArrMap(dx + i * n, n) = rstd[i] * (g - g_mean - xhat * gx_mean);
      pdw += dyr * xhat;
      pdb += dyr;
    }
  }
  ArrMap DW(dw, n), DB(db, n);
  DW.setZero();
  DB.setZero();
  for (int t = 0; t < T; ++t) {
    DW += ArrMap(partial.data() + 2 * n * t, n);
    DB += ArrMap(partial.data() + 2 * n * t + n, n);
  }
}

void gelu_cpu(int64_t elements, const float* x, float* y) {
  const float c = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
  for_chunks(elements, [&](int64_t b, int64_t e) {
    const ArrMapC xs(x + b, e - b);
    ArrMap(y + b, e - b) = 0.5f * xs * (1.0f + (c * (xs + 0.044715f * xs.cube())).tanh());
  });
}

void gelu_backward_cpu(int64_t elements, const float* dy, const float* x, float* dx) {
  const float c = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
  for_chunks(elements, [&](int64_t b, int64_t e) {
    const ArrMapC xs(x + b, e - b), dys(dy + b, e - b);
    const Eigen::ArrayXf t = (c * (xs + 0.044715f * xs.cube())).tanh();
    ArrMap(dx + b, e - b) =
        dys * (0.5f * (1.0f + t) + 0.5f * xs * (1.0f - t.square()) * c * (1.0f + 3.0f * 0.044715f * xs.square()));
  });
}

void add_cpu(int64_t elements, const float* a, const float* b, float* y) {
  for_chunks(elements, [&](int64_t lo, int64_t hi) {
    ArrMap(y + lo, hi - lo) = ArrMapC(a + lo, hi - lo) + ArrMapC(b + lo, hi - lo);
  });
}

void bias_grad_cpu(int64_t m, int64_t n, const float* dy, float* db) {
  // Each thread sums its own columns over every row: contiguous row segments, no reduction step.
#pragma omp parallel num_threads(g_threads) if (m * n > kChunk && n >= 16 * g_threads)
  {
    const auto [c0, c1] = column_range(n, omp_get_thread_num(), omp_get_num_threads());
    ArrMap acc(db + c0, c1 - c0);
    acc.setZero();
    for (int64_t i = 0; i < m; ++i) acc += ArrMapC(dy + i * n + c0, c1 - c0);
  }
}

void cross_entropy_cpu(int64_t m, int64_t n, float* logits, const int64_t* targets, float* loss) {
  for_rows(m, n, [&](int64_t i) {
    ArrMap row(logits + i * n, n);
    const int64_t t = targets[i];
    const float target_logit = row[t];
    const float mx = row.maxCoeff();
    row = (row - mx).exp();
    const float sum = row.sum();
    loss[i] = mx + std::log(sum) - target_logit;
    row *= 1.0f / sum;
    row[t] -= 1.0f;
  });
}

void scale_cpu(int64_t elements, float* x, float c) {
  for_chunks(elements, [&](int64_t b, int64_t e) { ArrMap(x + b, e - b) *= c; });
}

void embedding_cpu(int64_t m, int64_t n, const float* table, const int64_t* ids, float* y) {
  for_rows(m, n,
           [&](int64_t i) { std::memcpy(y + i * n, table + ids[i] * n, static_cast<size_t>(n) * sizeof(float)); });
}

void embedding_backward_cpu(int64_t m, int64_t n, int64_t rows, const float* dy, const int64_t* ids, float* dtable) {
  for_chunks(rows * n, [&](int64_t b, int64_t e) { std::fill(dtable + b, dtable + e, 0.0f); });
  // Tokens may repeat an id, so threads split the columns rather than the tokens: no two threads
  // ever add into the same element.
#pragma omp parallel num_threads(g_threads) if (m * n > kChunk && n >= 16 * g_threads)
  {
    const auto [c0, c1] = column_range(n, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t i = 0; i < m; ++i) ArrMap(dtable + ids[i] * n + c0, c1 - c0) += ArrMapC(dy + i * n + c0, c1 - c0);
  }
}

void rms_norm_cpu(int64_t m, int64_t n, const float* x, const float* w, float* y, float* rstd) {
  const ArrMapC W(w, n);
  for_rows(m, n, [&](int64_t i) {
    const ArrMapC xr(x + i * n, n);
    const float r = 1.0f / std::sqrt(xr.square().mean() + kRmsNormEps);
    ArrMap(y + i * n, n) = xr * r * W;
    rstd[i] = r;
  });
}

void rms_norm_backward_cpu(int64_t m, int64_t n, const float* dy, const float* x, const float* w, const float* rstd,
                           float* dx, float* dw) {
  // As layer_norm_backward_cpu: dx row by row, dw summed per thread and added at the end.
  const int T = g_threads;
  Eigen::VectorXf partial = Eigen::VectorXf::Zero(n * T);
  const ArrMapC W(w, n);
#pragma omp parallel num_threads(T) if (m * n > kChunk && m > 1)
  {
    ArrMap pdw(partial.data() + n * omp_get_thread_num(), n);
    Eigen::ArrayXf xhat(n), g(n);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      const ArrMapC xr(x + i * n, n), dyr(dy + i * n, n);
      xhat = xr * rstd[i];
      g = dyr * W;
      ArrMap(dx + i * n, n) = rstd[i] * (g - xhat * (g * xhat).mean());
      pdw += dyr * xhat;
    }
  }
  ArrMap DW(dw, n);
  DW.setZero();
  for (int t = 0; t < T; ++t) DW += ArrMap(partial.data() + n * t, n);
}

void silu_cpu(int64_t elements, const float* x, float* y) {
  for_chunks(elements, [&](int64_t b, int64_t e) {
    const ArrMapC xs(x + b, e - b);
    ArrMap(y + b, e - b) = xs / (1.0f + (-xs).exp());
  });
}

void silu_backward_cpu(int64_t elements, const float* dy, const float* x, float* dx) {
  for_chunks(elements, [&](int64_t b, int64_t e) {
    const ArrMapC xs(x + b, e - b), dys(dy + b, e - b);
    const Eigen::ArrayXf s = 1.0f / (1.0f + (-xs).exp());
    ArrMap(dx + b, e - b) = dys * s * (1.0f + xs * (1.0f - s));
  });
}

void relu_cpu(int64_t elements, const float* x, float* y) {
  for_chunks(elements, [&](int64_t b, int64_t e) { ArrMap(y + b, e - b) = ArrMapC(x + b, e - b).max(0.0f); });
}

void relu_backward_cpu(int64_t elements, const float* dy, const float* x, float* dx) {
  for_chunks(elements, [&](int64_t b, int64_t e) {
    ArrMap(dx + b, e - b) = (ArrMapC(x + b, e - b) > 0.0f).select(ArrMapC(dy + b, e - b), 0.0f);
  });
}

void mul_cpu(int64_t elements, const float* a, const float* b, float* y) {
  for_chunks(elements, [&](int64_t lo, int64_t hi) {
    ArrMap(y + lo, hi - lo) = ArrMapC(a + lo, hi - lo) * ArrMapC(b + lo, hi - lo);
  });
}

void mul_backward_cpu(int64_t elements, const float* dy, const float* a, const float* b, float* da, float* db) {
  for_chunks(elements, [&](int64_t lo, int64_t hi) {
    const ArrMapC dys(dy + lo, hi - lo);
    ArrMap(da + lo, hi - lo) = dys * ArrMapC(b + lo, hi - lo);
    ArrMap(db + lo, hi - lo) = dys * ArrMapC(a + lo, hi - lo);
  });
}

void rope_cpu(int64_t m, int64_t n, int64_t head_dim, const float* cos, const float* sin, float* x, bool inverse) {
  const int64_t half = head_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  for_rows(m, n, [&](int64_t i) {
    const ArrMapC c(cos + i * half, half);
    const Eigen::ArrayXf s = sign * ArrMapC(sin + i * half, half);
    Eigen::ArrayXf a(half);
    for (int64_t h = 0; h < n / head_dim; ++h) {
      ArrMap x1(x + i * n + h * head_dim, half), x2(x + i * n + h * head_dim + half, half);
      a = x1;
      x1 = a * c - x2 * s;
      x2 = x2 * c + a * s;
    }
  });
}

void router_cpu(int64_t m, int64_t n, int64_t k, const float* logits, float* probs, int64_t* ids, float* weights) {
  for_rows(m, n, [&](int64_t i) {
    ArrMap p(probs + i * n, n);
    const ArrMapC l(logits + i * n, n);
    p = (l - l.maxCoeff()).exp();
    p *= 1.0f / p.sum();
    // Top k by insertion into a sorted list of k (k is small: 1 to 8 in the models tpsim reads);
    // strict > keeps the lower expert first on ties.
    int64_t* id = ids + i * k;
    float* wt = weights + i * k;
    int64_t have = 0;
    for (int64_t j = 0; j < n; ++j) {
      int64_t pos = have;
      while (pos > 0 && p[j] > wt[pos - 1]) --pos;
      if (pos >= k) continue;
      for (int64_t q = std::min(have, k - 1); q > pos; --q) {
        id[q] = id[q - 1];
        wt[q] = wt[q - 1];
      }
      id[pos] = j;
      wt[pos] = p[j];
      have = std::min(have + 1, k);
    }
  });
}

void router_backward_cpu(int64_t m, int64_t n, int64_t k, const float* probs, const int64_t* ids, const float* dweights,
                         float* dlogits) {
  for_rows(m, n, [&](int64_t i) {
    ArrMap d(dlogits + i * n, n);
    const ArrMapC p(probs + i * n, n);
    // dP in dlogits' row, then the softmax backward in place.
    d.setZero();
    for (int64_t c = 0; c < k; ++c) d[ids[i * k + c]] += dweights[i * k + c];
    const float dot = (p * d).sum();
    d = p * (d - dot);
  });
}

void permute_cpu(int64_t m, int64_t n, int64_t k, const float* x, const int64_t* src, float* out) {
  for_rows(m * k, n,
           [&](int64_t r) { std::memcpy(out + r * n, x + src[r] * n, static_cast<size_t>(n) * sizeof(float)); });
}

void unpermute_cpu(int64_t m, int64_t n, int64_t k, const float* y, const int64_t* ids, const float* weights,
                   float* out) {
  for_rows(m, n, [&](int64_t i) {
    ArrMap o(out + i * n, n);
    o = weights[i * k] * ArrMapC(y + ids[i * k] * n, n);
    for (int64_t c = 1; c < k; ++c) o += weights[i * k + c] * ArrMapC(y + ids[i * k + c] * n, n);
  });
}

void causal_softmax_cpu(int64_t m, int64_t n, const float* x, float* y) {
  for_rows(m, n, [&](int64_t r) {
    const int64_t kept = r % n + 1;  // the masked entries are not read
    const ArrMapC xr(x + r * n, kept);
    ArrMap yr(y + r * n, kept);
    yr = (xr - xr.maxCoeff()).exp();
    yr *= 1.0f / yr.sum();
    std::fill(y + r * n + kept, y + (r + 1) * n, 0.0f);
  });
}

void causal_softmax_backward_cpu(int64_t m, int64_t n, const float* y, const float* dy, float* dx) {
  for_rows(m, n, [&](int64_t r) {
    const ArrMapC yr(y + r * n, n), dyr(dy + r * n, n);
    ArrMap(dx + r * n, n) = yr * (dyr - (yr * dyr).sum());
  });
}

void dropout_cpu(int64_t elements, int64_t permille, uint64_t seed, const float* x, uint8_t* mask, float* y) {
  const uint64_t key = splitmix64(seed);
  const uint32_t threshold = dropout_threshold(permille);
  const float scale = static_cast<float>(dropout_scale(permille));
  for_chunks(elements, [&](int64_t b, int64_t e) { dropout_chunk(b, e, key, threshold, scale, x, mask, y); });
}

void dropout_backward_cpu(int64_t elements, int64_t permille, const float* dy, const uint8_t* mask, float* dx) {
  using MaskMapC = Eigen::Map<const Eigen::Array<uint8_t, Eigen::Dynamic, 1>>;
  const float scale = static_cast<float>(dropout_scale(permille));
  for_chunks(elements, [&](int64_t b, int64_t e) {
    ArrMap(dx + b, e - b) = ArrMapC(dy + b, e - b) * (MaskMapC(mask + b, e - b).cast<float>() * scale);
  });
}

void cast_fp32_to_bf16_cpu(int64_t elements, const float* x, uint16_t* y) {
  for_chunks(elements, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto u = std::bit_cast<uint32_t>(x[i]);
      // Round to nearest even: add just under half an ulp of bf16, plus one when the kept
      // mantissa is odd, and truncate. NaNs keep their sign and become quiet.
      const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
      const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
      y[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
    }
  });
}

void cast_bf16_to_fp32_cpu(int64_t elements, const uint16_t* x, float* y) {
  for_chunks(elements, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = std::bit_cast<float>(static_cast<uint32_t>(x[i]) << 16);
  });
}

double sum_of_squares_cpu(int64_t elements, const float* x) {
  // fp32 within a chunk (vectorised), fp64 across chunks.
  const int64_t chunks = (elements + kChunk - 1) / kChunk;
  double acc = 0;
#pragma omp parallel for schedule(static) num_threads(g_threads) if (chunks > 1) reduction(+ : acc)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * kChunk, e = std::min(elements, b + kChunk);
    acc += static_cast<double>(ArrMapC(x + b, e - b).square().sum());
  }
  return acc;
}

void adamw_cpu(int64_t elements, float* p, const float* g, float* m, float* v, const AdamWParams& h) {
  const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step)));
  const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step)));
  for_chunks(elements, [&](int64_t b, int64_t e) {
    const int64_t len = e - b;
    ArrMap P(p + b, len), M(m + b, len), V(v + b, len);
    const ArrMapC G(g + b, len);
    M = h.beta1 * M + (1.0f - h.beta1) * G;
    V = h.beta2 * V + (1.0f - h.beta2) * G.square();
    P -= h.lr * ((M / c1) / ((V / c2).sqrt() + h.eps) + h.weight_decay * P);
  });
}

void fill_uniform(float* x, int64_t elements, float lo, float hi, uint64_t seed) {
  const double width = static_cast<double>(hi) - lo;
  const uint64_t key = splitmix64(seed);
  for_chunks(elements, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint64_t top24 = splitmix64(key ^ static_cast<uint64_t>(i)) >> 40;
      x[i] = static_cast<float>(lo + width * (static_cast<double>(top24) + 0.5) * 0x1p-24);
    }
  });
}

void fill_indices(int64_t* x, int64_t elements, int64_t bound, uint64_t seed) {
  const uint64_t key = splitmix64(seed);
  for_chunks(elements, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      x[i] = static_cast<int64_t>(splitmix64(key ^ static_cast<uint64_t>(i)) % static_cast<uint64_t>(bound));
  });
}

}  // namespace tpsim::cpu
