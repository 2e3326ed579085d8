#include "model/architecture.hpp"

#include <cmath>

namespace tpsim {

int64_t ModelConfig::d_ffn() const {
  // Rounded to nearest; check_architecture keeps the product positive and small.
  return static_cast<int64_t>(expansion_ratio * static_cast<double>(d_model) + 0.5);
}

std::string check_architecture(const ModelConfig& m) {
  if (m.d_model <= 0) return "d_model must be positive";
  if (m.n_heads <= 0) return "n_heads must be positive";
  if (m.n_layers <= 0) return "n_layers must be positive";
  if (m.vocab_size <= 0) return "vocab_size must be positive";
  if (!(m.expansion_ratio > 0) || !std::isfinite(m.expansion_ratio) || m.expansion_ratio > 1024)
    return "expansion_ratio must be a positive number no larger than 1024";
  if (m.d_model % m.n_heads != 0)
    return "n_heads (" + std::to_string(m.n_heads) + ") does not divide d_model (" +
           std::to_string(m.d_model) + ")";
  if (m.d_ffn() <= 0) return "expansion_ratio * d_model rounds to zero";
  // Keep every count well inside int64 and every byte count well inside double precision.
  if (m.d_model > (1 << 20) || m.n_layers > (1 << 16) || m.vocab_size > (1LL << 32))
    return "dimensions beyond what the simulator models (d_model <= 2^20, n_layers <= 2^16, vocab_size <= 2^32)";
  return {};
}

int64_t layer_parameter_count(const ModelConfig& m) {
  const int64_t d = m.d_model;
  const int64_t f = m.d_ffn();
  const int64_t weights = 3 * d * d + d * d + d * f + f * d;  // Wqkv, out_proj, up, down
  const int64_t norm_weights = 2 * d;
  const int64_t biases = m.no_bias ? 0 : (3 * d + d + f + d) + 2 * d;  // linear biases + norm biases
  return weights + norm_weights + biases;
}

int64_t embedding_parameter_count(const ModelConfig& m, int64_t seq_len) {
  const int64_t d = m.d_model;
  const int64_t token = m.vocab_size * d;  // tied with the output projection
  const int64_t position = m.learned_pos_emb ? seq_len * d : 0;
  const int64_t final_norm = m.no_bias ? d : 2 * d;
  return token + position + final_norm;
}

int64_t parameter_count(const ModelConfig& m, int64_t seq_len) {
  return m.n_layers * layer_parameter_count(m) + embedding_parameter_count(m, seq_len);
}

}  // namespace tpsim
