// tpsim scale: the throughput of data-parallel training of any model at N GPUs from one GPU's
// (model/scaling.hpp), and its held-out test on the scaling tables (calibrate/scale_fit.hpp).
//   tpsim scale --table FILE --cv [--plot FILE.svg]
//   tpsim scale --model NAME|--params N --cluster C|--device D --gpus LIST --throughput-1gpu X
//               [--framework F] [--batch N] [--global-batch N] [--fixed-fraction F]
//   tpsim scale --model TRANSFORMER --cluster C|--device D --seq S --micro-batch M [--precision P]
//               (the one-GPU throughput predicted by tpsim itself, model/scaling one_gpu_config)
// A prediction takes the cluster's and framework's parameters fitted on the shipped table
// data/measured/dp_scaling_csc.md (its rows of that cluster and framework), and says so.
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "calibrate/scale_fit.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/report.hpp"
#include "cli/run_settings.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/hf_config.hpp"
#include "io/output.hpp"
#include "io/scaling_io.hpp"
#include "io/scaling_plot.hpp"
#include "io/text_format.hpp"
#include "model/architecture.hpp"
#include "model/simulator.hpp"
#include "model/units.hpp"

namespace tpsim {
namespace {

struct ScaleFlags {
  CommonOptions common;
  std::string table, plot, model, cluster, device, gpus = "1,2,4,8,16", framework = "ddp";
  std::optional<std::string> params, throughput, batch, global_batch, fixed_fraction, seq, micro_batch, precision;
  bool cv = false;
};

OutputTable cv_rows(const ScalingTable& t, const ScaleInputs& in, const ScaleCv& cv) {
  OutputTable out;
  out.title = "Held-out predictions";
  out.columns = t.columns;
  const bool repeats = t.kind == "32gpu";
  if (repeats) out.columns.insert(out.columns.end(), {"Repeats", "Noise CV (%)"});
  out.columns.insert(out.columns.end(), {"1-GPU row", "Predicted", "Efficiency (%)", "Error (%)"});
  std::map<size_t, size_t> anchor;
  for (const ScaleCase& c : in.cases) anchor[c.row] = c.anchor;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const ScalingRow& r = t.rows[i];
    std::vector<Cell> row;
    for (const std::string& c : r.cells) row.push_back(Cell::str(c));
    if (repeats) {
      row.push_back(Cell::integer_value(static_cast<int64_t>(r.repeats.size())));
      row.push_back(r.repeats.size() > 1 ? Cell::num(100.0 * repeat_cv(r.repeats), 2) : Cell::empty());
    }
    row.push_back(anchor.count(i) ? Cell::str("line " + std::to_string(t.rows[anchor[i]].line)) : Cell::str("none"));
    const ScaleCvRow& p = cv.rows[i];
    const bool has = p.predicted > 0;
    row.push_back(has ? Cell::num(p.predicted, 2) : Cell::empty());
    row.push_back(has ? Cell::num(p.efficiency, 1) : Cell::empty());
    row.push_back(has ? Cell::num(p.error_pct, 2) : Cell::empty());
    out.add_row(std::move(row));
  }
  return out;
}

OutputTable cv_summary(const ScalingTable& t, const ScaleCv& cv) {
  OutputTable s;
  s.title = "Summary";
  s.columns = {"Rows predicted", "MAPE (%)", "Linear scaling MAPE (%)", "Measurement noise CV (%)"};
  double noise = 0;
  int n = 0;
  for (const ScalingRow& r : t.rows)
    if (r.repeats.size() > 1) noise += repeat_cv(r.repeats), ++n;
  s.add_row({Cell::integer_value(cv.predicted), Cell::num(cv.mape, 2), Cell::num(cv.linear_mape, 2),
             n > 0 ? Cell::num(100.0 * noise / n, 2) : Cell::str("no repeats")});
  return s;
}

OutputTable fit_table(const ScaleFit& fit, const std::string& origin) {
  OutputTable p;
  p.title = "Parameters fitted on every row";
  p.columns = {"Parameter", "Value", "Std dev", "Unit", "Provenance"};
  for (const FittedParameter& f : fit.report) {
    const std::string prov = !f.determined ? "default (no row depends on it)"
                                           : "fitted on " + origin + " (" + std::to_string(fit.residuals) + " rows)" +
                                                 (f.at_bound ? ", at its bound" : "");
    p.add_row({Cell::str(std::string(f.param->name)), Cell::num(f.value, 4),
               f.stddev >= 0 ? Cell::num(f.stddev, 4) : Cell::empty(), Cell::str(std::string(to_string(f.param->unit))),
               Cell::str(prov)});
  }
  return p;
}

// The groups of a push list: how many, and the three largest with their gradients.
std::string push_list(const std::vector<BoundPush>& pushes) {
  if (pushes.empty()) return "none";
  std::string out = std::to_string(pushes.size()) + (pushes.size() == 1 ? " group: " : " groups: ");
  for (size_t i = 0; i < pushes.size() && i < 3; ++i)
    out += (i ? "; " : "") + pushes[i].group + " (" + general(pushes[i].gradient, 2) + ")";
  return out + (pushes.size() > 3 ? "; ..." : "");
}

// Each parameter the fit left at a bound, and which groups' residuals push it there.
OutputTable bound_table(const ScaleFit& fit) {
  OutputTable p;
  p.title = "Parameters at a bound: the groups whose residuals push them there (d loss / d log value)";
  p.columns = {"Parameter", "Bound", "Pushed there by", "Pulled back by"};
  for (const AtBoundNote& n : fit.at_bound) {
    const FittedParameter& f = fit.report[n.param];
    p.add_row({Cell::str(std::string(f.param->name)),
               Cell::str((n.upper ? "upper " : "lower ") + general(n.upper ? f.param->upper : f.param->lower, 3)),
               Cell::str(push_list(n.pushing)), Cell::str(push_list(n.pulling))});
  }
  return p;
}

std::string plot_svg(const ScalingTable& t, const ScaleInputs& in, const ScaleCv& cv, const std::string& origin) {
  std::map<std::string, SpeedupSeries> groups;
  std::vector<std::string> order;
  for (const ScaleCase& c : in.cases) {
    const ScalingRow& r = t.rows[c.row];
    if (!groups.count(r.group)) order.push_back(r.group), groups[r.group].title = r.group;
    SpeedupSeries& s = groups[r.group];
    const double one = c.run.throughput_1gpu;
    if (s.gpus.empty() && r.gpus != 1) {  // a group without its own one-GPU row: the anchor at 1
      s.gpus.push_back(1), s.measured.push_back(1), s.predicted.push_back(NAN);
    }
    s.gpus.push_back(static_cast<double>(r.gpus));
    s.measured.push_back(r.measured ? *r.measured / one : NAN);
    s.predicted.push_back(cv.rows[c.row].predicted > 0 ? cv.rows[c.row].predicted / one : NAN);
  }
  std::vector<SpeedupSeries> series;
  for (const std::string& g : order) series.push_back(groups[g]);
  return speedup_panels_svg(origin, series);
}

void run_cv(const ScaleFlags& f, Context& ctx) {
  const ScalingTable t = read_scaling_table(f.table);
  for (const std::string& w : t.warnings) std::cerr << "warning: " << w << "\n";
  const ScaleInputs in = scale_inputs(t, load_scaling_models());
  for (size_t i : in.unanchored)
    std::cerr << "warning: " << f.table << ":" << t.rows[i].line << ": no one-GPU row for its group: not predicted\n";
  const ScaleParamSet set(in.cases);
  const ScaleCv cv = cross_validate_scaling(set, in.cases, t.rows.size());
  if (cv.predicted == 0) throw Error(f.table + ": no multi-GPU row with a measurement and a one-GPU row to predict");
  std::vector<OutputTable> tables = {cv_rows(t, in, cv), cv_summary(t, cv), fit_table(cv.full, f.table)};
  if (!cv.full.at_bound.empty()) tables.push_back(bound_table(cv.full));
  emit(ctx.render(tables), ctx.output());
  if (!f.plot.empty()) write_file_atomic(f.plot, plot_svg(t, in, cv, f.table));
}

SyncFramework parse_framework(const std::string& s) {
  for (SyncFramework fw :
       {SyncFramework::kDdp, SyncFramework::kLightning, SyncFramework::kHorovod, SyncFramework::kDeepSpeed})
    if (to_string(fw) == s) return fw;
  throw Error("--framework '" + s + "': expected ddp, lightning, horovod or deepspeed");
}

double positive(const std::string& flag, const std::string& text) {
  const std::optional<double> v = parse_number(text);
  if (!v || !(*v > 0) || !std::isfinite(*v)) throw Error(flag + " '" + text + "': expected a positive number");
  return *v;
}

// --model of data/models/dp_benchmarks.yaml: its gradients and batch; its one-GPU throughput is given.
void benchmark_model(const ScalingModel& m, ScalingRun& run) {
  run.grad_bytes = m.params * m.grad_bytes_per_param;
  run.per_device_batch = m.per_device_batch > 0 ? m.per_device_batch : 1;
  run.global_batch = m.global_batch;
}

// A transformer tpsim models (the catalogue, --models, a config.json): fp32 gradients of all its
// parameters (autocast and Composer's DEFAULT mixed precision keep them fp32), the micro-batch as
// the per-device batch. Without --throughput-1gpu, the one-GPU throughput is tpsim's own prediction
// on the cluster's device (model/scaling one_gpu_config, the predict path), and a note says so.
void transformer_model(const ScaleFlags& f, Context& ctx, const DeviceSpec& cluster, ScalingRun& run,
                       std::vector<std::string>& notes) {
  RunFlags rf;
  rf.model = f.model;
  rf.seq = f.seq.value_or("");
  rf.micro_batch = f.micro_batch.value_or("");
  rf.precision = f.precision.value_or("");
  if (!ctx.catalog().find(f.model) && !is_hf_config_path(f.model))
    throw Error("--model '" + f.model +
                "': neither in data/models/dp_benchmarks.yaml nor a transformer tpsim models "
                "(the catalogue, --models, a config.json); or give --params");
  if (f.batch) throw Error("--batch: for --model " + f.model + " the per-device batch is --micro-batch");
  const RunSettings rs = resolve_run(ctx, rf);
  if (!rs.micro_batch) throw Error("--micro-batch: required for --model " + f.model + " (a number: sequences per GPU)");
  const ModelConfig& model = *rs.model;
  run.grad_bytes = 4.0 * static_cast<double>(parameter_count(model, *rs.seq_len));
  run.per_device_batch = *rs.micro_batch;
  if (f.throughput) return;
  const TrainConfig cfg = one_gpu_config(*rs.seq_len, *rs.micro_batch, run.global_batch, rs.precision);
  ctx.check_profiles_used({cluster.id});
  const DeviceProfile& profile = ctx.profile(cluster.id);
  if (const std::string why = check_config(model, cluster, profile.params, cfg); !why.empty()) throw Error(why);
  const Prediction p = predict(model, cluster, profile.params, cfg);
  if (!p.fits())
    throw Error("--model " + f.model + ": does not fit on one " + cluster.id + " (predicted peak " +
                general(p.memory.peak_bytes / kGiB, 4) + " GiB of " + general(p.capacity_bytes / kGiB, 4) +
                " GiB under plain DDP); give --throughput-1gpu");
  run.throughput_1gpu = p.seq_per_s;
  const auto interval = interval_for(model, profile, cfg);
  const auto recorded = prediction_interval(profile);
  notes.push_back("the one-GPU throughput, " + general(p.seq_per_s, 4) + " samples/s, is tpsim's own prediction (" +
                  "tpsim predict --model " + f.model + " --device " + cluster.id + " --gpus 1 --seq " +
                  std::to_string(cfg.seq_len) + " --micro-batch " + std::to_string(cfg.micro_batch) + " --precision " +
                  std::string(to_string(cfg.precision)) +
                  ": Composer, plain DDP, one GPU); its interval, the profile's widened beyond its fitted rows: " +
                  (interval ? general(interval_low(p.seq_per_s, *interval), 4) + ".." +
                                  general(interval_high(p.seq_per_s, *interval), 4) + " samples/s (" +
                                  (recorded ? recorded->method : std::string()) + ")"
                            : std::string("none for this model (no measured table of its architecture)")));
}

// The run from --model or --params, on `cluster`; the model's name for the parameters' keys.
ScalingRun prediction_run(const ScaleFlags& f, Context& ctx, const DeviceSpec& cluster, std::string& model,
                          std::vector<std::string>& notes) {
  if (f.model.empty() == !f.params) throw Error("--model or --params: give exactly one");
  ScalingRun run;
  run.framework = parse_framework(f.framework);
  if (f.throughput) run.throughput_1gpu = positive("--throughput-1gpu", *f.throughput);
  if (f.global_batch) run.global_batch = parse_count("--global-batch", *f.global_batch, 1 << 30);
  const auto models = load_scaling_models();
  model = f.model.empty() ? "--params " + *f.params : f.model;
  if (f.params) {
    run.grad_bytes = positive("--params", *f.params) * 4.0;  // fp32 gradients (autocast keeps them fp32)
  } else if (models.count(f.model)) {
    benchmark_model(models.at(f.model), run);
    if (f.global_batch) run.global_batch = parse_count("--global-batch", *f.global_batch, 1 << 30);
  } else {
    transformer_model(f, ctx, cluster, run, notes);
  }
  if (!(run.throughput_1gpu > 0))
    throw Error("--throughput-1gpu: required for " + model +
                " (samples/s of one GPU; tpsim predicts it only for a "
                "transformer it models: a catalogue --model with --seq and --micro-batch)");
  if (f.batch) run.per_device_batch = parse_count("--batch", *f.batch, 1 << 20);
  return run;
}

// The parameters of the cluster, framework and model fitted on the shipped seed-000 table, each
// with where it came from (the model's defaults where the table has no such rows).
ScalingParams shipped_params(const std::string& cluster, SyncFramework fw, const std::string& model,
                             std::vector<std::string>& provenance) {
  const std::string origin = (data_dir() / "measured" / "dp_scaling_csc.md").string();
  const ScalingTable t = read_scaling_table(origin);
  const ScaleInputs in = scale_inputs(t, load_scaling_models());
  const ScaleParamSet set(in.cases);
  const ScaleFit fit = fit_scaling(set, in.cases, std::vector<bool>(in.cases.size(), false));
  ScalingParams p;
  const auto take = [&](const std::string& name, double& value) {
    const int i = set.index(name);
    const bool fitted = i >= 0 && fit.report[static_cast<size_t>(i)].determined;
    if (fitted) value = fit.values[static_cast<size_t>(i)];
    provenance.push_back(name + " = " + general(value, 3) +
                         (fitted ? " (fitted on data/measured/dp_scaling_csc.md)" : " (default: no rows fit it)"));
  };
  take(cluster + ".intra_node_link_efficiency", p.intra_node_link_efficiency);
  take(cluster + ".inter_node_link_efficiency", p.inter_node_link_efficiency);
  take("overlap_slowdown", p.overlap_slowdown);
  if (set.index(cluster + ".sync_jitter") >= 0) take(cluster + ".sync_jitter", p.sync_jitter);
  take(to_string(fw) + ".exposed_fraction", p.exposed_fraction);
  take(model + ".fixed_fraction", p.fixed_fraction);
  if (fw == SyncFramework::kHorovod && set.index("horovod.coordination_s") >= 0)
    take("horovod.coordination_s", p.coordination_s);
  return p;
}

// --cluster (a data/clusters file: its device in its nodes) or --device (the datasheet's own node
// and network); the id the fitted parameters are keyed by.
DeviceSpec scale_cluster(const ScaleFlags& f, Context& ctx, std::string& id) {
  if (f.cluster.empty() && f.device.empty())
    throw Error("--cluster or --device: required (one of data/clusters or a device; or --table FILE --cv)");
  if (f.cluster.empty()) {
    id = f.device;
    return ctx.device(f.device);
  }
  const DeviceSpec cluster = load_cluster(f.cluster);
  if (!f.device.empty() && f.device != cluster.id)
    throw Error("--device '" + f.device + "': the GPUs of cluster " + f.cluster + " are " + cluster.id);
  id = f.cluster;
  return cluster;
}

void run_predict(const ScaleFlags& f, Context& ctx) {
  std::string model, where;
  const DeviceSpec cluster = scale_cluster(f, ctx, where);
  std::vector<std::string> provenance;
  ScalingRun run = prediction_run(f, ctx, cluster, model, provenance);
  ScalingParams p = shipped_params(where, run.framework, model, provenance);
  if (f.fixed_fraction) {
    p.fixed_fraction = positive("--fixed-fraction", *f.fixed_fraction);
    if (p.fixed_fraction >= 1) throw Error("--fixed-fraction '" + *f.fixed_fraction + "': must be below 1");
    provenance.push_back("fixed_fraction = " + *f.fixed_fraction + " (--fixed-fraction)");
  }
  OutputTable out;
  out.title = model + " on " + where + " (" + to_string(run.framework) + ")";
  out.columns = {"GPUs",           "Nodes",    "Throughput (samples/s)", "Speedup",
                 "Efficiency (%)", "Step (s)", "All-reduce (s)",         "Exposed (s)"};
  for (int64_t n : parse_count_list("--gpus", f.gpus, 1 << 16)) {
    run.gpus = n;
    if (scaling_micro_batches(run) == 0)
      throw Error("--gpus " + std::to_string(n) + ": the global batch " + std::to_string(run.global_batch) +
                  " is not a whole number of per-device batches of " + std::to_string(run.per_device_batch) +
                  " on every GPU");
    const ScalingPrediction s = predict_scaling(run, cluster, p);
    out.add_row({Cell::integer_value(n), Cell::integer_value((n + cluster.gpus_per_node - 1) / cluster.gpus_per_node),
                 Cell::num(s.throughput, 2), Cell::num(s.throughput / run.throughput_1gpu, 2),
                 Cell::num(100 * s.efficiency, 1), Cell::num(s.step_s, 4), Cell::num(s.allreduce_s, 4),
                 Cell::num(s.exposed_s, 4)});
  }
  emit(ctx.render({out}), ctx.output());
  for (const std::string& line : provenance) std::cerr << "tpsim scale: " << line << "\n";
}

void run_scale(const ScaleFlags& f) {
  Context ctx(f.common);
  if (!f.table.empty()) {
    if (!f.cv) throw Error("--table: give --cv (the table's multi-GPU rows predicted held out)");
    run_cv(f, ctx);
  } else {
    if (f.cv || !f.plot.empty()) throw Error("--cv and --plot need --table FILE");
    run_predict(f, ctx);
  }
  ctx.print_notes();
}

}  // namespace

