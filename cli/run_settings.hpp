// What a run is asked to be, from an llm-foundry training YAML (--config) and flags; flags win.
// Shared by predict and plan.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/train_yaml.hpp"
#include "model/training.hpp"
#include "cli/context.hpp"

namespace tpsim {

struct RunFlags {
  std::string config;  // llm-foundry training YAML
  std::string model, seq, micro_batch, global_batch, grad_accum, precision, mp_mode, sharding;
  std::optional<bool> ckpt;
};

// --config, --model, --seq, --micro-batch (a number or auto), --precision, --mp-mode, --sharding,
// --ckpt/--no-ckpt. Commands add their own batch flags.
void add_run_flags(CLI::App* cmd, RunFlags& f, bool with_sharding_and_ckpt);

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
  std::optional<Checkpointing> checkpointing;
  std::string config_origin;  // the YAML, if any
  // What the YAML has that the simulator ignores or models differently: printed by print_notes once
  // the command's input is known to be good, so that bad input stays one line on stderr.
  std::vector<std::string> notes;
};

// Reads --config (collecting the keys the simulator ignores as notes) and applies the flags.
RunSettings resolve_run(const Context& ctx, const RunFlags& f);

// The notes, on stderr, each once.
void print_notes(const RunSettings& s);

}  // namespace tpsim
