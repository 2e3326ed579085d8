// Hugging Face config.json files (the `config.json` beside a model's weights on the Hub), read
// strictly into a ModelConfig, and the places llm-foundry's hf_causal_lm finds them.
//
// Per model_type (llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, dbrx, olmo, olmo2,
// gpt2, opt, gpt_neox, gpt_neo, mpt) every key is one of: modelled (mapped to a ModelConfig field,
// with transformers' default when absent: the configuration_*.py of each model); known and
// irrelevant to speed and memory (token ids, dropout, initialisation, norm epsilons, RoPE's base
// and scaling, ...), returned in `ignored` for the caller to list once; or an Error naming the
// key, the file and line, and the nearest known key. An architecture the ModelConfig fields cannot
// describe exactly (GPT-Neo's alternating local attention, OLMo's weight-free LayerNorm, OPT's
// post-norm, Qwen-MoE's dense layers among the sparse ones, ...) is an Error naming the key.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/architecture.hpp"

namespace tpsim {

struct HfConfig {
  ModelConfig model;  // no name: the caller names it (after its file or folder)
  std::string model_type;
  std::optional<int64_t> max_seq_len;  // model_type mpt: its max_seq_len
  std::vector<std::string> ignored;    // known keys irrelevant to the cost ("rope_theta", "attn_config.clip_qkv")
  std::vector<std::string> notes;      // modelled differently than written, one line each
};

// One entry of llm-foundry's hf_causal_lm `config_overrides`, applied to the config.json's keys
// as llm-foundry applies it (hf_base.py, set_config_overrides): the key must be one the
// model_type's config has, a nested map updates the nested keys; `where` names it in messages.
struct HfOverride {
  std::string key;
  nlohmann::json value;
  std::string where;  // "train.yaml:12"
};

// `origin` names the text in messages ("models/llama/config.json").
HfConfig read_hf_config(const std::string& text, const std::string& origin,
                        const std::vector<HfOverride>& overrides = {});
// A config.json, or a folder holding one.
HfConfig read_hf_config_file(const std::filesystem::path& path, const std::vector<HfOverride>& overrides = {});

// True when `spec` names a config.json file (a path ending in .json) or a folder holding one.
bool is_hf_config_path(const std::string& spec);
// The config.json a path names: the file itself, or `config.json` inside a folder.
std::filesystem::path hf_config_file(const std::filesystem::path& path);
// A model's catalogue name from its path: the folder's name for a folder or a file named
// config.json, else the file's stem ("models/llama-3-8b/config.json" -> "llama-3-8b").
std::string hf_model_name(const std::filesystem::path& path);

// llm-foundry's pretrained_model_name_or_path, resolved without the network: a local folder (or
// config.json), then the user's Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub: models--ORG--NAME/snapshots/*/config.json, the newest snapshot), then
// the configs shipped in data/models/hf/ by repo id (data/models/hf/index.json). Error naming the
// three places looked when none has it.
std::filesystem::path resolve_pretrained_config(const std::string& name_or_path);

}  // namespace tpsim
