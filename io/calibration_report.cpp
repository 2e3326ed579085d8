#include "io/calibration_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "io/measured_table.hpp"
#include "io/text_format.hpp"

namespace tpsim {
namespace {

nlohmann::json timing_json(const TimingOptions& t) {
  return {
      {"warmup", t.warmup},           {"min_repetitions", t.min_repetitions}, {"max_repetitions", t.max_repetitions},
      {"min_seconds", t.min_seconds}, {"max_seconds", t.max_seconds},         {"flush_cache", t.flush_cache}};
}

nlohmann::json noise_json(const NoiseVerdict& v, const NoiseOptions& o, const Op& reference,
                          const TimingOptions& reference_timing, const Timing& start, const Timing& end) {
  const auto timing = [](const Timing& t) {
    if (!t.supported) return nlohmann::json{{"unsupported", t.reason}};
    return nlohmann::json{
        {"median_s", t.median_s}, {"p10_s", t.p10_s}, {"p90_s", t.p90_s}, {"repetitions", t.repetitions}};
  };
  return {{"verdict", v.noisy ? "noisy" : "trusted"},
          {"noisy", v.noisy},
          {"reasons", v.reasons},
          {"shapes", v.shapes},
          {"median_spread", v.median_spread},
          {"p90_spread", v.p90_spread},
          {"max_median_spread", o.max_median_spread},
          {"spread", "(p90 - p10) / median of each shape's timed runs; the median over shapes"},
          {"reference",
           {{"shape", shape_text(reference)},
            {"dtype", std::string(to_string(reference.dtype))},
            {"timing", timing_json(reference_timing)},
            {"start", timing(start)},
            {"end", timing(end)},
            {"drift", v.reference_timed ? nlohmann::json(v.reference_drift) : nlohmann::json()}}},
          {"max_reference_drift", o.max_reference_drift}};
}

// Fitted parameters as every calibration records them.
nlohmann::json fitted_json(const std::vector<FittedParameter>& fitted) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& f : fitted)
    j.push_back({{"name", std::string(f.param->name)},
                 {"value", f.value},
                 {"stddev", f.stddev < 0 ? nlohmann::json() : nlohmann::json(f.stddev)},
                 {"at_bound", f.at_bound}});
  return j;
}

nlohmann::json kernel_measurements_json(const KernelCalibration& c) {
  nlohmann::json j = nlohmann::json::array();
  for (size_t i = 0; i < c.measured.measurements.size(); ++i) {
    const auto& m = c.measured.measurements[i];
    j.push_back({{"op", m.op.name},
                 {"group", std::string(to_string(group_of(m.op)))},
                 {"shape", shape_text(m.op)},
                 {"dtype", std::string(to_string(m.op.dtype))},
                 {"source", m.source == PlanSource::kSweep ? "sweep" : "grid"},
                 {"held_out", m.held_out},
                 {"flops", m.op.flops},
                 {"bytes", m.op.bytes_read + m.op.bytes_written},
                 {"median_s", m.timing.median_s},
                 {"p10_s", m.timing.p10_s},
                 {"p90_s", m.timing.p90_s},
                 {"repetitions", m.timing.repetitions},
                 {"predicted_s", c.predicted_s[i]},
                 {"log_residual", c.fit.log_residuals[i]}});
  }
  return j;
}

nlohmann::json kernel_plan_json(const KernelCalibration& c) {
  std::vector<std::string> models, precisions, formats;
  for (const auto& m : c.plan_options.models) models.push_back(m.name);
  for (Precision p : c.plan_options.precisions) precisions.emplace_back(to_string(p));
  for (DType t : c.plan_options.gemm_dtypes) formats.emplace_back(to_string(t));
  return {{"models", models},
          {"seq_lens", c.plan_options.seq_lens},
          {"micro_batches", c.plan_options.micro_batches},
          {"precisions", precisions},
          {"gemm_formats", formats},
          {"planned_shapes", c.planned_shapes},
          {"measured_shapes", c.measured.measurements.size()},
          {"skipped_for_budget", c.measured.skipped_for_budget},
          {"unsupported", c.measured.unsupported}};
}

