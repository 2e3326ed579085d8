// llm-foundry training YAMLs as users keep them: the model block, sequence length, batch sizes,
// precision and FSDP settings, with ${...} references resolved as llm-foundry's YAMLs use them
// (OmegaConf interpolation: ${max_seq_len}, ${model.d_model}, ${oc.env:VAR} and
// ${oc.env:VAR,default}; a value that is only a reference keeps the referenced type).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "model/architecture.hpp"
#include "model/training.hpp"

namespace tpsim {

struct TrainYaml {
  std::string origin;
  ModelConfig model;                    // from `model:`; name from the file name
  std::optional<int64_t> seq_len;       // max_seq_len
  std::optional<int64_t> global_batch;  // global_train_batch_size (sequences)
  std::optional<int64_t> micro_batch;   // device_train_microbatch_size, unless "auto"
  bool micro_batch_auto = false;        // device_train_microbatch_size: auto
  std::optional<Precision> precision;
  std::optional<MpMode> mp_mode;
  // fsdp_config.mixed_precision written as a map (param_dtype, reduce_dtype, buffer_dtype; Composer's
  // get_mixed_precision): each dtype as written, "" when not given (FSDP then keeps fp32). Resolved
  // into mp_mode once the precision is known.
  struct MixedPrecisionMap {
    std::string param, reduce, buffer, where;
  };
  std::optional<MixedPrecisionMap> mixed_precision_map;
  std::optional<Sharding> sharding;
  std::optional<Checkpointing> checkpointing;  // fsdp_config.activation_checkpointing: true is kFull
  Lora lora;  // model.peft_config (hf_causal_lm): LoRA's rank, alpha, dropout and targets; rank 0: none
  std::vector<std::string> ignored;  // keys the simulator does not model ("optimizer", "model.attn_config.alibi", ...)
  std::vector<std::string> notes;    // modelled differently than written (e.g. attn_impl)
  // fsdp_config.data_parallel_shard_degree / data_parallel_replicate_degree (HSDP's device mesh): -1
  // is the rest of the GPUs; unset when absent or null (Composer's defaults).
  std::optional<int64_t> shard_degree;
  std::optional<int64_t> replicate_degree;
  // An fsdp_config (not null) is written. Without one llm-foundry runs plain PyTorch DDP
  // (Sharding::kDdp), which the run resolves (cli/run_settings) and notes.
  bool has_fsdp_config = false;
  // compile_config given and not null: torch.compile of the model (Layout::torch_compile).
  bool torch_compile = false;
};

TrainYaml parse_train_yaml(const std::string& text, const std::string& origin);
TrainYaml read_train_yaml(const std::filesystem::path& path);

}  // namespace tpsim
