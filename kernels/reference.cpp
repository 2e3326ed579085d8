#include "kernels/reference.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "io/error.hpp"

namespace tpsim {
namespace {

size_t z(int64_t x) { return static_cast<size_t>(x); }

void require(bool ok, const char* what) {
  if (!ok) throw Error(std::string("reference kernel: ") + what);
}

double gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

// d/dx of gelu_tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2), t = tanh(c (x + 0.044715 x^3)).
double gelu_tanh_derivative(double x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  const double t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Row i of causal attention's probabilities, p[j] = softmax_j(q_i . k_j / sqrt(dh)) for j <= i, over
// one head's [seq, dh] q and k (row-major); returns the row's log-sum-exp of the scaled scores.
double causal_softmax_row(std::span<const float> q, std::span<const float> k, int64_t i, int64_t dh,
                          std::vector<double>& p) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= i; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < dh; ++d) dot += static_cast<double>(q[z(i * dh + d)]) * k[z(j * dh + d)];
    p[z(j)] = dot * scale;
    mx = std::max(mx, p[z(j)]);
  }
  double sum = 0;
  for (int64_t j = 0; j <= i; ++j) sum += std::exp(p[z(j)] - mx);
  for (int64_t j = 0; j <= i; ++j) p[z(j)] = std::exp(p[z(j)] - mx) / sum;
  return mx + std::log(sum);
}

}  // namespace

void gemm_reference(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, std::span<const float> a,
                    std::span<const float> b, std::span<float> c) {
  require(a.size() == z(m * k) && b.size() == z(k * n) && c.size() == z(m * n), "gemm buffer sizes");
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float aip = trans_a ? a[z(p * m + i)] : a[z(i * k + p)];
        const float bpj = trans_b ? b[z(j * k + p)] : b[z(p * n + j)];
        acc += static_cast<double>(aip) * bpj;
      }
      c[z(i * n + j)] = static_cast<float>(acc);
    }
}

void attention_forward_reference(int64_t batch, int64_t heads, int64_t seq, int64_t dh, std::span<const float> q,
                                 std::span<const float> k, std::span<const float> v, std::span<float> o,
                                 std::span<float> lse) {
  const size_t elems = z(batch * heads * seq * dh);
  require(q.size() == elems && k.size() == elems && v.size() == elems && o.size() == elems &&
              lse.size() == z(batch * heads * seq),
          "attention forward buffer sizes");
  std::vector<double> p(z(seq));
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    const size_t base = z(bh * seq * dh);
    for (int64_t i = 0; i < seq; ++i) {
      lse[z(bh * seq + i)] = static_cast<float>(causal_softmax_row(q.subspan(base), k.subspan(base), i, dh, p));
      for (int64_t d = 0; d < dh; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += p[z(j)] * v[base + z(j * dh + d)];
        o[base + z(i * dh + d)] = static_cast<float>(acc);
      }
    }
  }
}

void attention_backward_reference(int64_t batch, int64_t heads, int64_t seq, int64_t dh, std::span<const float> q,
                                  std::span<const float> k, std::span<const float> v, std::span<const float> d_o,
                                  std::span<float> dq, std::span<float> dk, std::span<float> dv) {
  const size_t elems = z(batch * heads * seq * dh);
  require(q.size() == elems && k.size() == elems && v.size() == elems && d_o.size() == elems && dq.size() == elems &&
              dk.size() == elems && dv.size() == elems,
          "attention backward buffer sizes");
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  std::vector<double> p(z(seq)), dp(z(seq));
  std::vector<double> dq_acc(z(seq * dh)), dk_acc(z(seq * dh)), dv_acc(z(seq * dh));
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    const size_t base = z(bh * seq * dh);
    std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
    std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
    std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
    for (int64_t i = 0; i < seq; ++i) {
      // P[i, :i] = softmax of the causal scores; dP[i, j] = dO_i . v_j.
      causal_softmax_row(q.subspan(base), k.subspan(base), i, dh, p);
      double row_dot = 0;  // sum_j P[i,j] dP[i,j]
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < dh; ++d)
          dot += static_cast<double>(d_o[base + z(i * dh + d)]) * v[base + z(j * dh + d)];
        dp[z(j)] = dot;
        row_dot += p[z(j)] * dot;
      }
      for (int64_t j = 0; j <= i; ++j) {
        const double ds = p[z(j)] * (dp[z(j)] - row_dot);
        for (int64_t d = 0; d < dh; ++d) {
          dv_acc[z(j * dh + d)] += p[z(j)] * d_o[base + z(i * dh + d)];
          dq_acc[z(i * dh + d)] += scale * ds * k[base + z(j * dh + d)];
          dk_acc[z(j * dh + d)] += scale * ds * q[base + z(i * dh + d)];
        }
      }
    }
    for (size_t e = 0; e < z(seq * dh); ++e) {
      dq[base + e] = static_cast<float>(dq_acc[e]);
      dk[base + e] = static_cast<float>(dk_acc[e]);
      dv[base + e] = static_cast<float>(dv_acc[e]);
    }
  }
}

