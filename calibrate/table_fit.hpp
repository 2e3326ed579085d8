// Fitting the parameters kernel runs cannot measure to measured training throughput.
//
// Each row contributes r = log(predicted tokens/s / measured tokens/s): relative errors, so that
// 125m rows at millions of tokens/s and 70b rows at thousands weigh alike. The fit itself is
// calibrate/fit_core's: log space within the registry's bounds, a Huber loss that keeps a few odd
// rows from dragging the fit, seeded restarts, and each parameter's standard deviation from
// ceres::Covariance at the optimum.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "calibrate/fit_core.hpp"
#include "model/architecture.hpp"
#include "model/device.hpp"
#include "model/profile.hpp"
#include "model/training.hpp"

namespace tpsim {

struct FitRow {
  const ModelConfig* model = nullptr;
  const DeviceSpec* device = nullptr;
  const CostParams* base = nullptr;  // the device's profile; fitted parameters override it
  TrainConfig cfg;
  double measured_tokens_per_s = 0;
  std::string where;  // file:line, for reports
};

// The parameters a table fit adjusts by default: what kernels cannot measure, in units that carry
// across devices (fractions, ratios, seconds).
const std::vector<const ParamInfo*>& default_table_fit_parameters();

struct TableFitOptions {
  std::vector<const ParamInfo*> parameters = default_table_fit_parameters();
  // Huber loss scale on log errors: rows off by more than ~this fraction count linearly.
  double robust_scale = 0.05;
  int max_iterations = 200;
  bool covariance = true;
  // Rows whose |log error| after the fit exceeds this are reported as outliers.
  double outlier_threshold = 0.15;
  // A Gaussian prior on each fitted parameter's log, centred on its starting value: a parameter
  // moves a factor e^width from its reasoned value at the cost of one row off by robust_scale.
  // 0 turns the prior off. Regularises what the rows cannot pin down.
  double prior_width = 0;
  // Starts: the given values, then starts-1 seeded perturbations (log-space sd start_spread).
  int starts = 4;
  double start_spread = 0.7;
  // cross_validate: how many folds are fitted at once, each on a thread of its own (a fit itself
  // runs on one). The held-out errors do not depend on it.
  int threads = 1;
};

struct TableFitResult : SolveReport {
  CostParams params;
  std::vector<FittedParameter> fitted;
  std::vector<double> residuals;  // log(predicted / measured) per row, after the fit
  std::vector<bool> outliers;
};

// Fits `options.parameters` to `rows`, starting from their values in `start`. Rows may come from
// several devices: each keeps its own profile (`base`) and shares the fitted values, in the terms of
// the first row's device (attention efficiencies reach another device's rows through on_device and
// sm_clock_scale). The result's
// `params` is `start` with the fitted values. Error when rows are empty or incomplete.
TableFitResult fit_table(const std::vector<FitRow>& rows, const CostParams& start, const TableFitOptions& options);

// The physical range of a parameter a table fit adjusts (its registry bounds) and where it comes
// from: kernels, datasheets or the literature. "" for a parameter without one.
std::string_view range_source(const ParamInfo& param);

// log(predicted / measured) of one row under `params` (its device's profile with fitted values).
double log_error(const FitRow& row, const CostParams& params);

// How much the rows depend on each of `params`: the mean over rows of |d log(predicted) / d log(p)|,
// by moving each parameter 1% from the row's own profile (0: no row depends on it).
std::vector<double> parameter_sensitivities(const std::vector<FitRow>& rows,
                                            const std::vector<const ParamInfo*>& params);

// About three rows per freed parameter: fewer leave the fit free to trade parameters against one
// another and the rows' noise (kRowsPerParameter).
inline constexpr int kRowsPerParameter = 3;

// What `rows` can determine of `params`: all of them where there are kRowsPerParameter rows a
// parameter (a parameter no row depends on is then left to the fit, which keeps it: fit_table);
// else the ones the rows depend on most (parameter_sensitivities), one per kRowsPerParameter rows
// (at least one), in the order given.
std::vector<const ParamInfo*> determinable_parameters(const std::vector<FitRow>& rows,
                                                      const std::vector<const ParamInfo*>& params);

// What carries across devices for the attention kernels. The runs' attention kernels (FlashAttention
// 1 and 2, the Triton kernel; 2023) issue Ampere's mma.sync on every device and none of Hopper's
// wgmma: their rate scales with SMs x clock, not with the tensor-core peak a cuBLAS GEMM reaches.
// (Published FlashAttention-2 forward rates at head size 128: about 220 TFLOP/s on A100, Dao 2023;
// about 350-370 on H100 SXM5, Shah et al. 2024, Fig. 1: a ratio of 1.6, where SMs x clock give
// 1.59 and the tensor peaks 3.2.) The factor that turns `from`'s attention efficiencies (fractions
// of its bf16 GEMM rate) into `to`'s: (from rate / to rate) x (to SMs x clock) / (from SMs x clock).
// 1 when either datasheet lacks a boost clock (the efficiency then carries as it is).
double sm_clock_scale(const DeviceSpec& from, const CostParams& from_params, const DeviceSpec& to,
                      const CostParams& to_params);

// True for the parameters that carry across devices by sm_clock_scale (attention efficiencies).
bool scales_by_sm_clock(const ParamInfo& param);

// `shared` (values fitted in `from`'s terms) as `to` takes them: the sm_clock_scale parameters
// among `params` scaled, capped at their upper bound; the others as they are.
CostParams on_device(const CostParams& shared, const std::vector<const ParamInfo*>& params, double scale);

}  // namespace tpsim