nlohmann::json residuals_json(const ResidualSummary& s) {
  return {{"median_error", s.median_error},
          {"largest_error", s.largest_error},
          {"rms_log_error", s.rms_log_error},
          {"measurements", s.measurements}};
}

bool measured(const CommCalibration& c, LinkTier tier) {
  return std::find(c.fit.tiers.begin(), c.fit.tiers.end(), tier) != c.fit.tiers.end();
}

nlohmann::json comm_tiers_json(const CommCalibration& c) {
  nlohmann::json tiers = nlohmann::json::array();
  for (LinkTier tier : {LinkTier::kIntraNode, LinkTier::kInterNode}) {
    nlohmann::json j = {{"tier", std::string(to_string(tier))}, {"measured", measured(c, tier)}};
    if (!measured(c, tier))
      j["why"] = tier == LinkTier::kInterNode
                     ? "the job ran on one node (" + c.node0 + "): values kept from the base profile"
                     : "rank 0's node (" + c.node0 + ") ran one rank: values kept from the base profile";
    tiers.push_back(j);
  }
  return tiers;
}

nlohmann::json comm_measurements_json(const CommCalibration& c) {
  nlohmann::json ms = nlohmann::json::array();
  for (size_t i = 0; i < c.measurements.size(); ++i) {
    const CommMeasurement& m = c.measurements[i];
    ms.push_back({{"kind", std::string(to_string(m.kind))},
                  {"bytes", m.bytes},
                  {"ranks", m.ranks},
                  {"nodes", m.nodes},
                  {"median_s", m.median_s},
                  {"p10_s", m.p10_s},
                  {"p90_s", m.p90_s},
                  {"repetitions", m.repetitions},
                  {"predicted_s", m.median_s * std::exp(c.fit.residuals[i])},
                  {"log_residual", c.fit.residuals[i]}});
  }
  return ms;
}

std::string source_or_empty(const DeviceSpec& d, const std::string& key) {
  return d.sources.count(key) ? d.sources.at(key) : "";
}

// Bus bandwidth as nccl-tests reports it: (n-1)/n of the buffer crosses each rank's link per pass,
// two passes for an all-reduce.
double bus_bytes_per_s(const CommMeasurement& m) {
  const double n = static_cast<double>(m.ranks);
  const double passes = m.kind == CollectiveKind::kAllReduce ? 2.0 : 1.0;
  return passes * (n - 1.0) / n * m.bytes / m.median_s;
}

std::string source_of(const DeviceProfile& p, std::string_view name) {
  const auto it = p.sources.find(std::string(name));
  return it == p.sources.end() ? "?" : std::string(to_string(it->second.kind));
}

void print_comm_measurements(std::ostream& os, const CommCalibration& c) {
  os << "  kind            bytes      ranks nodes  median us     p10 us     p90 us  reps  bus GB/s  "
        "predicted us  error\n";
  for (size_t i = 0; i < c.measurements.size(); ++i) {
    const CommMeasurement& m = c.measurements[i];
    char line[200];
    std::snprintf(line, sizeof line, "  %-14s %10.0f %6lld %5lld %10.1f %10.1f %10.1f %5d %9.3f %13.1f %+6.1f%%\n",
                  std::string(to_string(m.kind)).c_str(), m.bytes, static_cast<long long>(m.ranks),
                  static_cast<long long>(m.nodes), m.median_s * 1e6, m.p10_s * 1e6, m.p90_s * 1e6, m.repetitions,
                  bus_bytes_per_s(m) / 1e9, m.median_s * std::exp(c.fit.residuals[i]) * 1e6,
                  100 * (std::exp(c.fit.residuals[i]) - 1));
    os << line;
  }
}

}  // namespace