void layer_norm_reference(int64_t m, int64_t n, std::span<const float> x, std::span<const float> w,
                          std::span<const float> b, std::span<float> y, std::span<float> mean, std::span<float> rstd) {
  require(x.size() == z(m * n) && y.size() == z(m * n) && w.size() == z(n) && b.size() == z(n) && mean.size() == z(m) &&
              rstd.size() == z(m),
          "layer norm buffer sizes");
  for (int64_t i = 0; i < m; ++i) {
    double mu = 0;
    for (int64_t j = 0; j < n; ++j) mu += x[z(i * n + j)];
    mu /= static_cast<double>(n);
    double var = 0;
    for (int64_t j = 0; j < n; ++j) var += (x[z(i * n + j)] - mu) * (x[z(i * n + j)] - mu);
    var /= static_cast<double>(n);  // biased, as LayerNorm normalises
    const double r = 1.0 / std::sqrt(var + kLayerNormEps);
    for (int64_t j = 0; j < n; ++j)
      y[z(i * n + j)] = static_cast<float>((x[z(i * n + j)] - mu) * r * w[z(j)] + b[z(j)]);
    mean[z(i)] = static_cast<float>(mu);
    rstd[z(i)] = static_cast<float>(r);
  }
}

void layer_norm_backward_reference(int64_t m, int64_t n, std::span<const float> dy, std::span<const float> x,
                                   std::span<const float> w, std::span<const float> mean, std::span<const float> rstd,
                                   std::span<float> dx, std::span<float> dw, std::span<float> db) {
  require(dy.size() == z(m * n) && x.size() == z(m * n) && dx.size() == z(m * n) && w.size() == z(n) &&
              dw.size() == z(n) && db.size() == z(n) && mean.size() == z(m) && rstd.size() == z(m),
          "layer norm backward buffer sizes");
  std::vector<double> dw_acc(z(n), 0.0), db_acc(z(n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    // With xhat = (x - mean) * rstd and g = dy * w:
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    double g_mean = 0, gx_mean = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (x[z(i * n + j)] - static_cast<double>(mean[z(i)])) * rstd[z(i)];
      const double g = static_cast<double>(dy[z(i * n + j)]) * w[z(j)];
      g_mean += g;
      gx_mean += g * xhat;
      dw_acc[z(j)] += static_cast<double>(dy[z(i * n + j)]) * xhat;
      db_acc[z(j)] += dy[z(i * n + j)];
    }
    g_mean /= static_cast<double>(n);
    gx_mean /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (x[z(i * n + j)] - static_cast<double>(mean[z(i)])) * rstd[z(i)];
      const double g = static_cast<double>(dy[z(i * n + j)]) * w[z(j)];
      dx[z(i * n + j)] = static_cast<float>(rstd[z(i)] * (g - g_mean - xhat * gx_mean));
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    dw[z(j)] = static_cast<float>(dw_acc[z(j)]);
    db[z(j)] = static_cast<float>(db_acc[z(j)]);
  }
}

void gelu_reference(std::span<const float> x, std::span<float> y) {
  require(x.size() == y.size(), "gelu buffer sizes");
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(gelu_tanh(x[i]));
}

void gelu_backward_reference(std::span<const float> dy, std::span<const float> x, std::span<float> dx) {
  require(dy.size() == x.size() && dx.size() == x.size(), "gelu backward buffer sizes");
  for (size_t i = 0; i < x.size(); ++i) dx[i] = static_cast<float>(dy[i] * gelu_tanh_derivative(x[i]));
}

