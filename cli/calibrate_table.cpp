// tpsim calibrate table: fit a device profile's system-level parameters to measured tables with
// Ceres, and write the profile with the fit's provenance: tables and rows, loss, residuals, each
// parameter's standard deviation, and the prediction interval from held-out errors.
#include <cmath>
#include <ctime>
#include <iostream>
#include <memory>

#include "calibrate/crossval.hpp"
#include "io/error.hpp"
#include "io/profile_io.hpp"
#include "io/progress.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/validation.hpp"

namespace tpsim {
namespace {

struct CalibrateTableOptions {
  CommonOptions common;
  std::vector<std::string> tables;
  std::string device;
  std::string base;
  std::string out;
  std::string parameters;  // comma-separated; empty: the default set
  std::string interval_cv = "model";
  bool transfer = false;  // fit the other devices' rows; carry the system-level parameters to --device
};

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

void run_calibrate_table(const CalibrateTableOptions& o, const std::string& command_line) {
  CommonOptions common = o.common;
  if (!o.base.empty()) common.profile_files.push_back(o.base);
  Context ctx(common);
  ctx.device(o.device);  // unknown device: Error
  if (!o.base.empty() && !ctx.has_user_profile(o.device))
    throw Error("--base " + o.base + ": the profile is for another device than --device " + o.device);

  std::vector<std::string> warnings;
  const std::vector<ResolvedRow> all = load_rows(ctx, o.tables, warnings);
  for (const auto& w : warnings) std::cerr << "tpsim: warning: " << w << "\n";
  std::vector<ResolvedRow> rows;
  for (const auto& r : all)
    if ((r.row.gpu == o.device) != o.transfer) rows.push_back(r);
  if (rows.empty())
    throw Error(o.transfer ? "--transfer: the tables have no rows of devices other than " + o.device
                           : "--device " + o.device + ": no row of the given tables is for this device (--transfer fits "
                                                      "other devices' rows and carries the result over)");
  if (!o.transfer && rows.size() < all.size())
    std::cerr << "tpsim: note: fitting the " << rows.size() << " rows for " << o.device << "; "
              << all.size() - rows.size() << " rows of other devices are not used\n";

  TableFitOptions options;
  options.parameters = table_fit_parameters(ctx, rows);
  if (!o.parameters.empty()) options.parameters = parse_parameter_list("--parameters", o.parameters);
  const DeviceProfile& base = ctx.base_profile(o.device);
  const std::vector<FitRow> fits = fit_rows(ctx, rows);
  const TableFitResult fit = fit_table(fits, *fits.front().base, options);
  // What the profile takes from the fit: everything fitted to its own rows; across devices only the
  // system-level parameters (the kernel-level ones describe the fitted devices' kernels).
  std::vector<const ParamInfo*> taken;
  for (const ParamInfo* param : options.parameters)
    if (!o.transfer || param->level == ParamLevel::kSystem) taken.push_back(param);

  // Held-out errors for the interval: for a transfer, each measured device predicted from the
  // others (--cv device); else leave one model size out when there are two, else 5 folds.
  std::vector<std::string> models;
  for (const auto& r : rows)
    if (std::find(models.begin(), models.end(), r.row.model) == models.end()) models.push_back(r.row.model);
  CvSpec cv = parse_cv(o.transfer ? "device" : o.interval_cv);
  if (cv.mode == CvMode::kModel && models.size() < 2) cv = parse_cv("kfold:5");
  TableFitOptions cv_options = options;
  cv_options.covariance = false;
  std::vector<double> held;
  Progress progress("held-out fits for the interval (--cv " + to_string(cv) + ")", 0);
  for (const auto& h : cross_validate(fits, cv, cv_options, [&](int done, int total) { progress.update(done, total); }))
    held.push_back(h.error);
  progress.finish();
  if (held.empty()) throw Error("--transfer: held-out errors need rows of at least two devices");

  DeviceProfile out = base;
  out.device = o.device;
  out.params = with_fitted(base.params, fit.params, taken);
  std::vector<std::string> fitted_devices;
  for (const auto& r : rows)
    if (std::find(fitted_devices.begin(), fitted_devices.end(), r.row.gpu) == fitted_devices.end())
      fitted_devices.push_back(r.row.gpu);
  const std::string detail = (o.transfer ? "transferred from a fit to " : "fitted to ") + std::to_string(rows.size()) +
                             " rows of " + join(fitted_devices, ", ") + " in " + join(o.tables, ", ") +
                             " (tpsim calibrate table, " + utc_timestamp() + ")";
  for (const auto& f : fit.fitted)
    if (f.determined && std::find(taken.begin(), taken.end(), f.param) != taken.end())
      out.sources[std::string(f.param->name)] = {SourceKind::kTableFit, detail, f.stddev};

  nlohmann::json jrows = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i)
    jrows.push_back({{"row", rows[i].row.where()},
                     {"measured_tokens_per_s", rows[i].row.tokens_per_s},
                     {"predicted_tokens_per_s", rows[i].row.tokens_per_s * std::exp(fit.residuals[i])},
                     {"log_residual", fit.residuals[i]},
                     {"outlier", static_cast<bool>(fit.outliers[i])}});
  // The rows flagged, by name, so that a reader sees them without scanning every row.
  nlohmann::json joutliers = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i)
    if (fit.outliers[i])
      joutliers.push_back({{"row", rows[i].row.where()},
                           {"model", rows[i].row.model},
                           {"seq_len", rows[i].row.seq_len},
                           {"n_gpus", rows[i].row.n_gpus},
                           {"error", std::exp(fit.residuals[i]) - 1.0}});
  nlohmann::json jparams = nlohmann::json::array();
  for (const auto& f : fit.fitted)
    jparams.push_back({{"name", std::string(f.param->name)}, {"value", f.value}, {"stddev", f.stddev < 0 ? nlohmann::json() : nlohmann::json(f.stddev)},
                       {"at_bound", f.at_bound}, {"determined_by_rows", f.determined}});
  out.extra["fit"] = {{"command", command_line},
                      {"transferred", o.transfer},
                      {"fitted_devices", fitted_devices},
                      {"date", utc_timestamp()},
                      {"tables", o.tables},
                      {"base_profile", base.origin},
                      {"loss", "Huber on log(predicted / measured), scale " + std::to_string(options.robust_scale)},
                      {"initial_cost", fit.initial_cost},
                      {"final_cost", fit.final_cost},
                      {"iterations", fit.iterations},
                      {"converged", fit.converged},
                      {"solver", fit.summary},
                      {"parameters", jparams},
                      {"outlier_threshold", "|log(predicted / measured)| > " + std::to_string(options.outlier_threshold)},
                      {"outliers", joutliers},
                      {"rows", jrows}};
  const ErrorSummary s = summarize_errors(held);
  set_prediction_interval(out, {s.p10, s.p90, s.rows,
                                "held-out errors of tpsim validate --cv " + to_string(cv) + " on " + join(o.tables, ", ") +
                                    (o.transfer ? " (a device predicted from the others' fit)" : "")});
  save_profile(o.out, out);

