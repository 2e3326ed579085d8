// What a run is asked to be, from an llm-foundry training YAML (--config) and flags; flags win.
// Shared by predict and plan.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/train_yaml.hpp"
#include "model/search.hpp"
#include "model/training.hpp"
#include "cli/context.hpp"

namespace tpsim {

// --lora-rank, --lora-targets, --lora-alpha, --lora-dropout (model/lora.hpp): as given; unset: not given.
struct LoraFlags {
  std::optional<std::string> rank, targets, alpha, dropout;
};
void add_lora_flags(CLI::App* cmd, LoraFlags& f);
// `base` (a --config's peft_config, or none) with the flags applied, each checked (one line naming the
// flag); --lora-rank 0 trains every weight. A rank without targets is the rulebook's refusal.
Lora resolve_lora(const LoraFlags& f, Lora base);
// How a note names a run's LoRA: "LoRA rank 16 on linear_qkv (alpha 32)".
std::string lora_phrase(const Lora& l);

struct RunFlags {
  std::string config;  // llm-foundry training YAML
  std::string model, seq, micro_batch, global_batch, grad_accum, precision, mp_mode, sharding;
  std::optional<std::string> ckpt;  // --ckpt's value ("full" when bare, "none" from --no-ckpt); unset: not given
  bool ckpt_any = false;            // the command searches: --ckpt also takes any
  LoraFlags lora;
};

// --config, --model, --seq, --micro-batch (a number or auto), --precision, --mp-mode, --sharding,
// --ckpt[=KIND]/--no-ckpt (with `ckpt_any`, also --ckpt any), the LoRA flags. Commands add their own
// batch flags.
void add_run_flags(CLI::App* cmd, RunFlags& f, bool with_sharding_and_ckpt, bool ckpt_any = false);

// --ckpt [none|selective|full] (a bare --ckpt is full, as it was when it was a switch) and --no-ckpt
// (none), into `value`, the last given winning; with `any`, --ckpt any too (every kind, for the
// commands that search). The value is checked by parse_ckpt_flag.
void add_ckpt_flags(CLI::App* cmd, std::optional<std::string>& value, bool any);

// The kinds --ckpt's value names: one, or with `any_allowed` every kind for any (none, selective,
// full: the order the search breaks ties in). Else an error naming the flag and its values.
std::vector<Checkpointing> parse_ckpt_flag(const std::string& text, bool any_allowed);

// How text (plan's choices, sweep's heat-map notes, replay's banner) names a kind: "no
// checkpointing", "selective checkpointing", "checkpointing" (full: what llm-foundry's
// activation_checkpointing does, and what these texts said before selective existed).
std::string checkpointing_phrase(Checkpointing c);
// ... of a layout: under selective recompute of modules other than the default, "selective recompute of
// moe_act, layernorm".
std::string checkpointing_phrase(const Layout& l);

// --framework, the degrees (--tp, --pp, --vp, --cp, --ep, --etp), --sp/--no-sp,
// --dist-opt/--no-dist-opt, the switches (model/layout.hpp kSwitchAxes), the HSDP degrees
// (--shard-degree, --replicate-degree), torchtitan's --selective-ac-option, megatron's uneven
// pipeline split (--first-stage-layers N, --last-stage-layers N: Megatron-Core's
// --decoder-first/last-pipeline-num-layers) and --attention flash|unfused: each parsed into `r` as
// it is read, a bad value one line naming its flag.
void add_layout_flags(CLI::App* cmd, LayoutRequest& r);

// The flags checked together (model/rules.hpp first_broken_request_rule: what each framework runs,
// from the flags alone), each error one line naming a flag.
void check_layout_request(const LayoutRequest& r);

// `model` with the attention --attention asks for, under `r.framework`: unfused is llm-foundry's
// PyTorch attention (attn_impl: torch; ModelConfig::torch_attention) under composer and Megatron's
// core attention (use_megatron_core_attention: its fused softmax, attention dropout 0.1) under
// megatron; flash is the fused kernel. `note` gets what the run costs, when the flag changes it.
ModelConfig attention_as_asked(const ModelConfig& model, const LayoutRequest& r, std::string* note = nullptr);

struct RunSettings;
// The same, then the HSDP degrees of --config's fsdp_config (data_parallel_shard_degree,
// data_parallel_replicate_degree) where --shard-degree and --replicate-degree are not given: each
// is -1 (the rest of the GPUs) or a GPU count, and only composer has them (an error otherwise).
void check_layout_request(LayoutRequest& r, const RunSettings& run);

// A sharding flag (`flag` given) under a framework other than composer: an error, since their data
// parallelism is not FSDP's (megatron: DDP, and --dist-opt shards the optimizer state).
void check_no_sharding_flag(const LayoutRequest& r, const std::string& flag, bool given);

struct RunSettings {
  std::optional<ModelConfig> model;
  std::optional<int64_t> seq_len;
  std::optional<int64_t> micro_batch;
  bool micro_batch_auto = false;
  std::optional<int64_t> global_batch;  // sequences
  std::optional<int64_t> grad_accum;
  Precision precision = Precision::kAmpBf16;
  MpMode mp_mode = MpMode::kDefault;
  std::optional<Sharding> sharding;
  std::optional<Checkpointing> checkpointing;             // the YAML's, or the one kind --ckpt names
  std::optional<int64_t> shard_degree, replicate_degree;  // the YAML's fsdp_config HSDP degrees
  std::vector<Checkpointing> ckpt_asked;                  // what --ckpt names (every kind for any); empty: not given
  Lora lora;                                              // the YAML's peft_config, then the LoRA flags
  bool torch_compile = false;                             // the YAML's compile_config
  std::string config_origin;                              // the YAML, if any
  // What the YAML has that the simulator ignores or models differently: printed by print_notes once
  // the command's input is known to be good, so that bad input stays one line on stderr.
  std::vector<std::string> notes;
};

// Reads --config (collecting the keys the simulator ignores as notes) and applies the flags.
RunSettings resolve_run(const Context& ctx, const RunFlags& f);

// The notes, on stderr, each once.
void print_notes(const RunSettings& s);

// --threads N (validate --cv, calibrate table): the held-out folds fitted at once, each on a
// thread of its own; unset, one per core. The errors do not depend on it.
void add_fold_threads_flag(CLI::App* cmd, std::string& threads);
int fold_threads(const std::string& flag);  // checked: a one-line error naming --threads

// --inter-node-gbps N (per node, per direction) and --gpus-per-node N: the cluster's network, over
// the device files' (every command that predicts: predict, sweep, plan, validate, calibrate table).
struct NetworkFlags {
  std::string inter_node_gbps, gpus_per_node;
};
void add_network_flags(CLI::App* cmd, NetworkFlags& f);
// The flags checked (positive numbers; one-line errors naming the flag), then set on every device
// the context loads.
ClusterNetwork resolve_network(const NetworkFlags& f);
void apply_network_flags(Context& ctx, const NetworkFlags& f);

}  // namespace tpsim