void register_scale(CLI::App& app) {
  auto o = std::make_shared<ScaleFlags>();
  auto* cmd = app.add_subcommand("scale", "data-parallel throughput of any model at N GPUs from one GPU's");
  cmd->add_option("--table", o->table, "a scaling table (seed 000 or seed 002 format) to predict held out");
  cmd->add_flag("--cv", o->cv, "predict every multi-GPU row of --table from its one-GPU row, its group held out");
  cmd->add_option("--plot", o->plot, "with --cv: SVG of measured and predicted speedup per group");
  cmd->add_option("--model", o->model, "a model of data/models/dp_benchmarks.yaml, or a transformer tpsim models");
  cmd->add_option("--params", o->params, "parameters of the model (fp32 gradients), instead of --model");
  cmd->add_option("--cluster", o->cluster, "a cluster of data/clusters (mahti, puhti, lumi), or give --device");
  cmd->add_option("--device", o->device, "instead of --cluster: a device, in nodes as its datasheet says")
      ->transform(lower_case_ids());
  cmd->add_option("--seq", o->seq, "a transformer --model: sequence length of the one-GPU prediction");
  cmd->add_option("--micro-batch", o->micro_batch, "a transformer --model: sequences per GPU per micro-batch");
  cmd->add_option("--precision", o->precision, "a transformer --model: amp_bf16 (default), amp_fp16, bf16, fp32...");
  cmd->add_option("--gpus", o->gpus, "GPU counts, e.g. 1,2,4,8,16")->default_val("1,2,4,8,16");
  cmd->add_option("--throughput-1gpu", o->throughput, "samples/s of one GPU at the per-device batch");
  cmd->add_option("--framework", o->framework, "ddp, lightning, horovod or deepspeed")->default_val("ddp");
  cmd->add_option("--batch", o->batch, "per-device batch (default: the model's, else 1)");
  cmd->add_option("--global-batch", o->global_batch, "samples per optimizer step, fixed (gradient accumulation)");
  cmd->add_option("--fixed-fraction", o->fixed_fraction, "share of the one-GPU step that does not shrink with GPUs");
  add_common_options(cmd, o->common);
  cmd->callback([o] { run_scale(*o); });
}

}  // namespace tpsim