nlohmann::json comm_calibration_json(const CommCalibration& c, const std::string& command_line) {
  nlohmann::json by_kind = nlohmann::json::object();
  for (const auto& [kind, summary] : c.residuals_by_kind)
    by_kind[std::string(to_string(kind))] = residuals_json(summary);
  return {{"command", command_line},
          {"date", c.date},
          {"backend", std::string(to_string(c.backend))},
          {"library", c.library},
          {"ranks", c.ranks},
          {"nodes", c.nodes},
          {"ranks_per_node", c.ranks_per_node},
          {"base_profile", c.base_profile},
          {"link_bytes_per_s",
           {{"intra_node", c.device.intra_node_bytes_per_s},
            {"intra_node_source", source_or_empty(c.device, "intra_node_gb_per_s")},
            {"inter_node", c.device.inter_node_bytes_per_s},
            {"inter_node_source", source_or_empty(c.device, "inter_node_gbps_per_node")}}},
          {"tiers", comm_tiers_json(c)},
          {"fit",
           {{"formula", "CostModel::collective_seconds (docs/model.md, Collectives)"},
            {"loss", "Huber on log(predicted / measured median), scale " + fixed(c.fit_options.robust_scale, 2)},
            {"initial_cost", c.fit.initial_cost},
            {"final_cost", c.fit.final_cost},
            {"iterations", c.fit.iterations},
            {"converged", c.fit.converged},
            {"solver", c.fit.summary},
            {"parameters", fitted_json(c.fit.fitted)},
            {"residuals", residuals_json(c.residuals)},
            {"residuals_by_kind", by_kind}}},
          {"measurements", comm_measurements_json(c)},
          {"skipped", c.skipped}};
}

void print_comm_calibration(std::ostream& os, const CommCalibration& c, const std::string& out) {
  os << "  " << c.library << ", backend " << to_string(c.backend) << ": " << c.ranks << " ranks on " << c.nodes
     << (c.nodes == 1 ? " node" : " nodes") << " (";
  for (auto it = c.ranks_per_node.begin(); it != c.ranks_per_node.end(); ++it)
    os << (it == c.ranks_per_node.begin() ? "" : ", ") << it->first << ": " << it->second;
  os << ")\n  device " << c.device.id << ": " << c.device_note << "; links "
     << general(c.device.intra_node_bytes_per_s / 1e9) << " GB/s within a node ("
     << c.device.sources.at("intra_node_gb_per_s") << "), " << general(c.device.inter_node_bytes_per_s / 1e9)
     << " GB/s per node across nodes\n";
  print_comm_measurements(os, c);
  for (const auto& s : c.skipped) os << "  skipped: " << s << "\n";
  os << "  " << c.fit.summary << "\n";
  for (const FittedParameter& f : c.fit.fitted)
    os << "  " << f.param->name << " = " << general(f.value) << (f.stddev >= 0 ? " +- " + general(f.stddev) : "")
       << (f.at_bound ? " (at its bound)" : "") << "\n";
  for (LinkTier tier : {LinkTier::kIntraNode, LinkTier::kInterNode}) {
    if (measured(c, tier)) continue;
    const TierParameters p = tier_parameters(tier);
    os << "  " << to_string(tier) << ": not measured ("
       << (tier == LinkTier::kInterNode ? "the job ran on one node, " + c.node0 : "rank 0's node ran one rank")
       << "); kept from the base profile: " << p.efficiency->name << " = "
       << general(p.efficiency->value(c.profile.params)) << " (" << source_of(c.profile, p.efficiency->name) << "), "
       << p.latency_s->name << " = " << general(p.latency_s->value(c.profile.params)) << " ("
       << source_of(c.profile, p.latency_s->name) << ")\n";
  }
  os << "  error of the fit (predicted / measured - 1), median per kind:";
  for (const auto& [kind, summary] : c.residuals_by_kind)
    os << " " << to_string(kind) << " " << fixed(100 * summary.median_error, 1) << "%";
  os << "; RMS of the log errors " << fixed(100 * c.residuals.rms_log_error, 1) << "%, largest error "
     << fixed(100 * c.residuals.largest_error, 1) << "%\n  wrote " << out << "\n";
}