void add_reference(std::span<const float> a, std::span<const float> b, std::span<float> y) {
  require(a.size() == b.size() && y.size() == a.size(), "add buffer sizes");
  for (size_t i = 0; i < a.size(); ++i) y[i] = static_cast<float>(static_cast<double>(a[i]) + b[i]);
}

void bias_grad_reference(int64_t m, int64_t n, std::span<const float> dy, std::span<float> db) {
  require(dy.size() == z(m * n) && db.size() == z(n), "bias gradient buffer sizes");
  for (int64_t j = 0; j < n; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < m; ++i) acc += dy[z(i * n + j)];
    db[z(j)] = static_cast<float>(acc);
  }
}

void cross_entropy_reference(int64_t m, int64_t n, std::span<float> logits, std::span<const int64_t> targets,
                             std::span<float> loss) {
  require(logits.size() == z(m * n) && targets.size() == z(m) && loss.size() == z(m), "cross-entropy buffer sizes");
  for (int64_t i = 0; i < m; ++i) {
    const int64_t t = targets[z(i)];
    require(t >= 0 && t < n, "cross-entropy target out of range");
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(logits[z(i * n + j)]));
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(logits[z(i * n + j)] - mx);
    const double lse = mx + std::log(sum);
    loss[z(i)] = static_cast<float>(lse - logits[z(i * n + t)]);
    for (int64_t j = 0; j < n; ++j)
      logits[z(i * n + j)] = static_cast<float>(std::exp(logits[z(i * n + j)] - lse) - (j == t ? 1.0 : 0.0));
  }
}

void scale_reference(std::span<float> x, float c) {
  for (float& e : x) e = static_cast<float>(static_cast<double>(e) * c);
}

void embedding_reference(int64_t m, int64_t n, int64_t rows, std::span<const float> table, std::span<const int64_t> ids,
                         std::span<float> y) {
  require(table.size() == z(rows * n) && ids.size() == z(m) && y.size() == z(m * n), "embedding buffer sizes");
  for (int64_t i = 0; i < m; ++i) {
    require(ids[z(i)] >= 0 && ids[z(i)] < rows, "embedding id out of range");
    for (int64_t j = 0; j < n; ++j) y[z(i * n + j)] = table[z(ids[z(i)] * n + j)];
  }
}

void embedding_backward_reference(int64_t m, int64_t n, int64_t rows, std::span<const float> dy,
                                  std::span<const int64_t> ids, std::span<float> dtable) {
  require(dtable.size() == z(rows * n) && ids.size() == z(m) && dy.size() == z(m * n),
          "embedding backward buffer sizes");
  std::vector<double> acc(z(rows * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    require(ids[z(i)] >= 0 && ids[z(i)] < rows, "embedding id out of range");
    for (int64_t j = 0; j < n; ++j) acc[z(ids[z(i)] * n + j)] += dy[z(i * n + j)];
  }
  for (size_t e = 0; e < acc.size(); ++e) dtable[e] = static_cast<float>(acc[e]);
}

void rms_norm_reference(int64_t m, int64_t n, std::span<const float> x, std::span<const float> w, std::span<float> y,
                        std::span<float> rstd) {
  require(x.size() == z(m * n) && y.size() == z(m * n) && w.size() == z(n) && rstd.size() == z(m),
          "RMSNorm buffer sizes");
  for (int64_t i = 0; i < m; ++i) {
    double sq = 0;
    for (int64_t j = 0; j < n; ++j) sq += static_cast<double>(x[z(i * n + j)]) * x[z(i * n + j)];
    const double r = 1.0 / std::sqrt(sq / static_cast<double>(n) + kRmsNormEps);
    for (int64_t j = 0; j < n; ++j) y[z(i * n + j)] = static_cast<float>(x[z(i * n + j)] * r * w[z(j)]);
    rstd[z(i)] = static_cast<float>(r);
  }
}

void rms_norm_backward_reference(int64_t m, int64_t n, std::span<const float> dy, std::span<const float> x,
                                 std::span<const float> w, std::span<const float> rstd, std::span<float> dx,
                                 std::span<float> dw) {
  require(dy.size() == z(m * n) && x.size() == z(m * n) && dx.size() == z(m * n) && w.size() == z(n) &&
              dw.size() == z(n) && rstd.size() == z(m),
          "RMSNorm backward buffer sizes");
  std::vector<double> dw_acc(z(n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    const double r = rstd[z(i)];
    double gx_mean = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = x[z(i * n + j)] * r;
      gx_mean += static_cast<double>(dy[z(i * n + j)]) * w[z(j)] * xhat;
      dw_acc[z(j)] += static_cast<double>(dy[z(i * n + j)]) * xhat;
    }
    gx_mean /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = x[z(i * n + j)] * r;
      dx[z(i * n + j)] = static_cast<float>(r * (static_cast<double>(dy[z(i * n + j)]) * w[z(j)] - xhat * gx_mean));
    }
  }
  for (int64_t j = 0; j < n; ++j) dw[z(j)] = static_cast<float>(dw_acc[z(j)]);
}

