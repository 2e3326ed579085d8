#include "cli/run_settings.hpp"

#include <iostream>

#include "io/error.hpp"
#include "io/hf_config.hpp"
#include "cli/args.hpp"

namespace tpsim {

void add_ckpt_flags(CLI::App* cmd, std::optional<std::string>& value, bool any) {
  // An option with an optional value: CLI11 hands a bare --ckpt over as "". The last one given wins
  // (TakeLast), and --no-ckpt, declared after, wins over any --ckpt as it did between the switches.
  cmd->add_option_function<std::string>(
         "--ckpt", [&value](const std::string& v) { value = v.empty() ? "full" : v; },
         any ? "activation checkpointing: none, selective (the attention core is recomputed), full (each block's "
               "forward is; a bare --ckpt), or any (search all three)"
             : "activation checkpointing: none, selective (the attention core is recomputed) or full (each block's "
               "forward is; a bare --ckpt)")
      ->expected(0, 1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->type_name(any ? "[none|selective|full|any]" : "[none|selective|full]");
  cmd->add_flag_function(
      "--no-ckpt", [&value](int64_t) { value = "none"; }, "activation checkpointing off (--ckpt none)");
}

std::vector<Checkpointing> parse_ckpt_flag(const std::string& text, bool any_allowed) {
  if (const auto c = parse_checkpointing(text)) return {*c};
  if (any_allowed && text == "any") return {kAllCheckpointings.begin(), kAllCheckpointings.end()};
  throw Error("--ckpt '" + text + "': expected none, selective or full" + (any_allowed ? " (or any)" : ""));
}

std::string checkpointing_phrase(Checkpointing c) {
  switch (c) {
    case Checkpointing::kNone: return "no checkpointing";
    case Checkpointing::kSelective: return "selective checkpointing";
    case Checkpointing::kFull: return "checkpointing";
  }
  return {};
}

void add_run_flags(CLI::App* cmd, RunFlags& f, bool with_sharding_and_ckpt, bool ckpt_any) {
  cmd->add_option("--config", f.config, "llm-foundry training YAML (flags override it)");
  cmd->add_option("--model", f.model, "model: a catalogue or --models name, or a Hugging Face config.json (or its folder); default: the --config's model");
  cmd->add_option("--seq", f.seq, "sequence length; default: the --config's max_seq_len");
  cmd->add_option("--precision", f.precision, "amp_bf16, amp_fp16, amp_fp8, bf16 or fp32 (default amp_bf16)");
  cmd->add_option("--mp-mode", f.mp_mode, "FSDP mixed precision: DEFAULT, PURE or FULL (default DEFAULT)");
  if (with_sharding_and_ckpt) {
    cmd->add_option("--micro-batch", f.micro_batch, "sequences per micro-batch per GPU, or auto (the largest that fits)");
    cmd->add_option("--sharding", f.sharding, "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD (default FULL_SHARD)");
    f.ckpt_any = ckpt_any;
    add_ckpt_flags(cmd, f.ckpt, ckpt_any);
  }
}

namespace {

// --model: a catalogue name (shipped or from --models), else a Hugging Face config.json or the
// folder holding one, named after it; its ignored keys and notes join the run's notes.
ModelConfig resolve_model(const Context& ctx, const std::string& spec, std::vector<std::string>& notes) {
  if (const ModelConfig* m = ctx.catalog().find(spec)) return *m;
  if (!is_hf_config_path(spec)) return ctx.catalog().get(spec);  // an Error naming the known models
  const HfConfig h = read_hf_config_file(spec);
  const std::string file = hf_config_file(spec).string();
  if (!h.ignored.empty()) {
    std::string list;
    for (const auto& k : h.ignored) list += (list.empty() ? "" : ", ") + k;
    notes.push_back(file + ": not modelled, ignored: " + list);
  }
  for (const auto& n : h.notes) notes.push_back(file + ": " + n);
  ModelConfig m = h.model;
  m.name = hf_model_name(spec);
  return m;
}

}  // namespace

RunSettings resolve_run(const Context& ctx, const RunFlags& f) {
  RunSettings s;
  if (!f.config.empty()) {
    TrainYaml y = read_train_yaml(f.config);
    s.config_origin = y.origin;
    s.model = y.model;
    s.seq_len = y.seq_len;
    s.micro_batch = y.micro_batch;
    s.micro_batch_auto = y.micro_batch_auto;
    s.global_batch = y.global_batch;
    if (y.precision) s.precision = *y.precision;
    if (y.mp_mode) s.mp_mode = *y.mp_mode;
    s.sharding = y.sharding;
    s.checkpointing = y.checkpointing;
    if (!y.ignored.empty()) {
      std::string list;
      for (const auto& k : y.ignored) list += (list.empty() ? "" : ", ") + k;
      s.notes.push_back(y.origin + ": not modelled, ignored: " + list);
    }
    for (const auto& n : y.notes) s.notes.push_back(y.origin + ": " + n);
  }
  if (!f.model.empty()) s.model = resolve_model(ctx, f.model, s.notes);
  if (!f.seq.empty()) s.seq_len = parse_count("--seq", f.seq, kMaxSeqLen);
  if (!f.micro_batch.empty()) {
    if (f.micro_batch == "auto") {
      s.micro_batch_auto = true;
      s.micro_batch.reset();
    } else {
      s.micro_batch = parse_count("--micro-batch", f.micro_batch, kMaxBatch);
      s.micro_batch_auto = false;
    }
  }
  if (!f.precision.empty()) s.precision = parse_precision_flag("--precision", f.precision);
  if (!f.mp_mode.empty()) s.mp_mode = parse_mp_mode_flag("--mp-mode", f.mp_mode);
  if (!f.sharding.empty()) s.sharding = parse_sharding_flag("--sharding", f.sharding);
  if (f.ckpt) {
    s.ckpt_asked = parse_ckpt_flag(*f.ckpt, f.ckpt_any);
    if (s.ckpt_asked.size() == 1) s.checkpointing = s.ckpt_asked.front();
  }
  if (!s.model) throw Error("--model: no model given (name one, or give --config with a model: block)");
  if (!s.seq_len) throw Error("--seq: no sequence length given (or max_seq_len in --config)");
  return s;
}

void print_notes(const RunSettings& s) {
  for (const auto& n : s.notes) std::cerr << "tpsim: note: " << n << "\n";
}

}  // namespace tpsim
