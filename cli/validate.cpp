// tpsim validate: predict every row of measured tables at the row's own configuration and report
// the errors, per row and summarised (all rows, per table, per GPU type, per model).
// With --cv, every prediction is held out: made by a fit that did not see the row.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>

#include "calibrate/crossval.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/measured_table.hpp"
#include "io/plots.hpp"
#include "io/progress.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/report.hpp"
#include "cli/run_settings.hpp"
#include "cli/validation.hpp"
#include "model/framework.hpp"
#include "model/interval.hpp"
#include "model/units.hpp"

namespace tpsim {
namespace {

struct ValidateOptions {
  CommonOptions common;
  std::vector<std::string> tables;
  std::string framework = "composer";  // of rows whose table has no Framework column
  std::string device;                  // the GPU of tables without a GPU column
  std::string cv;
  std::string fit_parameters;  // comma-separated; empty: the table-level default set
  double robust_scale = 0.05;
  double prior_width = 0;
  std::string threads;        // --threads: folds fitted at once (empty: one per core)
  std::string plot;           // SVG: predicted against measured
  bool skip_refused = false;  // rows tpsim does not model: a warning each, the others predicted
  NetworkFlags network;
};

OutputTable summary_table(const std::vector<RowResult>& results) {
  OutputTable t;
  t.title = "summary";
  t.columns = {"Scope",           "Rows",       "MAPE (%)",      "Median |Error| (%)",
               "Max |Error| (%)", "Rows > 15%", "P10 Error (%)", "P90 Error (%)"};
  std::vector<std::pair<std::string, std::vector<double>>> scopes = {{"all", {}}};
  std::map<std::string, size_t> index;
  const auto add = [&](const std::string& scope, double e) {
    auto it = index.find(scope);
    if (it == index.end()) {
      it = index.emplace(scope, scopes.size()).first;
      scopes.push_back({scope, {}});
    }
    scopes[it->second].second.push_back(e);
  };
  for (const auto& r : results) scopes[0].second.push_back(r.error);
  for (const auto& r : results) add("table " + r.row->row.origin, r.error);
  for (const auto& r : results) add("GPU " + r.row->row.gpu, r.error);
  for (const auto& r : results) add("model " + r.row->row.model, r.error);
  for (const auto& [scope, errors] : scopes) {
    const ErrorSummary s = summarize_errors(errors);
    t.add_row({Cell::str(scope), Cell::integer_value(s.rows), Cell::num(100 * s.mape, 2),
               Cell::num(100 * s.median_abs, 2), Cell::num(100 * s.max_abs, 2), Cell::integer_value(s.over_15),
               Cell::num(100 * s.p10, 2), Cell::num(100 * s.p90, 2)});
  }
  return t;
}

// Held-out predictions, each interval from the held-out errors of its own device.
std::vector<RowResult> held_out_results(Context& ctx, const std::vector<ResolvedRow>& rows, const CvSpec& spec,
                                        const ValidateOptions& o) {
  const std::vector<FitRow> fits = fit_rows(ctx, rows, /*held_out=*/true);
  TableFitOptions options;
  options.parameters = o.fit_parameters.empty() ? table_fit_parameters(ctx, rows)
                                                : parse_parameter_list("--fit-parameters", o.fit_parameters);
  options.robust_scale = o.robust_scale;
  options.prior_width = o.prior_width;
  options.covariance = false;
  options.threads = fold_threads(o.threads);
  Progress progress("held-out fits (--cv " + to_string(spec) + ")", 0);
  const std::vector<HeldOutError> held =
      cross_validate(fits, spec, options, [&](int done, int total) { progress.update(done, total); });
  progress.finish();
  std::vector<RowResult> results;
  for (const auto& h : held) {
    RowResult r = predict_row(rows[h.row], h.params);
    r.held_out = h.fold;
    r.doublings = h.doublings;
    results.push_back(std::move(r));
  }
  if (results.empty())
    throw Error("--cv " + to_string(spec) +
                ": no row can be held out (each device needs two model sizes for 'model', two devices for 'device')");
  return results;
}

// Each device's interval: under --cv the held-out errors of this run (the same everywhere), else
// the profile's, widened at each row beyond the rows the profile was fitted to.
std::map<std::string, IntervalModel> intervals_by_device(Context& ctx, const std::vector<RowResult>& results,
                                                         bool held_out) {
  std::map<std::string, IntervalModel> out;
  if (held_out) {
    std::map<std::string, std::vector<double>> errors;
    for (const auto& r : results) errors[r.row->row.gpu].push_back(r.error);
    for (const auto& [gpu, e] : errors) out[gpu] = {held_out_interval(e), std::nullopt, 0};
  } else {
    // The profile's interval is of Composer runs: a table of other frameworks' rows gets none.
    for (const auto& r : results)
      if (framework_def(r.row->cfg.layout.framework).profile_intervals)
        if (auto i = prediction_interval(ctx.profile(r.row->row.gpu))) out[r.row->row.gpu] = interval_model(*i);
  }
  return out;
}

// Under --cv: how often each device's profile interval, widened by how far each held-out row lies
// beyond the rows its fold fitted, holds the row's held-out error (the interval's aim: 80%).
std::optional<OutputTable> coverage_table(Context& ctx, const std::vector<RowResult>& results) {
  struct Count {
    IntervalModel interval;
    int rows = 0, covered = 0, beyond = 0, covered_beyond = 0;
  };
  std::map<std::string, Count> by_device;
  for (const auto& r : results) {
    const std::string& gpu = r.row->row.gpu;
    // The rows the profile's interval speaks for (cli/report.hpp, interval_model_for).
    const std::optional<IntervalModel> model =
        interval_model_for(*r.row->model, ctx.profile(gpu), r.row->cfg.layout.framework);
    if (!model) continue;
    Count& c = by_device.try_emplace(gpu, Count{*model}).first->second;
    const RelativeInterval i = widened(c.interval.held_out, c.interval.widening_per_doubling, r.doublings);
    const bool in = r.error >= i.p10 && r.error <= i.p90;
    ++c.rows;
    c.covered += in;
    if (r.doublings > 0) {
      ++c.beyond;
      c.covered_beyond += in;
    }
  }
  if (by_device.empty()) return std::nullopt;
  OutputTable t;
  t.title = "interval coverage";
  t.columns = {"GPU",
               "Rows",
               "In Interval",
               "Coverage (%)",
               "Rows Beyond Fitted",
               "In Interval Beyond",
               "Profile P10 (%)",
               "Profile P90 (%)",
               "Widening per Doubling"};
  Count all;
  for (const auto& [gpu, c] : by_device) {
    const auto pct = [](int a, int b) { return b > 0 ? Cell::num(100.0 * a / b, 1) : Cell::empty(); };
    t.add_row({Cell::str(gpu), Cell::integer_value(c.rows), Cell::integer_value(c.covered), pct(c.covered, c.rows),
               Cell::integer_value(c.beyond), Cell::integer_value(c.covered_beyond),
               Cell::num(100 * c.interval.held_out.p10, 2), Cell::num(100 * c.interval.held_out.p90, 2),
               c.interval.domain ? Cell::num(c.interval.widening_per_doubling, 4) : Cell::empty()});
    all.rows += c.rows;
    all.covered += c.covered;
    all.beyond += c.beyond;
    all.covered_beyond += c.covered_beyond;
  }
  if (by_device.size() > 1)
    t.add_row({Cell::str("all"), Cell::integer_value(all.rows), Cell::integer_value(all.covered),
               Cell::num(100.0 * all.covered / all.rows, 1), Cell::integer_value(all.beyond),
               Cell::integer_value(all.covered_beyond), Cell::empty(), Cell::empty(), Cell::empty()});
  return t;
}

// Predicted against measured throughput on log axes, coloured by device, with y = x and the band
// of the widest interval among the devices shown.
std::string validation_plot(const std::vector<RowResult>& results,
                            const std::map<std::string, IntervalModel>& intervals, bool held_out) {
  Scatter sc;
  sc.title = held_out ? "Held-out predictions against measured throughput" : "Predicted against measured throughput";
  sc.x_label = "measured throughput (tokens/s)";
  sc.y_label = "predicted throughput (tokens/s)";
  for (const auto& r : results) {
    const MeasuredRow& m = r.row->row;
    char note[256];
    std::snprintf(note, sizeof note, "%s: %s, seq %lld, %lld GPUs, error %+.1f%%", m.where().c_str(), m.model.c_str(),
                  static_cast<long long>(m.seq_len), static_cast<long long>(m.n_gpus), 100 * r.error);
    sc.points.push_back({m.tokens_per_s, r.prediction.tokens_per_s, m.gpu, note});
  }
  for (const auto& [gpu, i] : intervals) {
    sc.band_low = std::min(sc.band_low, i.held_out.p10);
    sc.band_high = std::max(sc.band_high, i.held_out.p90);
  }
  if (!intervals.empty()) sc.band_label = "10-90% held-out error";
  return scatter_loglog_svg(sc);
}

// Each row's interval, from its device's held-out errors: [low, high], empty without one.
using Intervals = std::map<std::string, IntervalModel>;
std::pair<Cell, Cell> low_high(const Intervals& intervals, const RowResult& r) {
  const auto it = intervals.find(r.row->row.gpu);
  if (it == intervals.end()) return {Cell::empty(), Cell::empty()};
  const double p = r.prediction.tokens_per_s;
  const RelativeInterval i = interval_at(it->second, domain_point(*r.row->model, r.row->cfg));
  return {Cell::num(interval_low(p, i), 0), Cell::num(interval_high(p, i), 0)};
}

// llm-foundry's form: every row composer on data parallelism alone, with throughput measured and a
// model of the catalogue. Its outputs keep the columns they had before the general form.
bool foundry_form(const std::vector<ResolvedRow>& rows) {
  return std::all_of(rows.begin(), rows.end(), [](const ResolvedRow& r) {
    Layout plain;  // composer's data parallelism alone, of the row's sharding and checkpointing
    plain.sharding = r.row.layout.sharding, plain.checkpointing = r.row.layout.checkpointing;
    return r.row.layout == plain && !r.row.step_time_measured() && !r.row.architecture;
  });
}

// The input's columns (every table's, in the order first seen), then the predictions; other forms
// than llm-foundry's add the predicted step time after every column llm-foundry's have.
OutputTable input_columns_table(const std::vector<ResolvedRow>& rows, const std::vector<RowResult>& results,
                                const Intervals& intervals, const std::string& title) {
  OutputTable t;
  t.title = title;
  std::map<std::string, size_t> index;
  for (const auto& r : rows)
    for (const auto& [col, _] : r.row.cells)
      if (index.emplace(col, t.columns.size()).second) t.columns.push_back(col);
  const size_t n_in = t.columns.size();
  const bool step_time = !foundry_form(rows);
  for (const char* c :
       {"Predicted Throughput (T/s)", "Predicted MFU", "Predicted HFU", "Predicted Memory (GiB)", "Error (%)",
        "Predicted Throughput Low (T/s)", "Predicted Throughput High (T/s)", "Held Out", "Doublings Beyond Fitted"})
    t.columns.emplace_back(c);
  if (step_time) t.columns.emplace_back("Predicted Step Time (s)");
  for (const auto& r : results) {
    std::vector<Cell> row(n_in);
    for (const auto& [col, cell] : r.row->row.cells) row[index.at(col)] = Cell::str(cell);
    const Prediction& p = r.prediction;
    const auto [low, high] = low_high(intervals, r);
    row.push_back(Cell::num(p.tokens_per_s, 0));
    row.push_back(Cell::num(100 * p.mfu, 2));
    row.push_back(Cell::num(100 * p.hfu, 2));
    row.push_back(Cell::num(p.memory.peak_bytes / kGiB, 1));
    row.push_back(Cell::num(100 * r.error, 2));
    row.push_back(low);
    row.push_back(high);
    row.push_back(r.held_out.empty() ? Cell::empty() : Cell::str(r.held_out));
    row.push_back(r.held_out.empty() ? Cell::empty() : Cell::num(r.doublings, 2));
    if (step_time) row.push_back(Cell::num(p.step_s, 4));
    t.add_row(std::move(row));
  }
  return t;
}

// Markdown and JSON: each row measured and predicted, in tpsim's columns.
OutputTable rows_table(const std::vector<RowResult>& results, const Intervals& intervals) {
  OutputTable t;
  t.title = "rows";
  t.columns = {"Source",
               "Model",
               "SeqLen (T)",
               "# GPUs",
               "GPU",
               "MicroBatchSize",
               "GradAccum",
               "GlobalBatchSize",
               "Precision",
               "MP Mode",
               "Sharding Strategy",
               "Activation Checkpointing",
               "Throughput (T/s)",
               "Predicted Throughput (T/s)",
               "Error (%)",
               "Predicted Throughput Low (T/s)",
               "Predicted Throughput High (T/s)",
               "MFU",
               "Predicted MFU",
               "HFU",
               "Predicted HFU",
               "Predicted Memory (GiB)",
               "Fits",
               "Held Out",
               "Doublings Beyond Fitted"};
  for (const auto& r : results) {
    const MeasuredRow& m = r.row->row;
    const Prediction& p = r.prediction;
    const auto measured = [](double v) { return v >= 0 ? Cell::num(v, 2) : Cell::empty(); };
    const auto [low, high] = low_high(intervals, r);
    t.add_row({Cell::str(m.where()),
               Cell::str(m.model),
               Cell::integer_value(m.seq_len),
               Cell::integer_value(m.n_gpus),
               Cell::str(m.gpu),
               Cell::integer_value(m.micro_batch),
               Cell::integer_value(r.row->cfg.grad_accum()),
               Cell::integer_value(m.global_batch),
               Cell::str(std::string(to_string(m.precision))),
               Cell::str(std::string(to_string(m.mp_mode))),
               Cell::str(std::string(to_string(m.layout.sharding))),
               checkpointing_cell(m.layout.checkpointing),
               Cell::num(m.tokens_per_s, 0),
               Cell::num(p.tokens_per_s, 0),
               Cell::num(100 * r.error, 2),
               low,
               high,
               measured(m.mfu_percent),
               Cell::num(100 * p.mfu, 2),
               measured(m.hfu_percent),
               Cell::num(100 * p.hfu, 2),
               Cell::num(p.memory.peak_bytes / kGiB, 1),
               Cell::str(p.fits() ? "yes" : "no"),
               r.held_out.empty() ? Cell::empty() : Cell::str(r.held_out),
               r.held_out.empty() ? Cell::empty() : Cell::num(r.doublings, 2)});
  }
  return t;
}

void run_validate(const ValidateOptions& o) {
  fold_threads(o.threads);  // checked up front, with --cv or without
  Context ctx(o.common);
  apply_network_flags(ctx, o.network);
  const MeasuredTableOptions read{.framework = framework_flag(o.framework), .device = o.device};
  try {
    if (!o.device.empty()) ctx.device(o.device);
  } catch (const Error& e) {
    throw Error("--device: " + std::string(e.what()));
  }
  std::vector<std::string> warnings;
  std::vector<std::string> refused;
  const std::vector<ResolvedRow> rows = load_rows(ctx, o.tables, warnings, read, o.skip_refused ? &refused : nullptr);
  for (const auto& why : refused) warnings.push_back(why + " -- not predicted (--skip-refused)");
  if (rows.empty() && !refused.empty())
    throw Error("--skip-refused: tpsim refuses every row of the tables (" + std::to_string(refused.size()) +
                "; the first: " + refused.front() + ")");
  std::vector<std::string> devices;
  for (const auto& r : rows)
    if (std::find(devices.begin(), devices.end(), r.row.gpu) == devices.end()) devices.push_back(r.row.gpu);
  ctx.check_profiles_used(devices, "the tables' rows of");
  for (const auto& w : warnings) std::cerr << "tpsim: warning: " << w << "\n";

  std::vector<RowResult> results;
  if (o.cv.empty()) {
    for (const auto& r : rows) results.push_back(predict_row(r, ctx.profile(r.row.gpu).params));
  } else {
    results = held_out_results(ctx, rows, parse_cv(o.cv), o);
  }
  const Intervals intervals = intervals_by_device(ctx, results, !o.cv.empty());
  if (!o.plot.empty()) write_file_atomic(o.plot, validation_plot(results, intervals, !o.cv.empty()));
  std::vector<OutputTable> summaries = {summary_table(results)};
  if (!o.cv.empty())
    if (std::optional<OutputTable> coverage = coverage_table(ctx, results)) summaries.push_back(std::move(*coverage));
  if (ctx.format() == Format::kCsv) {
    emit(ctx.render({input_columns_table(rows, results, intervals, "validate")}, Format::kCsv), ctx.output());
    std::cerr << render(summaries, Format::kMarkdown);
    ctx.print_notes();
    return;
  }
  // llm-foundry's tables in tpsim's columns, as always; the other forms in their own columns.
  std::vector<OutputTable> tables = {foundry_form(rows) ? rows_table(results, intervals)
                                                        : input_columns_table(rows, results, intervals, "rows")};
  tables.insert(tables.end(), summaries.begin(), summaries.end());
  emit(ctx.render(tables), ctx.output());
  ctx.print_notes();
}

}  // namespace

void register_validate(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  CLI::App* cmd = app.add_subcommand("validate", "predict measured tables row by row and report the errors");
  cmd->add_option("--table,tables", o->tables,
                  "measured table (repeatable; also positional): llm-foundry's results, tpsim's general form "
                  "(markdown or CSV) or vTrain's CSV")
      ->required();
  cmd->add_option("--framework", o->framework,
                  "framework of rows whose table has no Framework column: composer, megatron or torchtitan")
      ->default_val("composer");
  cmd->add_option("--device", o->device, "the GPU of tables without a GPU column (vTrain's)")
      ->transform(lower_case_ids());
  cmd->add_option("--cv", o->cv,
                  "held-out errors only: model (leave one model size out), kfold:K, device (fit on the other "
                  "devices' rows), or extremes (hold out each device's smallest and largest model)");
  cmd->add_option("--fit-parameters", o->fit_parameters,
                  "with --cv: the parameters each fold fits (comma-separated; default: the table-level set)");
  cmd->add_option("--robust-scale", o->robust_scale, "with --cv: Huber scale of the fit's loss on log errors")
      ->default_val(0.05)
      ->check(finite_range(1e-4, 10.0));
  cmd->add_option("--plot", o->plot, "also write an SVG of predicted against measured throughput");
  cmd->add_flag("--skip-refused", o->skip_refused,
                "predict the rows tpsim models and warn of each it refuses (a layout or option it does not model), "
                "instead of stopping at the first");
  cmd->add_option("--prior-width", o->prior_width,
                  "with --cv: width of the prior on each fitted parameter's log (0: none)")
      ->default_val(0.0)
      ->check(finite_range(0.0, 100.0));
  add_fold_threads_flag(cmd, o->threads);
  add_network_flags(cmd, o->network);
  add_common_options(cmd, o->common);
  cmd->callback([o] { run_validate(*o); });
}

}  // namespace tpsim