void silu_reference(std::span<const float> x, std::span<float> y) {
  require(x.size() == y.size(), "SiLU buffer sizes");
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(x[i] * sigmoid(x[i]));
}

void silu_backward_reference(std::span<const float> dy, std::span<const float> x, std::span<float> dx) {
  require(dy.size() == x.size() && dx.size() == x.size(), "SiLU backward buffer sizes");
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = sigmoid(x[i]);
    dx[i] = static_cast<float>(dy[i] * s * (1.0 + x[i] * (1.0 - s)));
  }
}

void relu_reference(std::span<const float> x, std::span<float> y) {
  require(x.size() == y.size(), "ReLU buffer sizes");
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void relu_backward_reference(std::span<const float> dy, std::span<const float> x, std::span<float> dx) {
  require(dy.size() == x.size() && dx.size() == x.size(), "ReLU backward buffer sizes");
  for (size_t i = 0; i < x.size(); ++i) dx[i] = x[i] > 0 ? dy[i] : 0.0f;
}

void mul_reference(std::span<const float> a, std::span<const float> b, std::span<float> y) {
  require(a.size() == b.size() && y.size() == a.size(), "product buffer sizes");
  for (size_t i = 0; i < a.size(); ++i) y[i] = static_cast<float>(static_cast<double>(a[i]) * b[i]);
}

void mul_backward_reference(std::span<const float> dy, std::span<const float> a, std::span<const float> b,
                            std::span<float> da, std::span<float> db) {
  require(a.size() == dy.size() && b.size() == dy.size() && da.size() == dy.size() && db.size() == dy.size(),
          "product backward buffer sizes");
  for (size_t i = 0; i < dy.size(); ++i) {
    da[i] = static_cast<float>(static_cast<double>(dy[i]) * b[i]);
    db[i] = static_cast<float>(static_cast<double>(dy[i]) * a[i]);
  }
}

void rope_reference(int64_t m, int64_t n, int64_t head_dim, std::span<const float> cos, std::span<const float> sin,
                    std::span<float> x, bool inverse) {
  require(head_dim >= 2 && head_dim % 2 == 0 && n % head_dim == 0, "RoPE head_dim must be even and divide n");
  const int64_t half = head_dim / 2;
  require(x.size() == z(m * n) && cos.size() == z(m * half) && sin.size() == z(m * half), "RoPE buffer sizes");
  for (int64_t i = 0; i < m; ++i)
    for (int64_t h = 0; h < n / head_dim; ++h)
      for (int64_t j = 0; j < half; ++j) {
        const double c = cos[z(i * half + j)], s = inverse ? -sin[z(i * half + j)] : sin[z(i * half + j)];
        float& x1 = x[z(i * n + h * head_dim + j)];
        float& x2 = x[z(i * n + h * head_dim + j + half)];
        const double a = x1, b = x2;
        x1 = static_cast<float>(a * c - b * s);
        x2 = static_cast<float>(b * c + a * s);
      }
}

void router_reference(int64_t m, int64_t n, int64_t k, std::span<const float> logits, std::span<float> probs,
                      std::span<int64_t> ids, std::span<float> weights) {
  require(k >= 1 && k <= n, "router top k must be in [1, experts]");
  require(logits.size() == z(m * n) && probs.size() == z(m * n) && ids.size() == z(m * k) && weights.size() == z(m * k),
          "router buffer sizes");
  std::vector<double> p(z(n));
  std::vector<bool> taken(z(n));
  for (int64_t i = 0; i < m; ++i) {
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(logits[z(i * n + j)]));
    for (int64_t j = 0; j < n; ++j) sum += p[z(j)] = std::exp(logits[z(i * n + j)] - mx);
    for (int64_t j = 0; j < n; ++j) probs[z(i * n + j)] = static_cast<float>(p[z(j)] /= sum);
    std::fill(taken.begin(), taken.end(), false);
    for (int64_t c = 0; c < k; ++c) {  // selection by repeated maximum: obviously the top k
      int64_t best = -1;
      for (int64_t j = 0; j < n; ++j)
        if (!taken[z(j)] && (best < 0 || p[z(j)] > p[z(best)])) best = j;
      taken[z(best)] = true;
      ids[z(i * k + c)] = best;
      weights[z(i * k + c)] = static_cast<float>(p[z(best)]);
    }
  }
}

