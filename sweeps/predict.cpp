// tpsim predict: one configuration, one row.
#include <iostream>
#include <memory>

#include "io/error.hpp"
#include "model/simulator.hpp"
#include "sweeps/args.hpp"
#include "sweeps/commands.hpp"
#include "sweeps/context.hpp"
#include "sweeps/report.hpp"

namespace tpsim {
namespace {

struct PredictOptions {
  CommonOptions common;
  std::string model, seq, gpus, device = "h100_80gb", micro_batch, grad_accum, global_batch;
  std::string precision = "amp_bf16", mp_mode = "DEFAULT", sharding = "FULL_SHARD";
  bool ckpt = false;
};

void run_predict(const PredictOptions& o) {
  Context ctx(o.common);
  const ModelConfig& model = ctx.catalog().get(o.model);
  const DeviceSpec& device = ctx.device(o.device);
  const DeviceProfile& profile = ctx.profile(o.device);

  TrainConfig cfg;
  cfg.seq_len = parse_count("--seq", o.seq, kMaxSeqLen);
  cfg.n_gpus = parse_count("--gpus", o.gpus, kMaxGpus);
  cfg.micro_batch = parse_count("--micro-batch", o.micro_batch, kMaxBatch);
  const auto precision = parse_precision(o.precision);
  if (!precision) throw Error("--precision '" + o.precision + "': expected amp_bf16, amp_fp16, amp_fp8, bf16 or fp32");
  const auto mp = parse_mp_mode(o.mp_mode);
  if (!mp) throw Error("--mp-mode '" + o.mp_mode + "': expected DEFAULT, PURE or FULL");
  const auto sharding = parse_sharding(o.sharding);
  if (!sharding)
    throw Error("--sharding '" + o.sharding + "': expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
  cfg.precision = *precision;
  cfg.mp_mode = *mp;
  cfg.sharding = *sharding;
  cfg.activation_checkpointing = o.ckpt;
  if (!o.global_batch.empty()) {
    cfg.global_batch = parse_count("--global-batch", o.global_batch, kMaxBatch);
    if (cfg.global_batch % cfg.n_gpus != 0)
      throw Error("--global-batch " + o.global_batch + ": not a multiple of --gpus " + o.gpus);
    if (cfg.micro_batch > cfg.per_device_batch())
      throw Error("--micro-batch " + o.micro_batch + ": larger than the per-device batch " +
                  std::to_string(cfg.per_device_batch()) + " (--global-batch / --gpus)");
  } else {
    const int64_t accum = o.grad_accum.empty() ? 1 : parse_count("--grad-accum", o.grad_accum, kMaxBatch);
    const double global = static_cast<double>(cfg.micro_batch) * accum * cfg.n_gpus;
    if (global > static_cast<double>(kMaxBatch))
      throw Error("--micro-batch x --grad-accum x --gpus = " + std::to_string(global) + " sequences is too large");
    cfg.global_batch = cfg.micro_batch * accum * cfg.n_gpus;
  }
  if (const std::string why = check_config(model, device, profile.params, cfg); !why.empty()) throw Error(why);

  const Prediction p = predict(model, device, profile.params, cfg);
  OutputTable t;
  t.title = "prediction";
  t.columns = prediction_columns();
  t.add_row(prediction_row(model.name, device.id, cfg, p, prediction_interval(profile)));
  emit(render({t}, ctx.format()), ctx.output());
  if (!p.fits())
    std::cerr << "tpsim: does not fit: predicted peak " << p.memory.peak_bytes / (1 << 30) << " GiB of "
              << p.capacity_bytes / (1 << 30) << " GiB on " << device.id << "\n";
}

}  // namespace

void register_predict(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  CLI::App* cmd = app.add_subcommand("predict", "predict throughput, MFU, HFU and memory of one configuration");
  cmd->add_option("--model", o->model, "model name (catalogue or --models file)")->required();
  cmd->add_option("--seq", o->seq, "sequence length")->required();
  cmd->add_option("--gpus", o->gpus, "number of GPUs")->required();
  cmd->add_option("--device", o->device, "device id (llm-foundry GPU column)")->default_val("h100_80gb");
  cmd->add_option("--micro-batch", o->micro_batch, "sequences per micro-batch per GPU")->required();
  auto* accum = cmd->add_option("--grad-accum", o->grad_accum, "micro-batches per step (default 1)");
  auto* global = cmd->add_option("--global-batch", o->global_batch, "sequences per step over all GPUs");
  accum->excludes(global);
  cmd->add_option("--precision", o->precision, "amp_bf16, amp_fp16, amp_fp8, bf16 or fp32")->default_val("amp_bf16");
  cmd->add_option("--mp-mode", o->mp_mode, "FSDP mixed precision: DEFAULT, PURE or FULL")->default_val("DEFAULT");
  cmd->add_option("--sharding", o->sharding, "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD")
      ->default_val("FULL_SHARD");
  cmd->add_flag("--ckpt,!--no-ckpt", o->ckpt, "activation checkpointing (default off)");
  add_common_options(cmd, o->common);
  cmd->callback([o] { run_predict(*o); });
}

}  // namespace tpsim