nlohmann::json kernel_calibration_json(const KernelCalibration& c, const std::string& command_line) {
  const bool gpu = c.backend != BackendKind::kCpu;
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& e : c.fit.errors)
    errors[std::string(to_string(e.group))] = {{"fitted_shapes", e.fitted},
                                               {"fitted_median_abs_error", e.fitted_median},
                                               {"held_out_shapes", e.held_out},
                                               {"held_out_median_abs_error", e.held_out_median},
                                               {"held_out_p90_abs_error", e.held_out_p90}};
  return {{"command", command_line},
          {"date", c.date},
          {"backend",
           {{"backend", c.info.backend},
            {"device_name", c.info.device_name},
            {"driver_version", c.info.driver_version},
            {"library_versions", c.info.library_versions},
            {"compute_units", c.info.compute_units},
            {"memory_bytes", c.info.memory_bytes}}},
          {"threads", gpu ? nlohmann::json() : nlohmann::json(c.threads)},
          {"clock", gpu ? "device events" : (c.timing.thread_cpu_clock ? "thread_cpu" : "wall")},
          {"base_profile", c.base_profile},
          {"budget_s", c.budget_s},
          {"wall_s", c.wall_s},
          {"measure_s", c.measured.seconds},
          {"fit_s", c.fit_s},
          {"timing", timing_json(c.timing)},
          {"copy_bandwidth",
           {{"method", c.copy.method},
            {"buffer_bytes", c.copy.buffer_bytes},
            {"bytes_per_s", c.copy.bytes_per_s},
            {"median_s", c.copy.timing.median_s},
            {"p10_s", c.copy.timing.p10_s},
            {"p90_s", c.copy.timing.p90_s},
            {"repetitions", c.copy.timing.repetitions}}},
          {"plan", kernel_plan_json(c)},
          {"fit",
           {{"loss", "Huber on log(predicted / measured), scale " + fixed(c.fit_options.robust_scale, 2)},
            {"stages", c.fit.report},
            {"parameters", fitted_json(c.fit.fitted)}}},
          {"errors", errors},
          {"noise",
           noise_json(c.noise, c.noise_options, c.reference, c.reference_timing, c.reference_start, c.reference_end)},
          {"measurements", kernel_measurements_json(c)}};
}

void print_kernel_calibration(std::ostream& os, const KernelCalibration& c, const std::string& out, double total_s) {
  const bool gpu = c.backend != BackendKind::kCpu;
  const NoiseVerdict& noise = c.noise;
  os << "  device " << c.device_id
     << (c.datasheet ? " (datasheet data/devices/" + c.device_id + ".yaml)"
                     : " (spec measured, embedded in the profile)")
     << (gpu ? ""
             : ", " + std::to_string(c.threads) + (c.threads == 1 ? " thread" : " threads") +
                   (c.timing.thread_cpu_clock ? " timed by its CPU clock" : " timed by the wall clock"))
     << "; copy bandwidth " << fixed(c.copy.bytes_per_s / 1e9, 1) << " GB/s\n";
  os << "  measured " << c.measured.measurements.size() << " of " << c.planned_shapes << " planned shapes in "
     << fixed(c.measured.seconds, 1) << " s (" << c.measured.skipped_for_budget << " left out for the budget, "
     << c.measured.unsupported.size() << " unsupported); fit in " << fixed(c.fit_s, 1) << " s\n";
  for (const auto& line : c.fit.report)
    if (line.rfind("  ", 0) != 0) os << "  " << line << "\n";
  for (const auto& f : c.fit.fitted)
    os << "    " << f.param->name << " = " << f.value << (f.stddev >= 0 ? " +- " + general(f.stddev) : "")
       << (f.at_bound ? " (at its bound)" : "") << "\n";
  for (const auto& e : c.fit.errors)
    os << "  " << to_string(e.group) << ": median |error| " << fixed(100 * e.fitted_median, 1) << "% on " << e.fitted
       << " fitted shapes, " << fixed(100 * e.held_out_median, 1) << "% on " << e.held_out << " held-out shapes\n";
  os << "  noise: median (p90 - p10) / median " << fixed(noise.median_spread, 3) << " over " << noise.shapes
     << " shapes (at most " << fixed(c.noise_options.max_median_spread, 2) << ")";
  if (noise.reference_timed)
    os << ", reference GEMM " << shape_text(c.reference) << " " << general(noise.reference_start_s) << " s -> "
       << general(noise.reference_end_s) << " s (" << (noise.reference_drift >= 0 ? "+" : "")
       << fixed(100 * noise.reference_drift, 1) << "%, at most " << fixed(100 * c.noise_options.max_reference_drift, 0)
       << "%)";
  os << ": " << (noise.noisy ? "too noisy to trust" : "trusted") << "\n";
  os << "  " << fixed(total_s, 1) << " s in all; wrote " << out << "\n";
  if (noise.noisy) {
    std::string why;
    for (const auto& r : noise.reasons) why += (why.empty() ? "" : "; ") + r;
    os << "tpsim: warning: calibrate kernels: measurements too noisy to trust (" << why << "); " << out
       << " is written, marked so in kernel_calibration.noise: calibrate again on a quiet machine\n";
  }
}