void router_backward_reference(int64_t m, int64_t n, int64_t k, std::span<const float> probs,
                               std::span<const int64_t> ids, std::span<const float> dweights,
                               std::span<float> dlogits) {
  require(
      probs.size() == z(m * n) && dlogits.size() == z(m * n) && ids.size() == z(m * k) && dweights.size() == z(m * k),
      "router backward buffer sizes");
  std::vector<double> dp(z(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(dp.begin(), dp.end(), 0.0);
    for (int64_t c = 0; c < k; ++c) {
      const int64_t e = ids[z(i * k + c)];
      require(e >= 0 && e < n, "router expert id out of range");
      dp[z(e)] += dweights[z(i * k + c)];
    }
    double dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += probs[z(i * n + j)] * dp[z(j)];
    for (int64_t j = 0; j < n; ++j) dlogits[z(i * n + j)] = static_cast<float>(probs[z(i * n + j)] * (dp[z(j)] - dot));
  }
}

void permute_reference(int64_t m, int64_t n, int64_t k, std::span<const float> x, std::span<const int64_t> src,
                       std::span<float> out) {
  require(x.size() == z(m * n) && src.size() == z(m * k) && out.size() == z(m * k * n), "permute buffer sizes");
  for (int64_t r = 0; r < m * k; ++r) {
    require(src[z(r)] >= 0 && src[z(r)] < m, "permute source row out of range");
    for (int64_t j = 0; j < n; ++j) out[z(r * n + j)] = x[z(src[z(r)] * n + j)];
  }
}

void unpermute_reference(int64_t m, int64_t n, int64_t k, int64_t rows, std::span<const float> y,
                         std::span<const int64_t> ids, std::span<const float> weights, std::span<float> out) {
  require(y.size() == z(rows * n) && ids.size() == z(m * k) && weights.size() == z(m * k) && out.size() == z(m * n),
          "unpermute buffer sizes");
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) {
        const int64_t r = ids[z(i * k + c)];
        require(r >= 0 && r < rows, "unpermute row out of range");
        acc += static_cast<double>(weights[z(i * k + c)]) * y[z(r * n + j)];
      }
      out[z(i * n + j)] = static_cast<float>(acc);
    }
}

void causal_softmax_reference(int64_t m, int64_t n, std::span<const float> x, std::span<float> y) {
  require(x.size() == z(m * n) && y.size() == z(m * n), "causal softmax buffer sizes");
  for (int64_t r = 0; r < m; ++r) {
    const int64_t i = r % n;
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, static_cast<double>(x[z(r * n + j)]));
    for (int64_t j = 0; j <= i; ++j) sum += std::exp(x[z(r * n + j)] - mx);
    for (int64_t j = 0; j < n; ++j)
      y[z(r * n + j)] = j <= i ? static_cast<float>(std::exp(x[z(r * n + j)] - mx) / sum) : 0.0f;
  }
}

void causal_softmax_backward_reference(int64_t m, int64_t n, std::span<const float> y, std::span<const float> dy,
                                       std::span<float> dx) {
  require(y.size() == z(m * n) && dy.size() == z(m * n) && dx.size() == z(m * n),
          "causal softmax backward buffer sizes");
  for (int64_t r = 0; r < m; ++r) {
    double dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += static_cast<double>(dy[z(r * n + j)]) * y[z(r * n + j)];
    for (int64_t j = 0; j < n; ++j) dx[z(r * n + j)] = static_cast<float>(y[z(r * n + j)] * (dy[z(r * n + j)] - dot));
  }
}

