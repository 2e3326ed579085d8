// Helpers shared by the test suites: the seed tables, resolved against the catalogue.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "io/catalog.hpp"
#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/hf_config.hpp"
#include "io/measured_table.hpp"
#include "io/profile_io.hpp"
#include "model/architecture.hpp"

namespace tpsim::test {

// A shipped Hugging Face config (data/models/hf/NAME.json), read as the catalogue reads it.
inline ModelConfig shipped_hf(const std::string& name) {
  return read_hf_config_file(std::filesystem::path(TPSIM_DATA) / "models" / "hf" / (name + ".json")).model;
}

// Adds the models of a --models file's text to `c`; returns the warnings it gave.
inline std::vector<std::string> add_models(ModelCatalog& c, const std::string& yaml,
                                           const std::string& origin = "m.yaml") {
  std::vector<std::string> warnings;
  c.add_yaml(yaml, origin, warnings);
  return warnings;
}

// Runs f and returns the Error's message ("" when nothing was thrown).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline const std::vector<std::string>& seed_tables() {
  static const std::vector<std::string> t = {
      std::string(TPSIM_DATA) + "/measured/h100_80gb_bf16.md", std::string(TPSIM_DATA) + "/measured/h100_80gb_fp8.md",
      std::string(TPSIM_DATA) + "/measured/a100_80gb_bf16.md", std::string(TPSIM_DATA) + "/measured/a100_40gb_bf16.md"};
  return t;
}

inline std::vector<MeasuredRow> all_seed_rows() {
  std::vector<MeasuredRow> rows;
  for (const auto& path : seed_tables()) {
    MeasuredTable t = read_measured_table(path);
    rows.insert(rows.end(), t.rows.begin(), t.rows.end());
  }
  return rows;
}

// A Llama-family model (tests/data/hf-configs: Llama 3, Mistral, Qwen2, Mixtral), field by field as
// its config.json gives it: GQA, RoPE, RMSNorm, no biases, SwiGLU of width ffn, untied embeddings.
inline ModelConfig llama(int64_t d, int64_t heads, int64_t kv, int64_t layers, int64_t ffn, int64_t vocab) {
  return {.name = "llama",
          .d_model = d,
          .n_heads = heads,
          .n_layers = layers,
          .vocab_size = vocab,
          .n_kv_heads = kv,
          .ffn_hidden = ffn,
          .positions = PositionKind::kRope,
          .norm = NormKind::kRmsNorm,
          .norm_bias = false,
          .qkv_bias = false,
          .linear_bias = false,
          .ffn = FfnKind::kGlu,
          .activation = Activation::kSilu,
          .tie_embeddings = false};
}

// GPT-2 (openai-community/gpt2): MPT's block shape, biases and tied embeddings, with a learned
// table of 1024 positions and the unpadded GPT-2 vocabulary.
inline ModelConfig gpt2() {
  return {.name = "gpt2", .d_model = 768, .n_heads = 12, .n_layers = 12, .vocab_size = 50257, .max_positions = 1024};
}

}  // namespace tpsim::test
