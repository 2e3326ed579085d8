// tpsim sweep: for every (device, model, sequence length, GPU count), the fastest configuration
// that fits in memory, searched over micro-batch, activation checkpointing (none and full, as
// llm-foundry runs them; --ckpt KIND one kind, --ckpt any selective too) and sharding strategy
// (HYBRID_SHARD also on HSDP meshes of 2, 4, ... hosts, as plan searches it).
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "io/error.hpp"
#include "io/files.hpp"
#include "io/plots.hpp"
#include "io/progress.hpp"
#include "model/framework.hpp"
#include "model/plan.hpp"
#include "model/search.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/report.hpp"
#include "cli/run_settings.hpp"

namespace tpsim {
namespace {

struct SweepOptions {
  CommonOptions common;
  std::vector<std::string> models = {"125m..70b"};
  std::string seq = "512..65536", gpus = "8", devices = "h100_80gb";
  std::string precision = "amp_bf16", mp_mode = "DEFAULT";
  std::optional<std::string> tokens, global_batch;  // unset: not given (1Mi tokens)
  std::optional<std::string> shardings;             // unset: every strategy of the framework
  std::optional<std::string> ckpt;                  // unset: none and full, as llm-foundry can run them
  std::string plot;                                 // SVG: MFU over model size and sequence length
  LayoutRequest layout;                             // megatron: the axes given are fixed, the others searched
  NetworkFlags network;
  LoraFlags lora;
};

// The sweep asked for, checked.
struct SweepRequest;
OptionalColumns optional_of(const SweepRequest& r);

struct SweepRequest {
  std::vector<std::string> models, devices;
  std::vector<int64_t> seqs, gpus;
  double tokens = 0;         // per optimizer step (--global-batch-tokens), when no --global-batch
  int64_t global_batch = 0;  // --global-batch: sequences per step at every point
  TrainConfig base;          // precision and mp_mode
  SearchSpace space;
  bool layout_columns = false;  // --framework given
};

OptionalColumns optional_of(const SweepRequest& r) {
  return {.megatron_fsdp = owns_megatron_fsdp(r.space.asked.framework),
          .lora = r.base.lora.active(),
          .recompute_modules = r.space.asked.recompute_modules.has_value(),
          .mtp = r.space.asked.mtp_layers.has_value(),
          .moe_dispatcher = r.space.asked.moe_dispatcher.has_value(),
          .cuda_graphs = r.space.asked.cuda_graphs.has_value(),
          .bf16_layers = r.space.asked.bf16_layers_start || r.space.asked.bf16_layers_end};
}

SweepRequest check_sweep(const SweepOptions& o, Context& ctx, const std::vector<std::string>& model_specs) {
  SweepRequest r;
  r.models = ctx.select_models(model_specs, "");
  r.seqs = parse_count_list("--seq", o.seq, kMaxSeqLen);
  r.gpus = parse_count_list("--gpus", o.gpus, kMaxGpus);
  r.devices = parse_name_list("--device", o.devices);
  for (const auto& d : r.devices) ctx.device(d);  // unknown device: Error, before any work
  ctx.check_profiles_used(r.devices);
  if (o.global_batch && o.tokens) throw Error("--global-batch and --global-batch-tokens: give one of them");
  if (o.global_batch) r.global_batch = parse_count("--global-batch", *o.global_batch, kMaxBatch);
  else r.tokens = parse_tokens("--global-batch-tokens", o.tokens.value_or("1Mi"));
  r.base.precision = parse_precision_flag("--precision", o.precision);
  r.base.mp_mode = parse_mp_mode_flag("--mp-mode", o.mp_mode);
  r.base.lora = resolve_lora(o.lora, {});
  if (o.shardings) {  // else SearchSpace's default: every strategy
    r.space.shardings.clear();
    for (const auto& s : parse_name_list("--shardings", *o.shardings))
      r.space.shardings.push_back(parse_sharding_flag("--shardings", s));
  }
  if (o.ckpt) r.space.checkpointing = parse_ckpt_flag(*o.ckpt, /*any_allowed=*/true);
  check_layout_request(o.layout);
  // Given is given, whatever its value: the full list under megatron is as foreign as one strategy.
  check_no_sharding_flag(o.layout, "--shardings", o.shardings.has_value());
  r.space.asked = o.layout;
  // Composer's HYBRID_SHARD also on 2D meshes of a few hosts, as plan searches it (model/search.hpp).
  r.space.hsdp_meshes = framework_def(o.layout.framework).sharding_strategies;
  r.layout_columns = o.layout.framework_given;
  return r;
}

// The heat map: a row per (model, GPU count, device), a column per sequence length.
HeatMap heat_map_frame(const SweepRequest& r) {
  HeatMap heat;
  heat.title = "Predicted MFU of the fastest configuration that fits";
  heat.x_label = "sequence length (tokens)";
  heat.y_label = r.gpus.size() * r.devices.size() > 1 ? "model, GPUs, device" : "model";
  heat.value_label = "MFU (%)";
  heat.empty_label = "nothing fits";  // no configuration fits in memory (or none is valid)
  for (int64_t seq : r.seqs) heat.x_ticks.push_back(std::to_string(seq));
  return heat;
}

class Sweep {
 public:
  Sweep(const SweepOptions& o, const SweepRequest& r, Context& ctx)
      : o_(o),
        r_(r),
        ctx_(ctx),
        heat_(heat_map_frame(r)),
        progress_("sweep", static_cast<int64_t>(r.devices.size() * r.models.size() * r.seqs.size() * r.gpus.size())) {
    table_.title = "sweep";
    table_.columns = prediction_columns(r.layout_columns);
    add_optional_columns(optional_of(r), table_.columns);
  }
  void run();
  const OutputTable& table() const { return table_; }
  const HeatMap& heat() const { return heat_; }
  int64_t evaluated() const { return evaluated_; }
  // The rows run with full checkpointing close to full memory (checkpointed_near_full), as
  // "13b at 4096 on 8 x h100_80gb".
  const std::vector<std::string>& near_full() const { return near_full_; }
  // The points without a row, "where: why" (the batch does not split, or no layout is valid).
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  void device(const std::string& device_id);
  void point(const std::string& device_id, const std::string& name, int64_t seq, int64_t n, size_t heat_row,
             size_t column);
  void add_row(const std::string& name, const std::string& device_id, const TrainConfig& cfg, const Prediction& p,
               const std::optional<RelativeInterval>& interval);
  // Sequences per step at `seq`: --global-batch, or the token budget in whole sequences.
  int64_t global_batch(int64_t seq) const;
  // A point with no row: its heat-map cell says why, and so does a note.
  void skip(size_t heat_row, size_t column, const std::string& where, const std::string& why);