nlohmann::json table_calibration_json(const TableCalibration& c, const TableCalibrationOptions& o,
                                      const std::vector<MeasuredRow>& rows, const std::string& base_profile,
                                      const std::string& command_line) {
  const TableFitResult& fit = c.fit;
  nlohmann::json jrows = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i)
    jrows.push_back({{"row", rows[i].where()},
                     {"measured_tokens_per_s", rows[i].tokens_per_s},
                     {"predicted_tokens_per_s", rows[i].tokens_per_s * std::exp(fit.residuals[i])},
                     {"log_residual", fit.residuals[i]},
                     {"outlier", static_cast<bool>(fit.outliers[i])}});
  // The rows flagged, by name, so that a reader sees them without scanning every row.
  nlohmann::json joutliers = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i)
    if (fit.outliers[i])
      joutliers.push_back({{"row", rows[i].where()},
                           {"model", rows[i].model},
                           {"seq_len", rows[i].seq_len},
                           {"n_gpus", rows[i].n_gpus},
                           {"error", std::exp(fit.residuals[i]) - 1.0}});
  nlohmann::json jparams = nlohmann::json::array();
  for (const auto& f : fit.fitted) {
    nlohmann::json p = {{"name", std::string(f.param->name)},
                        {"value", f.value},
                        {"stddev", f.stddev < 0 ? nlohmann::json() : nlohmann::json(f.stddev)},
                        {"at_bound", f.at_bound},
                        {"determined_by_rows", f.determined},
                        {"range", {f.param->lower, f.param->upper}},
                        {"range_source", std::string(f.range_source)}};
    // A value at its bound: the rows that pull it further, the strongest first.
    if (!f.pushed_by.empty()) {
      nlohmann::json pushed = nlohmann::json::array();
      for (size_t k : f.pushed_by) pushed.push_back(rows.at(k).where());
      p["pushed_by"] = pushed;
    }
    jparams.push_back(p);
  }
  return {{"command", command_line},
          {"transferred", o.transfer},
          {"fitted_devices", c.fitted_devices},
          {"date", utc_timestamp()},
          {"tables", o.tables},
          {"base_profile", base_profile},
          {"loss", "Huber on log(predicted / measured), scale " + std::to_string(o.fit.robust_scale)},
          {"initial_cost", fit.initial_cost},
          {"final_cost", fit.final_cost},
          {"iterations", fit.iterations},
          {"converged", fit.converged},
          {"solver", fit.summary},
          {"parameters", jparams},
          {"outlier_threshold", "|log(predicted / measured)| > " + std::to_string(o.fit.outlier_threshold)},
          {"outliers", joutliers},
          {"rows", jrows}};
}