void dropout_mask_reference(int64_t permille, uint64_t seed, std::span<uint8_t> mask) {
  require(permille >= 0 && permille <= kDropoutPermilleMax, "dropout probability must be in [0, 999] per mille");
  const uint64_t key = splitmix64(seed);
  for (size_t i = 0; i < mask.size(); ++i) {
    const uint64_t bits = splitmix64(key ^ static_cast<uint64_t>(i / 4));
    const uint32_t draw = static_cast<uint32_t>((bits >> (16 * (i % 4))) & 0xFFFFu);
    mask[i] = draw >= dropout_threshold(permille) ? 1 : 0;
  }
}

void dropout_reference(int64_t permille, std::span<const float> x, std::span<const uint8_t> mask, std::span<float> y) {
  require(permille >= 0 && permille <= kDropoutPermilleMax, "dropout probability must be in [0, 999] per mille");
  require(mask.size() == x.size() && y.size() == x.size(), "dropout buffer sizes");
  const double scale = dropout_scale(permille);
  for (size_t i = 0; i < x.size(); ++i) {
    require(mask[i] <= 1, "dropout mask byte other than 0 or 1");
    y[i] = static_cast<float>(static_cast<double>(x[i]) * mask[i] * scale);
  }
}

void cast_fp32_to_bf16_reference(std::span<const float> x, std::span<uint16_t> y) {
  require(x.size() == y.size(), "cast buffer sizes");
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(x[i]);
    if (std::isnan(x[i])) {
      y[i] = static_cast<uint16_t>((bits >> 16) | 0x40);  // keep the sign, force a quiet NaN
      continue;
    }
    if (std::isinf(x[i])) {
      y[i] = static_cast<uint16_t>(bits >> 16);
      continue;
    }
    // The two bf16 values around x: truncation toward zero and the next one away from zero. Past
    // the largest finite bf16 the next one is infinity, which rounding treats as 2^128.
    const auto below = static_cast<uint16_t>(bits >> 16);
    const auto above = static_cast<uint16_t>(below + 1);
    const double x_exact = x[i];
    const double below_value = std::bit_cast<float>(static_cast<uint32_t>(below) << 16);
    const double above_value = (above & 0x7f80u) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), x_exact)
                                                            : std::bit_cast<float>(static_cast<uint32_t>(above) << 16);
    const double d_below = std::fabs(x_exact - below_value);
    const double d_above = std::fabs(x_exact - above_value);
    if (d_below < d_above) y[i] = below;
    else if (d_above < d_below) y[i] = above;
    else y[i] = (below & 1u) == 0 ? below : above;  // a tie: the even mantissa
  }
}

void cast_bf16_to_fp32_reference(std::span<const uint16_t> x, std::span<float> y) {
  require(x.size() == y.size(), "cast buffer sizes");
  for (size_t i = 0; i < x.size(); ++i) y[i] = std::bit_cast<float>(static_cast<uint32_t>(x[i]) << 16);
}

double sum_of_squares_reference(std::span<const float> x) {
  double acc = 0;
  for (float e : x) acc += static_cast<double>(e) * e;
  return acc;
}

void adamw_reference(std::span<float> p, std::span<const float> g, std::span<float> m, std::span<float> v,
                     const AdamWParams& h) {
  require(g.size() == p.size() && m.size() == p.size() && v.size() == p.size(), "AdamW buffer sizes");
  const double c1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  const double c2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  for (size_t i = 0; i < p.size(); ++i) {
    const double mi = h.beta1 * static_cast<double>(m[i]) + (1.0 - h.beta1) * g[i];
    const double vi = h.beta2 * static_cast<double>(v[i]) + (1.0 - h.beta2) * static_cast<double>(g[i]) * g[i];
    const double update = (mi / c1) / (std::sqrt(vi / c2) + h.eps) + h.weight_decay * static_cast<double>(p[i]);
    p[i] = static_cast<float>(p[i] - h.lr * update);
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
  }
}

double max_relative_error(std::span<const float> got, std::span<const float> want) {
  require(got.size() == want.size(), "compared outputs differ in size");
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(diff, d);
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, kErrorScaleFloor);
}

}  // namespace tpsim