  const SweepOptions& o_;
  const SweepRequest& r_;
  Context& ctx_;
  std::map<std::string, ModelConfig> models_;  // by name, with --attention's choice
  OutputTable table_;
  HeatMap heat_;
  Progress progress_;
  int64_t done_ = 0, evaluated_ = 0;
  std::vector<std::string> near_full_;
  std::vector<std::string> skipped_;
};

void Sweep::run() {
  for (const auto& name : r_.models) {
    std::string note;
    models_.emplace(name, attention_as_asked(ctx_.catalog().get(name), r_.space.asked, &note));
    if (!note.empty()) std::cerr << "tpsim: note: " << note << "\n";
  }
  for (const auto& device_id : r_.devices) device(device_id);
  progress_.finish();
}

void Sweep::device(const std::string& device_id) {
  const DeviceSpec& device = ctx_.device(device_id);
  const DeviceProfile& profile = ctx_.profile(device_id);
  if (const auto f = scaled_format(r_.base.precision); f && !device.supports(*f))
    throw Error("--precision " + o_.precision + ": device " + device_id + " has no " +
                std::string(kScaledFormatNames[int(*f)]) + " tensor cores");
  for (DType t : {block_gemm_dtype(r_.base.precision), other_gemm_dtype(r_.base.precision)})
    if (!device.supports(t) || !(profile.params.gemm_flops_per_s(t) > 0))
      throw Error("--precision " + o_.precision + ": device " + device_id + " has no " + std::string(to_string(t)) +
                  " matmuls");
  const bool several = r_.gpus.size() * r_.devices.size() > 1;
  for (const auto& name : r_.models) {
    // Once per model; outside Composer the interval note is the framework's, once per sweep.
    if (device_id == r_.devices.front()) {
      const ModelConfig& model = models_.at(name);
      if (framework_def(r_.space.asked.framework).profile_intervals || name == r_.models.front())
        std::cerr << no_interval_note(model, r_.space.asked.framework);
      std::cerr << unaligned_gemm_note(model, r_.space.asked.framework);
    }
    const size_t first_row = heat_.values.size();
    for (int64_t n : r_.gpus) {
      heat_.y_ticks.push_back(several ? name + ", " + std::to_string(n) + ", " + device_id : name);
      heat_.values.emplace_back(r_.seqs.size(), std::nan(""));
      heat_.notes.emplace_back(r_.seqs.size());
    }
    for (size_t si = 0; si < r_.seqs.size(); ++si)
      for (size_t gi = 0; gi < r_.gpus.size(); ++gi)
        point(device_id, name, r_.seqs[si], r_.gpus[gi], first_row + gi, si);
  }
}

// The fastest configuration of one (device, model, sequence length, GPU count): its row and cell.
void Sweep::point(const std::string& device_id, const std::string& name, int64_t seq, int64_t n, size_t heat_row,
                  size_t column) {
  progress_.update(done_++);
  const DeviceSpec& device = ctx_.device(device_id);
  const DeviceProfile& profile = ctx_.profile(device_id);
  const ModelConfig& model = models_.at(name);
  TrainConfig cfg = r_.base;
  cfg.seq_len = seq;
  cfg.n_gpus = n;
  cfg.global_batch = global_batch(seq);
  const std::string where = name + " at sequence length " + std::to_string(seq) + " on " + std::to_string(n) + " GPUs";
  // What no layout changes (the model, device and precision) is checked as before any search, on
  // plain data parallelism with a sequence per GPU: an error, not a skipped point.
  TrainConfig probe = cfg;
  probe.global_batch = n, probe.micro_batch = 1;
  if (const std::string why = check_config(model, device, profile.params, probe); !why.empty())
    throw Error(where + ": " + why);
  // The batch is the user's: a point that cannot split it as the framework needs is skipped, with
  // the reason, not run with another batch.
  if (const std::string why = batch_unsplit(model, cfg, r_.space.asked); !why.empty()) {
    skip(heat_row, column, where, why);
    return;
  }
  const SearchResult r = search(model, device, profile.params, cfg, r_.space, SearchGoal::kFastest);
  evaluated_ += r.evaluated;
  if (!r.found && !r.has_leanest) {  // every layout invalid
    skip(heat_row, column, where, r.rejections.empty() ? "no valid layout" : r.rejections.front().reason);
    return;
  }
  if (!r.found) {
    add_row(name, device_id, r.leanest, r.leanest_prediction, interval_for(model, profile, r.leanest));
    heat_.notes[heat_row][column] = "does not fit";
    return;
  }
  add_row(name, device_id, r.best, r.best_prediction, interval_for(model, profile, r.best));
  if (checkpointed_near_full(r.best_prediction))
    near_full_.push_back(name + " at " + std::to_string(seq) + " on " + std::to_string(n) + " x " + device_id);
  heat_.values[heat_row][column] = 100.0 * r.best_prediction.mfu;
  // The layout: FSDP's sharding strategy, or the model-parallel degrees.
  const std::string layout = framework_def(r.best.layout.framework).sharding_strategies ? sharding_text(r.best.layout)
                                                                                        : layout_phrase(r.best.layout);
  heat_.notes[heat_row][column] =
      "micro-batch " + std::to_string(r.best.micro_batch) +
      (r.best.layout.checkpointing != Checkpointing::kNone ? ", " + checkpointing_phrase(r.best.layout) + ", "
                                                           : std::string(", ")) +
      (layout.empty() ? "data parallel" : layout);
}

int64_t Sweep::global_batch(int64_t seq) const {
  if (r_.global_batch > 0) return r_.global_batch;
  return whole_sequences(o_.tokens ? "--global-batch-tokens " + *o_.tokens : "the default of 1Mi tokens per step",
                         r_.tokens, seq);
}

void Sweep::skip(size_t heat_row, size_t column, const std::string& where, const std::string& why) {
  heat_.notes[heat_row][column] = why;
  skipped_.push_back(where + ": " + why);
}

void Sweep::add_row(const std::string& name, const std::string& device_id, const TrainConfig& cfg, const Prediction& p,
                    const std::optional<RelativeInterval>& interval) {
  std::vector<Cell> row = prediction_row(name, device_id, cfg, p, interval);
  if (r_.layout_columns) add_layout_cells(cfg, row);
  add_optional_cells(optional_of(r_), cfg, row);
  table_.add_row(std::move(row));
}

void run_sweep(const SweepOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  // Each --models value is a models YAML file (its models join the catalogue and the sweep) or a
  // range or list of names.
  CommonOptions common = o.common;
  const std::vector<std::string> specs = take_models_file(o.models, common);
  Context ctx(common);
  apply_network_flags(ctx, o.network);
  const SweepRequest r = check_sweep(o, ctx, specs);
  Sweep sweep(o, r, ctx);
  sweep.run();
  if (!o.plot.empty()) write_file_atomic(o.plot, heat_map_svg(sweep.heat()));
  emit(ctx.render({sweep.table()}), ctx.output());
  if (!sweep.near_full().empty()) std::cerr << "tpsim: note: " << near_full_rows_note(sweep.near_full()) << "\n";
  for (const std::string& s : sweep.skipped()) std::cerr << "tpsim: note: no row for " << s << "\n";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "evaluated " << sweep.evaluated() << " configurations in " << seconds << " s\n";
  ctx.print_notes();
}

}  // namespace

void register_sweep(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  CLI::App* cmd =
      app.add_subcommand("sweep", "fastest configuration that fits, for each model, sequence length and GPU count");
  cmd->add_option("--models", o->models,
                  "model range (125m..70b, catalogue order), list (125m,1b), or a models YAML file; repeatable")
      ->default_str("125m..70b");
  cmd->add_option("--seq", o->seq, "sequence lengths: range by powers of two (512..65536) or list")
      ->default_val("512..65536");
  cmd->add_option("--gpus", o->gpus, "GPU counts: list (8,64) or range by powers of two (8..512)")->default_val("8");
  cmd->add_option("--device", o->devices, "device id(s), comma-separated")
      ->default_val("h100_80gb")
      ->transform(lower_case_ids());
  cmd->add_option("--precision", o->precision, "amp_bf16, amp_fp16, amp_fp8, bf16, fp32, mxfp8 or nvfp4")
      ->default_val("amp_bf16");
  cmd->add_option("--mp-mode", o->mp_mode, "FSDP mixed precision: DEFAULT, PURE or FULL")->default_val("DEFAULT");
  cmd->add_option("--global-batch-tokens", o->tokens,
                  "tokens per optimizer step (1Mi = 2^20, 4M = 4e6), in whole sequences, kept at every point: a point "
                  "that cannot split it has no row (a note says why)")
      ->default_str("1Mi");
  cmd->add_option("--global-batch", o->global_batch,
                  "sequences per optimizer step at every point, instead of --global-batch-tokens");
  cmd->add_option("--shardings", o->shardings,
                  "sharding strategies to search (HYBRID_SHARD also on HSDP meshes sharding over 2, 4, ... hosts; "
                  "the Sharding Strategy cell names the mesh)")
      ->default_str("FULL_SHARD,SHARD_GRAD_OP,NO_SHARD,HYBRID_SHARD");
  add_ckpt_flags(cmd, o->ckpt, /*any=*/true);
  cmd->get_option("--ckpt")->description(
      "search only this activation checkpointing: none, selective, full (a bare --ckpt); any: all three. Not given: "
      "none and full");
  cmd->get_option("--no-ckpt")->description("search only runs without activation checkpointing (--ckpt none)");
  add_layout_flags(cmd, o->layout);
  add_network_flags(cmd, o->network);
  add_lora_flags(cmd, o->lora);
  cmd->add_option("--profile", o->common.profile_files, "device profile JSON (repeatable)");
  cmd->add_option("--plot", o->plot, "also write an SVG heat map of MFU over model size and sequence length");
  add_output_options(cmd, o->common);
  cmd->callback([o] { run_sweep(*o); });
}

}  // namespace tpsim