namespace {

double error_percent(double predicted, double measured) { return 100.0 * (predicted / measured - 1.0); }

OutputTable replay_ops_table(const Replay& r) {
  OutputTable per_op;
  per_op.title = "Ops";
  // Error: the prediction against the op in the step where the backend timed it there, else alone.
  per_op.columns = {"#", "Part", "Layer", "Op", "Shape", "Alone (s)", "In Step (s)", "Predicted (s)", "Error (%)"};
  const bool in_step = r.in_step_s.size() == r.ops.size();
  for (size_t i = 0; i < r.ops.size(); ++i) {
    const StepOp& s = r.ops[i];
    const double measured = in_step ? r.in_step_s[i] : r.measured_s[i];
    per_op.add_row({Cell::integer_value(static_cast<int64_t>(i)), Cell::str(std::string(to_string(s.part))),
                    s.layer >= 0 ? Cell::integer_value(s.layer) : Cell::empty(), Cell::str(s.op.name),
                    Cell::str(shape_text(s.op)), Cell::num(r.measured_s[i], 6),
                    in_step ? Cell::num(r.in_step_s[i], 6) : Cell::empty(), Cell::num(r.predicted_s[i], 6),
                    Cell::num(error_percent(r.predicted_s[i], measured), 1)});
  }
  return per_op;
}

}  // namespace

std::string render_replay(const Replay& r, const ReplayOptions& o, const std::string& precision,
                          const std::string& backend, const std::string& device_id, const OutputOptions& out) {
  const ModelConfig& model = o.model;
  const int64_t layers = o.step.layers > 0 ? o.step.layers : model.n_layers;
  OutputTable total;
  total.title = "Step";
  total.columns = {"Model",
                   "SeqLen (T)",
                   "MicroBatchSize",
                   "Activation Checkpointing",
                   "Precision",
                   "Backend",
                   "Device",
                   "Threads",
                   "Clock",
                   "Blocks Run",
                   "Blocks",
                   "Block Scale",
                   "Ops",
                   "Ops Alone (s)",
                   "Reference GEMM Now / Calibrated",
                   "Measured Step Time (s)",
                   "Predicted Step Time (s)",
                   "Error (%)"};
  total.add_row(
      {Cell::str(model.name), Cell::integer_value(o.step.seq_len), Cell::integer_value(o.step.micro_batch),
       checkpointing_cell(o.step.checkpointing), Cell::str(precision), Cell::str(backend), Cell::str(device_id),
       o.gpu ? Cell::empty() : Cell::integer_value(o.threads),
       Cell::str(o.gpu ? "device events" : (o.thread_clock ? "thread CPU time" : "wall")), Cell::integer_value(layers),
       Cell::integer_value(model.n_layers), Cell::num(r.block_scale, 3),
       Cell::integer_value(static_cast<int64_t>(r.ops.size())), Cell::num(r.alone_step_s, 6),
       r.reference_calibrated_s > 0 ? Cell::num(r.reference_now_s / r.reference_calibrated_s, 3) : Cell::empty(),
       Cell::num(r.measured_step_s, 6), Cell::num(r.predicted_step_s, 6),
       Cell::num(error_percent(r.predicted_step_s, r.measured_step_s), 1)});
  if (out.format == Format::kCsv && out.width == 0) return render({total}, out);
  std::string text = render({total, replay_ops_table(r)}, out);
  if (out.format == Format::kMarkdown) {
    text +=
        "\nMeasured: the sequence run end to end (median of its runs). Each op: alone (its operands evicted "
        "from the caches before each run, as calibrate kernels times it) and in the step (a clock read between "
        "the sequence's ops); Ops Alone: the step from the ops timed alone. Reference GEMM: the profile's "
        "noise-check GEMM timed again now, over its time at the calibration (above 1: the device runs slower "
        "now, and the step with it).\n";
    if (layers < model.n_layers)
      text += "Ran " + std::to_string(layers) + " of " + std::to_string(model.n_layers) +
              " blocks: the block ops' times are scaled by " + std::to_string(model.n_layers) + "/" +
              std::to_string(layers) + " in both the measured and the predicted step.\n";
  }
  return text;
}

}  // namespace tpsim
