// The architecture of an MPT-style decoder-only transformer, as llm-foundry's `model:` block
// describes it, and its exact parameter count.
#pragma once

#include <cstdint>
#include <string>

namespace tpsim {

struct ModelConfig {
  std::string name;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_layers = 0;
  double expansion_ratio = 4.0;  // d_ffn = expansion_ratio * d_model
  int64_t vocab_size = 0;
  bool learned_pos_emb = true;  // one learned embedding row per position (max_seq_len rows)
  bool no_bias = false;         // MPT's no_bias: drops the biases of every linear and norm

  int64_t d_head() const { return d_model / n_heads; }
  int64_t d_ffn() const;
};

// Empty when the architecture can be modelled, else the reason (heads that do not divide d_model, ...).
std::string check_architecture(const ModelConfig& m);

// Parameters of one transformer block: QKV (3d^2), out projection (d^2), MLP up and down (2*d*f),
// two layer norms (weight, and bias unless no_bias) and the linear biases unless no_bias.
// With f = 4d and biases: 12d^2 + 13d.
int64_t layer_parameter_count(const ModelConfig& m);

// Parameters outside the blocks: tied token embedding (V*d), learned positional embedding (S*d)
// and the final layer norm (2d with bias).
int64_t embedding_parameter_count(const ModelConfig& m, int64_t seq_len);

// llm-foundry's `n_params` (the NumParams column): L*(12d^2 + 13d) + d*(V + S + 2) for MPT defaults.
int64_t parameter_count(const ModelConfig& m, int64_t seq_len);

}  // namespace tpsim