  // A brief report on stderr, in the manner of Ceres' own.
  std::cerr << "tpsim calibrate table: " << o.device << ", " << rows.size() << " rows"
            << (o.transfer ? " of " + join(fitted_devices, ", ") + " (system-level parameters transferred)" : "") << ", "
            << fit.summary << "\n";
  for (const auto& f : fit.fitted)
    if (std::find(taken.begin(), taken.end(), f.param) != taken.end())
      std::cerr << "  " << f.param->name << " = " << f.value << (f.stddev >= 0 ? " +- " + std::to_string(f.stddev) : "")
              << (f.at_bound ? " (at its bound)" : "")
              << (f.determined ? "" : " (no row depends on it: kept from the base profile)") << "\n";
  std::vector<double> errs;
  int outliers = 0;
  for (size_t i = 0; i < fit.residuals.size(); ++i) {
    errs.push_back(std::exp(fit.residuals[i]) - 1.0);
    if (fit.outliers[i]) {
      ++outliers;
      std::cerr << "  outlier: " << rows[i].row.where() << " (" << rows[i].row.model << ", seq " << rows[i].row.seq_len
                << ", " << rows[i].row.n_gpus << " GPUs) off by " << 100 * errs.back() << "%\n";
    }
  }
  const ErrorSummary fitted = summarize_errors(errs);
  std::cerr << "  fitted rows: MAPE " << 100 * fitted.mape << "%, " << outliers << " outliers; held-out ("
            << to_string(cv) << "): MAPE " << 100 * s.mape << "%, interval [" << 100 * s.p10 << "%, " << 100 * s.p90
            << "%]\n  wrote " << o.out << "\n";
}

}  // namespace

void register_calibrate_table(CLI::App& calibrate) {
  auto o = std::make_shared<CalibrateTableOptions>();
  auto* table = calibrate.add_subcommand("table", "fit the parameters kernel runs cannot measure to measured tables");
  table->add_option("--table", o->tables, "llm-foundry results table, markdown or CSV (repeatable)")->required();
  table->add_option("--device", o->device, "the device whose rows are fitted")->required();
  table->add_option("--base", o->base, "profile to start from (default: the device's reasoned default)");
  table->add_option("--out", o->out, "profile to write (atomically)")->required();
  table->add_option("--parameters", o->parameters, "comma-separated parameters to fit (default: the table-level set)");
  table->add_option("--interval-cv", o->interval_cv, "held-out scheme for the prediction interval")->default_val("model");
  table->add_flag("--transfer", o->transfer,
                  "--device has no rows: fit the other devices' rows and carry the system-level parameters over "
                  "(the interval then comes from predicting each measured device from the others)");
  table->add_option("--models", o->common.models_file, "YAML file of more models");
  table->callback([o] {
    std::string cmdline = "tpsim calibrate table";
    for (const auto& t : o->tables) cmdline += " --table " + t;
    cmdline += " --device " + o->device + (o->transfer ? " --transfer" : "");
    if (!o->base.empty()) cmdline += " --base " + o->base;
    cmdline += " --out " + o->out;
    run_calibrate_table(*o, cmdline);
  });
}

}  // namespace tpsim
