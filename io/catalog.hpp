// Model architectures by name: the shipped catalogue (data/models/mpt.yaml, then the Hugging Face
// configs of data/models/hf/*.json under their file names) plus any --models files, each a YAML
// map from a model name to a block of llm-foundry `model:` keys, or a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/architecture.hpp"

namespace YAML {
class Node;
}

namespace tpsim {

// One llm-foundry `model:` block (the keys of MPTConfig in llmfoundry/models/mpt/configuration_mpt.py,
// its nested attn_config, ffn_config and init_config, and ComposerMPTCausalLM's name and loss_fn),
// read strictly: every key is modelled (heads and grouped-query or multi-query attention, head_dim,
// sliding windows, ALiBi, RoPE or learned positions, LayerNorm or RMSNorm, the biases of no_bias and
// attention_bias, MLP or GLU feed-forwards and their activation and width, MegaBlocks' and torch's
// mixtures of experts, tied or untied embeddings), accepted as irrelevant to speed and memory,
// refused naming what tpsim cannot model yet (prefix-LM, normalised queries and keys, expert
// parallelism, per-layer overrides, ...) or what llm-foundry itself refuses (ALiBi with RoPE,
// mptgeglu, ...), or an unknown key, refused with the nearest known one. A key of attn_config or
// ffn_config written at the top of the block is a note: llm-foundry passes it to Hugging Face's
// PretrainedConfig, which keeps it unread.
struct ModelBlock {
  struct Note {
    std::string where;  // file:line
    std::string text;   // "'rope' belongs in attn_config: ..."
  };
  ModelConfig model;                     // vocab_size 50368 unless given; no name
  std::optional<int64_t> max_seq_len;    // max_seq_len, 1 to kMaxSeqLen
  std::optional<std::string> attn_impl;  // attn_config.attn_impl as written (torch: ModelConfig::torch_attention)
  std::vector<std::string> ignored;      // known keys irrelevant to the cost, as labelled ("model.init_device")
  std::vector<Note> notes;
  // activation_checkpointing_target naming something other than whole blocks (null, [] or MPTBlock):
  // an attention or feed-forward module, a norm, chosen blocks. The one-line error (file:line, the
  // value, the nearest that tpsim models) for a run that checkpoints; a run that does not checkpoint
  // ignores the target, as llm-foundry does.
  std::optional<std::string> checkpointing_target_refusal;
};

// `owner` and `separator` name the block's keys in messages: "model 'm1'" and ' ' give
// "model 'm1' d_model" (a --models entry), "model" and '.' give "model.d_model" (a training YAML).
ModelBlock read_model_block(const YAML::Node& block, const std::string& origin, const std::string& owner,
                            char separator);

// How the block's attn_impl is costed, for its note: " -- attention is costed as ..." (torch:
// PyTorch's unfused attention; flash and triton: causal flash attention). "" without an attn_impl.
std::string attn_impl_costing(const ModelBlock& block);

class ModelCatalog {
 public:
  // The shipped catalogue: the MPT models first (so that 125m..70b is the range it always was),
  // then data/models/hf/*.json in name order, each read when its model is first asked for (a run
  // asks for a few of them; reading all of them was a tenth of a sweep's time).
  static ModelCatalog load_default();

  // Adds the models of a YAML file, or the one model of a Hugging Face config.json (a path ending
  // in .json, or a folder holding config.json; named by hf_model_name); a name already present is
  // replaced. Keys the simulator ignores are reported through `warnings`; missing required keys,
  // unknown keys and bad values are an Error.
  void add_file(const std::filesystem::path& path, std::vector<std::string>& warnings);
  void add_yaml(const std::string& text, const std::string& origin, std::vector<std::string>& warnings);

  const ModelConfig* find(std::string_view name) const;
  const ModelConfig& get(std::string_view name) const;  // Error naming the known models if absent
  const std::vector<ModelConfig>& models() const;       // every model read

  // "125m..70b" (catalogue order, both ends included), "125m,1b" or a single name.
  std::vector<std::string> expand(std::string_view spec, const std::string& flag) const;

 private:
  void add_hf_config(const std::filesystem::path& path, std::vector<std::string>& warnings);
  void add_model(const ModelConfig& m, std::filesystem::path unread = {});
  void add_yaml_unguarded(const std::string& text, const std::string& origin, std::vector<std::string>& warnings);
  const ModelConfig& read(size_t i) const;  // models_[i], its config.json read first if it is unread

  // models_[i] holds only its name while unread_[i] names the config.json it is to be read from.
  // Reading fills them in from const lookups: a catalogue is not to be shared between threads (no
  // command does; the cross-validation's threads share resolved rows, not the catalogue).
  mutable std::vector<ModelConfig> models_;
  mutable std::vector<std::filesystem::path> unread_;
};

}  // namespace tpsim
