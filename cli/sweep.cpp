// tpsim sweep: for every (device, model, sequence length, GPU count), the fastest configuration
// that fits in memory, searched over micro-batch, activation checkpointing and sharding strategy.
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>

#include "io/error.hpp"
#include "io/files.hpp"
#include "io/plots.hpp"
#include "io/progress.hpp"
#include "model/search.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/report.hpp"

namespace tpsim {
namespace {

struct SweepOptions {
  CommonOptions common;
  std::vector<std::string> models = {"125m..70b"};
  std::string seq = "512..65536", gpus = "8", devices = "h100_80gb";
  std::string precision = "amp_bf16", mp_mode = "DEFAULT", tokens = "1Mi";
  std::string shardings = "FULL_SHARD,SHARD_GRAD_OP,NO_SHARD,HYBRID_SHARD";
  std::string plot;  // SVG: MFU over model size and sequence length
};

// Sequences per step for a token budget: the nearest multiple of the GPU count, at least one
// sequence per GPU.
int64_t global_batch_for(double tokens, int64_t seq_len, int64_t n_gpus) {
  const double per_gpu = std::round(tokens / static_cast<double>(seq_len) / static_cast<double>(n_gpus));
  return std::max<int64_t>(1, static_cast<int64_t>(std::min(per_gpu, 1e9))) * n_gpus;
}

void run_sweep(const SweepOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  // Each --models value is a models YAML file (its models join the catalogue and the sweep) or a
  // range or list of names.
  CommonOptions common = o.common;
  const std::vector<std::string> specs = take_models_file(o.models, common);
  Context ctx(common);
  const std::vector<std::string> models = ctx.select_models(specs, "");
  const std::vector<int64_t> seqs = parse_count_list("--seq", o.seq, kMaxSeqLen);
  const std::vector<int64_t> gpus = parse_count_list("--gpus", o.gpus, kMaxGpus);
  const std::vector<std::string> devices = parse_name_list("--device", o.devices);
  for (const auto& d : devices) ctx.device(d);  // unknown device: Error, before any work
  ctx.check_profiles_used(devices);
  const double tokens = parse_tokens("--global-batch-tokens", o.tokens);
  TrainConfig base;
  const auto precision = parse_precision(o.precision);
  if (!precision) throw Error("--precision '" + o.precision + "': expected amp_bf16, amp_fp16, amp_fp8, bf16 or fp32");
  const auto mp = parse_mp_mode(o.mp_mode);
  if (!mp) throw Error("--mp-mode '" + o.mp_mode + "': expected DEFAULT, PURE or FULL");
  base.precision = *precision;
  base.mp_mode = *mp;
  SearchSpace space;
  space.shardings.clear();
  for (const auto& s : parse_name_list("--shardings", o.shardings)) {
    const auto sh = parse_sharding(s);
    if (!sh) throw Error("--shardings '" + s + "': expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
    space.shardings.push_back(*sh);
  }

  OutputTable table;
  table.title = "sweep";
  table.columns = prediction_columns();
  int64_t evaluated = 0;
  // The heat map: a row per (model, GPU count, device), a column per sequence length.
  const bool several = gpus.size() * devices.size() > 1;
  HeatMap heat;
  heat.title = "Predicted MFU of the fastest configuration that fits";
  heat.x_label = "sequence length (tokens)";
  heat.y_label = several ? "model, GPUs, device" : "model";
  heat.value_label = "MFU (%)";
  for (int64_t seq : seqs) heat.x_ticks.push_back(std::to_string(seq));
  Progress progress("sweep", static_cast<int64_t>(devices.size() * models.size() * seqs.size() * gpus.size()));
  int64_t done = 0;
  for (const auto& device_id : devices) {
    const DeviceSpec& device = ctx.device(device_id);
    const DeviceProfile& profile = ctx.profile(device_id);
    for (DType t : {block_gemm_dtype(base.precision), other_gemm_dtype(base.precision)})
      if (!device.supports(t) || !(profile.params.gemm_flops_per_s(t) > 0))
        throw Error("--precision " + o.precision + ": device " + device_id + " has no " +
                    std::string(to_string(t)) + " matmuls");
    for (const auto& name : models) {
      const ModelConfig& model = ctx.catalog().get(name);
      std::vector<size_t> heat_rows;
      for (int64_t n : gpus) {
        heat_rows.push_back(heat.values.size());
        heat.y_ticks.push_back(several ? name + ", " + std::to_string(n) + ", " + device_id : name);
        heat.values.emplace_back(seqs.size(), std::nan(""));
        heat.notes.emplace_back(seqs.size());
      }
      for (size_t si = 0; si < seqs.size(); ++si) {
        const int64_t seq = seqs[si];
        for (size_t gi = 0; gi < gpus.size(); ++gi) {
          const int64_t n = gpus[gi];
          progress.update(done++);
          TrainConfig cfg = base;
          cfg.seq_len = seq;
          cfg.n_gpus = n;
          cfg.global_batch = global_batch_for(tokens, seq, n);
          cfg.micro_batch = 1;
          if (cfg.global_batch > kMaxBatch)
            throw Error("--global-batch-tokens " + o.tokens + ": " + std::to_string(cfg.global_batch) + " sequences of " +
                        std::to_string(seq) + " tokens on " + std::to_string(n) + " GPUs, more than the simulator models (" +
                        std::to_string(kMaxBatch) + ")");
          if (const std::string why = check_config(model, device, profile.params, cfg); !why.empty())
            throw Error(name + " at sequence length " + std::to_string(seq) + " on " + std::to_string(n) + " GPUs: " + why);
          const SearchResult r = search_fastest(model, device, profile.params, cfg, space);
          evaluated += r.evaluated;
          if (r.evaluated == 0) continue;
          const auto interval = prediction_interval(profile);
          if (r.found) {
            table.add_row(prediction_row(name, device_id, r.best, r.best_prediction, interval));
            heat.values[heat_rows[gi]][si] = 100.0 * r.best_prediction.mfu;
            heat.notes[heat_rows[gi]][si] = "micro-batch " + std::to_string(r.best.micro_batch) +
                                            (r.best.activation_checkpointing ? ", checkpointing, " : ", ") +
                                            std::string(to_string(r.best.sharding));
          } else {
            table.add_row(prediction_row(name, device_id, r.leanest, r.leanest_prediction, interval));
            heat.notes[heat_rows[gi]][si] = "does not fit";
          }
        }
      }
    }
  }
  progress.finish();
  if (!o.plot.empty()) write_file_atomic(o.plot, heat_map_svg(heat));
  emit(render({table}, ctx.format()), ctx.output());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "evaluated " << evaluated << " configurations in " << seconds << " s\n";
}

}  // namespace

void register_sweep(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  CLI::App* cmd = app.add_subcommand("sweep", "fastest configuration that fits, for each model, sequence length and GPU count");
  cmd->add_option("--models", o->models,
                  "model range (125m..70b, catalogue order), list (125m,1b), or a models YAML file; repeatable")
      ->default_str("125m..70b");
  cmd->add_option("--seq", o->seq, "sequence lengths: range by powers of two (512..65536) or list")
      ->default_val("512..65536");
  cmd->add_option("--gpus", o->gpus, "GPU counts: list (8,64) or range by powers of two (8..512)")->default_val("8");
  cmd->add_option("--device", o->devices, "device id(s), comma-separated")->default_val("h100_80gb");
  cmd->add_option("--precision", o->precision, "amp_bf16, amp_fp16, amp_fp8, bf16 or fp32")->default_val("amp_bf16");
  cmd->add_option("--mp-mode", o->mp_mode, "FSDP mixed precision: DEFAULT, PURE or FULL")->default_val("DEFAULT");
  cmd->add_option("--global-batch-tokens", o->tokens,
                  "tokens per optimizer step (1Mi = 2^20, 4M = 4e6); rounded to whole sequences per GPU")
      ->default_val("1Mi");
  cmd->add_option("--shardings", o->shardings, "sharding strategies to search")
      ->default_val("FULL_SHARD,SHARD_GRAD_OP,NO_SHARD,HYBRID_SHARD");
  cmd->add_option("--profile", o->common.profile_files, "device profile JSON (repeatable)");
  cmd->add_option("--plot", o->plot, "also write an SVG heat map of MFU over model size and sequence length");
  cmd->add_option("--format", o->common.format, "output format: md, csv or json")->default_val("md");
  cmd->add_option("-o,--output", o->common.output, "write the output to FILE (atomically)");
  cmd->callback([o] { run_sweep(*o); });
}

}  // namespace tpsim
