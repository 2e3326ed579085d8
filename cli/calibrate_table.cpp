// tpsim calibrate table: fit a device profile's system-level parameters to measured tables with
// Ceres, and write the profile with the fit's provenance: tables and rows, loss, residuals, each
// parameter's standard deviation, and the prediction interval from held-out errors.
//
// The command: flags -> the rows of the tables (cli/validation.hpp) -> TableCalibrationOptions ->
// calibrate_table (calibrate/table_calibration.hpp) -> the record (io/calibration_report.hpp), the
// interval and the brief report.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>

#include "calibrate/table_calibration.hpp"
#include "io/calibration_report.hpp"
#include "io/error.hpp"
#include "io/profile_io.hpp"
#include "io/progress.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/run_settings.hpp"
#include "cli/validation.hpp"

namespace tpsim {
namespace {

struct CalibrateTableFlags {
  CommonOptions common;
  std::vector<std::string> tables;
  std::string device;
  std::string base;
  std::string out;
  std::string parameters;  // comma-separated; empty: the default set
  std::string interval_cv = "model";
  std::vector<std::string> widening_tables;  // whose held-out rows set the interval's widening
  std::string framework = "composer";        // of rows whose table has no Framework column
  bool transfer = false;  // fit the other devices' rows; carry the system-level parameters to --device
  std::string threads;    // --threads: held-out folds fitted at once (empty: one per core)
  NetworkFlags network;
};

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// The rows fitted: the device's own, or under --transfer every other device's.
std::vector<ResolvedRow> fitted_rows(Context& ctx, const CalibrateTableFlags& f) {
  std::vector<std::string> warnings;
  // --device is also the GPU of tables without a GPU column (vTrain's).
  const MeasuredTableOptions read{.framework = framework_flag(f.framework), .device = f.device};
  const std::vector<ResolvedRow> all = load_rows(ctx, f.tables, warnings, read);
  for (const auto& w : warnings) std::cerr << "tpsim: warning: " << w << "\n";
  std::vector<ResolvedRow> rows;
  for (const auto& r : all)
    if ((r.row.gpu == f.device) != f.transfer) rows.push_back(r);
  if (rows.empty())
    throw Error(f.transfer ? "--transfer: the tables have no rows of devices other than " + f.device
                           : "--device " + f.device +
                                 ": no row of the given tables is for this device (--transfer fits "
                                 "other devices' rows and carries the result over)");
  if (!f.transfer && rows.size() < all.size())
    std::cerr << "tpsim: note: fitting the " << rows.size() << " rows for " << f.device << "; "
              << all.size() - rows.size() << " rows of other devices are not used\n";
  return rows;
}

// "; pushed by file:line, ..." for a value at its bound, the rows pulling it further first.
std::string pushed_by(const FittedParameter& p, const std::vector<ResolvedRow>& rows) {
  std::string s;
  for (size_t k : p.pushed_by) s += (s.empty() ? "; pushed by " : ", ") + rows.at(k).row.where();
  return s;
}

// A brief report on stderr, in the manner of Ceres' own.
void print_report(const TableCalibration& c, const CalibrateTableFlags& f, const std::vector<ResolvedRow>& rows,
                  const ErrorSummary& held_out) {
  const TableFitResult& fit = c.fit;
  std::cerr << "tpsim calibrate table: " << f.device << ", " << rows.size() << " rows"
            << (f.transfer ? " of " + join(c.fitted_devices, ", ") + " (system-level parameters transferred)" : "")
            << ", " << fit.summary << "\n";
  for (const auto& p : fit.fitted)
    if (std::find(c.taken.begin(), c.taken.end(), p.param) != c.taken.end())
      std::cerr << "  " << p.param->name << " = " << p.value << (p.stddev >= 0 ? " +- " + std::to_string(p.stddev) : "")
                << (p.at_bound ? " (at its bound" + pushed_by(p, rows) + ")" : "")
                << (p.determined ? "" : " (no row depends on it: kept from the base profile)") << "\n";
  std::vector<double> errs;
  int outliers = 0;
  for (size_t i = 0; i < fit.residuals.size(); ++i) {
    // Of what the row measured: the residual is log(predicted / measured) of throughput, the
    // negative of that of step time.
    const double r = rows[i].row.step_time_measured() ? -fit.residuals[i] : fit.residuals[i];
    errs.push_back(std::exp(r) - 1.0);
    if (fit.outliers[i]) {
      ++outliers;
      std::cerr << "  outlier: " << rows[i].row.where() << " (" << rows[i].row.model << ", seq " << rows[i].row.seq_len
                << ", " << rows[i].row.n_gpus << " GPUs) off by " << 100 * errs.back() << "%\n";
    }
  }
  const ErrorSummary fitted = summarize_errors(errs);
  std::cerr << "  fitted rows: MAPE " << 100 * fitted.mape << "%, " << outliers << " outliers; held-out ("
            << to_string(c.cv) << "): MAPE " << 100 * held_out.mape << "%, interval [" << 100 * held_out.p10 << "%, "
            << 100 * held_out.p90 << "%]\n";
  if (c.widening_per_doubling) {
    double most = 0;
    for (const HeldOutError& h : c.beyond) most = std::max(most, h.doublings);
    std::cerr << "  beyond the fitted rows (" << c.beyond.size() << " held-out rows, up to " << most
              << " doublings outside): the interval widens by " << *c.widening_per_doubling
              << " of log(1 + error) per doubling\n";
  }
  std::cerr << "  wrote " << f.out << "\n";
}

std::string names_of(const std::vector<const ParamInfo*>& params) {
  std::string s;
  for (const ParamInfo* p : params) s += (s.empty() ? "" : ", ") + std::string(p->name);
  return s;
}

// The default set freed only as far as the rows determine it (determinable_parameters): the rest
// kept from the base profile, with a warning naming them. Parameters given with --parameters are all
// freed; a warning says when the rows cannot determine them.
void free_what_the_rows_determine(const std::vector<FitRow>& fits, bool asked,
                                  std::vector<const ParamInfo*>& parameters) {
  const std::vector<const ParamInfo*> determined = determinable_parameters(fits, parameters);
  if (determined.size() == parameters.size()) return;
  std::vector<const ParamInfo*> kept;
  for (const ParamInfo* p : parameters)
    if (std::find(determined.begin(), determined.end(), p) == determined.end()) kept.push_back(p);
  const std::string why = std::to_string(fits.size()) + " rows determine at most " + std::to_string(determined.size()) +
                          " of the " + std::to_string(parameters.size()) + " parameters (about " +
                          std::to_string(kRowsPerParameter) + " rows each)";
  if (asked) {
    std::cerr << "tpsim: warning: --parameters: " << why << "; fitting all asked, " << names_of(kept)
              << " among them\n";
    return;
  }
  std::cerr << "tpsim: warning: " << why << ": fitting " << names_of(determined) << "; keeping " << names_of(kept)
            << " from the base profile (--parameters frees them)\n";
  parameters = determined;
}

void run_calibrate_table(const CalibrateTableFlags& f, const std::string& command_line) {
  CommonOptions common = f.common;
  if (!f.base.empty()) common.profile_files.push_back(f.base);
  Context ctx(common);
  apply_network_flags(ctx, f.network);
  ctx.device(f.device);  // unknown device: Error
  if (!f.base.empty() && !ctx.has_user_profile(f.device))
    throw Error("--base " + f.base + ": the profile is for another device than --device " + f.device);
  const std::vector<ResolvedRow> rows = fitted_rows(ctx, f);

  TableCalibrationOptions o;
  o.device = f.device;
  o.device_spec = &ctx.device(f.device);
  o.transfer = f.transfer;
  o.tables = f.tables;
  o.fit.parameters = table_fit_parameters(ctx, rows);
  if (!f.parameters.empty()) o.fit.parameters = parse_parameter_list("--parameters", f.parameters);
  o.fit.threads = fold_threads(f.threads);
  if (!f.transfer) o.interval_cv = parse_cv(f.interval_cv);
  const DeviceProfile& base = ctx.base_profile(f.device);
  const std::vector<FitRow> fits = fit_rows(ctx, rows);
  free_what_the_rows_determine(fits, !f.parameters.empty(), o.fit.parameters);
  std::vector<MeasuredRow> measured;
  for (const auto& r : rows) measured.push_back(r.row);
  Progress progress("held-out fits for the interval (--cv " +
                        (f.transfer ? "device" : to_string(o.interval_cv) + ", then extremes") + ")",
                    0);
  o.progress = [&](int done, int total) { progress.update(done, total); };
  std::vector<ResolvedRow> widening_rows;
  if (!f.widening_tables.empty()) {
    if (f.transfer) throw Error("--widening-table: a transferred profile keeps its sibling's widening");
    std::vector<std::string> warnings;
    widening_rows = load_rows(ctx, f.widening_tables, warnings, {.framework = framework_flag(f.framework)});
    for (const auto& w : warnings) std::cerr << "tpsim: warning: " << w << "\n";
    o.widening_rows = fit_rows(ctx, widening_rows);
  }
  TableCalibration c = calibrate_table(o, fits, measured, base);
  progress.finish();

  c.profile.extra["fit"] = table_calibration_json(c, o, measured, base.origin, command_line);
  const ErrorSummary s = summarize_errors(c.held_out_errors);
  PredictionInterval interval{s.p10, s.p90, s.rows,
                              "held-out errors of tpsim validate --cv " + to_string(c.cv) + " on " +
                                  join(f.tables, ", ") +
                                  (f.transfer ? " (a device predicted from the others' fit)" : "")};
  if (c.widening_per_doubling) {
    interval.domain = c.domain;
    interval.widening_per_doubling = *c.widening_per_doubling;
    interval.widening_method = "what covers 80% at every distance (0-1, 1-2, over 2 doublings) of the " +
                               std::to_string(c.beyond.size()) + " held-out rows beyond their fold's rows of tpsim " +
                               "validate --cv " + to_string(c.cv) + " and --cv extremes on " +
                               join(f.widening_tables.empty() ? f.tables : f.widening_tables, ", ") +
                               ", each against its device's own held-out interval";
  }
  set_prediction_interval(c.profile, interval);
  set_profile_network(c.profile, ctx.device(f.device));
  save_profile(f.out, c.profile);
  print_report(c, f, rows, s);
  ctx.print_notes();
}

}  // namespace

void register_calibrate_table(CLI::App& calibrate) {
  auto o = std::make_shared<CalibrateTableFlags>();
  auto* table = calibrate.add_subcommand("table", "fit the parameters kernel runs cannot measure to measured tables");
  table
      ->add_option("--table", o->tables,
                   "measured table (repeatable): llm-foundry's results, tpsim's general form or vTrain's CSV")
      ->required();
  table
      ->add_option("--device", o->device,
                   "the device whose rows are fitted (and the GPU of tables without a GPU column)")
      ->required()
      ->transform(lower_case_ids());
  table
      ->add_option("--framework", o->framework,
                   "framework of rows whose table has no Framework column: composer, megatron or torchtitan")
      ->default_val("composer");
  table->add_option("--base", o->base, "profile to start from (default: the device's reasoned default)");
  table->add_option("--out", o->out, "profile to write (atomically)")->required();
  table->add_option("--parameters", o->parameters, "comma-separated parameters to fit (default: the table-level set)");
  table->add_option("--interval-cv", o->interval_cv, "held-out scheme for the prediction interval")
      ->default_val("model");
  table->add_option("--widening-table", o->widening_tables,
                    "measured table (repeatable) whose held-out rows, instead of the fitted rows, measure how fast "
                    "the interval widens beyond the fitted rows (other devices' tables: extrapolation the fitted "
                    "table cannot show)");
  table->add_flag("--transfer", o->transfer,
                  "--device has no rows: fit the other devices' rows and carry the system-level parameters over "
                  "(the interval then comes from predicting each measured device from the others)");
  table->add_option("--models", o->common.models_file, "YAML file of more models");
  add_fold_threads_flag(table, o->threads);
  add_network_flags(table, o->network);
  table->callback([o] {
    std::string cmdline = "tpsim calibrate table";
    for (const auto& t : o->tables) cmdline += " --table " + t;
    cmdline += " --device " + o->device + (o->transfer ? " --transfer" : "");
    if (o->framework != "composer") cmdline += " --framework " + o->framework;
    if (!o->base.empty()) cmdline += " --base " + o->base;
    for (const auto& t : o->widening_tables) cmdline += " --widening-table " + t;
    cmdline += " --out " + o->out;
    run_calibrate_table(*o, cmdline);
  });
}

}  // namespace tpsim
