// tpsim predict: one configuration, one row.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "io/error.hpp"
#include "io/text_format.hpp"
#include "model/framework.hpp"
#include "model/metrics.hpp"
#include "model/ops.hpp"
#include "model/plan.hpp"
#include "model/search.hpp"
#include "model/units.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/report.hpp"
#include "cli/run_settings.hpp"

namespace tpsim {
namespace {

// What fills the memory of a configuration that does not fit, so that the user sees what to change
// (sharding for the state, checkpointing or a smaller micro-batch for the activations).
std::string does_not_fit_line(const Prediction& p, const std::string& device) {
  const MemoryBreakdown& m = p.memory;
  const auto gib = [](double bytes) { return fixed(bytes / kGiB, 1); };
  std::string line = "tpsim: does not fit: predicted peak " + gib(m.peak_bytes) + " GiB of " + gib(p.capacity_bytes) +
                     " GiB on " + device + ": parameters, gradients and optimizer state " + gib(m.sharded_state_bytes) +
                     ", activations " + gib(m.activation_bytes);
  if (m.gathered_params_bytes > 0) line += ", parameters in the compute precision " + gib(m.gathered_params_bytes);
  line += ", backward buffers " + gib(m.transient_bytes);
  if (m.live_bytes > 0)
    line += " (x " + fixed((m.peak_bytes - m.reserve_bytes) / m.live_bytes, 2) + " for fragmentation, plus " +
            gib(m.reserve_bytes) + " reserved)";
  return line + "\n";
}

struct PredictOptions {
  CommonOptions common;
  RunFlags run;
  LayoutRequest layout;
  std::string gpus, device = "h100_80gb";
  NetworkFlags network;
};

// What divides the global batch: the GPU count, or under model parallelism the data-parallel
// replicas (--gpus / (tp x pp x cp)).
std::string replicas_phrase(const TrainConfig& cfg) {
  if (cfg.layout.model_parallel() == 1) return "--gpus " + std::to_string(cfg.n_gpus);
  return "data parallel " + std::to_string(cfg.data_parallel()) + " (--gpus / (tp x pp x cp))";
}

// Where a batch setting came from, for the errors: the flag, or the key of the --config YAML.
std::string origin_of(const RunSettings& run, bool flag_given, const std::string& flag, const char* key,
                      int64_t value) {
  return flag_given ? flag + " " + std::to_string(value)
                    : std::string(key) + " " + std::to_string(value) + " in " + run.config_origin;
}

std::string micro_batch_missing(const RunSettings& run, const char* what) {
  return std::string("--micro-batch: not given (") + what + ")" +
         (run.config_origin.empty() ? "" : ", nor device_train_microbatch_size in " + run.config_origin);
}

// --micro-batch auto: under composer what Composer runs (the per-device batch, halved on each
// out-of-memory), under megatron and torchtitan the largest that fits.
void set_auto_micro_batch(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                          TrainConfig& cfg, RunSettings& run) {
  const std::string none =
      "--micro-batch auto: not even a micro-batch of 1 fits on " + device.id + " with these settings";
  if (!framework_def(cfg.layout.framework).batching.auto_micro_batch_halves) {
    cfg.micro_batch = largest_fitting_micro_batch(model, device, params, cfg);
    if (cfg.micro_batch == 0) throw Error(none);
    run.notes.push_back("micro-batch auto: " + std::to_string(cfg.micro_batch) + ", the largest that fits");
    return;
  }
  const std::vector<int64_t> tried = composer_auto_micro_batches(model, device, params, cfg);
  if (tried.empty()) throw Error(none);
  cfg.micro_batch = tried.back();
  std::string path;
  for (const int64_t m : tried) path += (path.empty() ? "" : " -> ") + std::to_string(m);
  const int64_t largest = largest_fitting_micro_batch(model, device, params, cfg);
  run.notes.push_back("micro-batch auto: " + std::to_string(cfg.micro_batch) +
                      (tried.size() == 1 ? ", the per-device batch (it fits)"
                                         : ", where Composer's halving on out-of-memory stops (" + path + ")") +
                      (largest == cfg.micro_batch ? ""
                                                  : "; the largest that fits is " + std::to_string(largest) +
                                                        ", which Composer does not try"));
}

// A global batch given (flag or YAML): the micro-batch is given, or auto (the largest that fits).
void set_batch_from_global(const PredictOptions& o, RunSettings& run, const ModelConfig& model,
                           const DeviceSpec& device, const CostParams& params, TrainConfig& cfg) {
  const bool flag = !o.run.global_batch.empty();
  cfg.global_batch = flag ? parse_count("--global-batch", o.run.global_batch, kMaxBatch) : *run.global_batch;
  if (cfg.global_batch % cfg.data_parallel() != 0)
    throw Error(origin_of(run, flag, "--global-batch", "global_train_batch_size", cfg.global_batch) +
                ": not a multiple of " + replicas_phrase(cfg) +
                (framework_def(cfg.layout.framework).batching.batch_per_gpu
                     ? " (llm-foundry's calculate_batch_size_info refuses it too)"
                     : ""));
  if (run.micro_batch_auto) {
    set_auto_micro_batch(model, device, params, cfg, run);
    return;
  }
  if (!run.micro_batch) throw Error(micro_batch_missing(run, "a number, or auto"));
  cfg.micro_batch = *run.micro_batch;
  // llm-foundry lowers a micro-batch larger than the per-device batch to it, with a warning
  // (calculate_batch_size_info); Megatron-LM and torchtitan refuse it.
  if (cfg.micro_batch > cfg.per_device_batch() && !framework_def(cfg.layout.framework).batching.whole_micro_batches) {
    run.notes.push_back(
        origin_of(run, !o.run.micro_batch.empty(), "--micro-batch", "device_train_microbatch_size", cfg.micro_batch) +
        " is more than the per-device batch " + std::to_string(cfg.per_device_batch()) +
        " (global batch / --gpus): lowered to it, as llm-foundry does");
    cfg.micro_batch = cfg.per_device_batch();
  }
  if (cfg.micro_batch > cfg.per_device_batch())
    throw Error(
        origin_of(run, !o.run.micro_batch.empty(), "--micro-batch", "device_train_microbatch_size", cfg.micro_batch) +
        ": larger than the per-device batch " + std::to_string(cfg.per_device_batch()) + " (global batch / " +
        (cfg.layout.model_parallel() == 1 ? std::string("--gpus") : "data parallel") + ")");
}

// No global batch: micro-batch x gradient accumulation x GPUs.
void set_batch_from_accumulation(const PredictOptions& o, const RunSettings& run, TrainConfig& cfg) {
  if (run.micro_batch_auto)
    throw Error(std::string(run.config_origin.empty() ? "--micro-batch auto"
                                                      : "micro-batch auto (--micro-batch, or "
                                                        "device_train_microbatch_size's default)") +
                " needs a global batch (--global-batch, or global_train_batch_size in " +
                (run.config_origin.empty() ? std::string("--config") : run.config_origin) + ")");
  if (!run.micro_batch) throw Error(micro_batch_missing(run, "a number, or auto with a global batch"));
  cfg.micro_batch = *run.micro_batch;
  const int64_t accum = o.run.grad_accum.empty() ? 1 : parse_count("--grad-accum", o.run.grad_accum, kMaxBatch);
  const int64_t replicas = cfg.data_parallel();  // --gpus without model parallelism
  const double global =
      static_cast<double>(cfg.micro_batch) * static_cast<double>(accum) * static_cast<double>(replicas);
  if (global > static_cast<double>(kMaxBatch))
    throw Error("--micro-batch x --grad-accum x " + std::string(replicas == cfg.n_gpus ? "--gpus" : "data parallel") +
                " = " + std::to_string(global) + " sequences is too large");
  cfg.global_batch = cfg.micro_batch * accum * replicas;
}

// The configuration the flags and --config describe, checked: its layout (check_layout: the degrees
// and GPU count before the batch, which divides by the replicas, then the batch) and check_config.
TrainConfig predict_config(const PredictOptions& o, RunSettings& run, const LayoutRequest& asked,
                           const DeviceSpec& device, const CostParams& params) {
  const ModelConfig& model = *run.model;
  TrainConfig cfg;
  cfg.seq_len = *run.seq_len;
  cfg.n_gpus = parse_count("--gpus", o.gpus, kMaxGpus);
  cfg.precision = run.precision;
  cfg.mp_mode = run.mp_mode;
  cfg.lora = run.lora;
  // Megatron's data parallelism replicates parameters and gradients, torchtitan's FSDP2 shards them
  // (framework_sharding).
  cfg.layout = fixed_layout(asked, run.sharding);
  cfg.layout.checkpointing = run.checkpointing.value_or(Checkpointing::kNone);
  if (const std::string why = check_layout(model, cfg); !why.empty()) throw Error(why);  // batch 0: degrees only
  if (!o.run.global_batch.empty() || run.global_batch) set_batch_from_global(o, run, model, device, params, cfg);
  else set_batch_from_accumulation(o, run, cfg);
  if (const std::string why = check_layout(model, cfg); !why.empty()) throw Error(why);
  if (const std::string why = check_config(model, device, params, cfg); !why.empty()) throw Error(why);
  return cfg;
}

void run_predict(const PredictOptions& o) {
  Context ctx(o.common);
  apply_network_flags(ctx, o.network);
  RunSettings run = resolve_run(ctx, o.run);
  LayoutRequest asked = o.layout;
  check_layout_request(asked, run);
  check_no_sharding_flag(asked, "--sharding", !o.run.sharding.empty());
  std::string attention_note;
  run.model = attention_as_asked(*run.model, asked, &attention_note);
  if (!attention_note.empty()) run.notes.push_back(attention_note);
  const ModelConfig& model = *run.model;
  const DeviceSpec& device = ctx.device(o.device);
  ctx.check_profiles_used({o.device});
  const DeviceProfile& profile = ctx.profile(o.device);
  const TrainConfig cfg = predict_config(o, run, asked, device, profile.params);

  print_notes(run);
  const Prediction p = predict(model, device, profile.params, cfg);
  OutputTable t;
  t.title = "prediction";
  t.columns = prediction_columns(asked.framework_given);
  const OptionalColumns optional{.megatron_fsdp = owns_megatron_fsdp(asked.framework),
                                 .lora = cfg.lora.active(),
                                 .recompute_modules = asked.recompute_modules.has_value(),
                                 .mtp = asked.mtp_layers.has_value(),
                                 .moe_dispatcher = asked.moe_dispatcher.has_value(),
                                 .cuda_graphs = asked.cuda_graphs.has_value(),
                                 .bf16_layers = asked.bf16_layers_start || asked.bf16_layers_end};
  add_optional_columns(optional, t.columns);
  std::vector<Cell> row = prediction_row(model.name, device.id, cfg, p, interval_for(model, profile, cfg));
  if (asked.framework_given) add_layout_cells(cfg, row);
  add_optional_cells(optional, cfg, row);
  t.add_row(std::move(row));
  std::cerr << no_interval_note(model, cfg.layout.framework) << unaligned_gemm_note(model, cfg.layout.framework);
  // Windowed and chunked layers: the step is costed with them; MFU counts every layer's full attention.
  const auto restricted = [&](int64_t span, bool LayerKind::*kind, const char* how) {
    if (span <= 0 || span >= cfg.seq_len) return;
    const int64_t layers = model.uniform() ? model.n_layers
                                           : std::count_if(model.layers.begin(), model.layers.end(),
                                                           [&](const LayerKind& k) { return k.*kind; });
    if (layers == 0) return;
    std::cerr << "tpsim: note: MFU and HFU count attention over all " << cfg.seq_len << " tokens, as llm-foundry's "
              << "flops_per_batch does; " << model.name << " attends " << how << span
              << (layers < model.n_layers
                      ? " in " + std::to_string(layers) + " of its " + std::to_string(model.n_layers) + " layers"
                      : std::string())
              << " (the step time is costed with it)\n";
  };
  restricted(model.sliding_window, &LayerKind::sliding, "within ");
  restricted(model.attention_chunk, &LayerKind::chunked, "within chunks of ");
  // What Megatron-LM's log and Megatron-Bridge's summary print as model TFLOP/s, by their own count.
  if (cfg.layout.framework == Framework::kMegatron && p.fits()) {
    const double per_seq = megatron_flops_per_sequence(
        model, cfg.seq_len, megatron_padded_vocab(model.vocab_size, cfg.layout.tensor), cfg.layout.mtp_layers);
    std::cerr << "tpsim: note: Megatron-LM counts " << fixed(per_seq / static_cast<double>(cfg.seq_len) / 1e9, 2)
              << " GFLOP per token for " << model.name << " (num_floating_point_operations): "
              << fixed(per_seq * p.seq_per_s / static_cast<double>(cfg.n_gpus) / 1e12, 0)
              << " model TFLOP/s per GPU at the predicted throughput, as its log would print it\n";
  }
  emit(ctx.render({t}), ctx.output());
  if (!p.fits()) std::cerr << does_not_fit_line(p, device.id);
  if (checkpointed_near_full(p)) std::cerr << "tpsim: note: " << near_full_note(p) << "\n";
  ctx.print_notes();
}

}  // namespace

void register_predict(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  CLI::App* cmd = app.add_subcommand("predict", "predict throughput, MFU, HFU and memory of one configuration");
  add_run_flags(cmd, o->run, /*with_sharding_and_ckpt=*/true);
  cmd->add_option("--gpus", o->gpus, "number of GPUs")->required();
  cmd->add_option("--device", o->device, "device id (llm-foundry GPU column)")
      ->default_val("h100_80gb")
      ->transform(lower_case_ids());
  auto* accum = cmd->add_option("--grad-accum", o->run.grad_accum, "micro-batches per step (default 1)");
  auto* global = cmd->add_option("--global-batch", o->run.global_batch, "sequences per step over all GPUs");
  accum->excludes(global);
  add_layout_flags(cmd, o->layout);
  add_network_flags(cmd, o->network);
  add_common_options(cmd, o->common);
  cmd->callback([o] { run_predict(*o); });
}

}  // namespace tpsim
