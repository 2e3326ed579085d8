// The machinery the fits of calibrate/ share (table_fit, kernel_fit, comm_fit): each fits a few
// CostParams values to tens or hundreds of log errors r = log(predicted / measured), and differs
// only in what it predicts and which parameters it frees.
//
// Parameters live in log space (x = log value) within the registry's physical bounds, so every
// step stays physical and relative changes weigh alike; a value whose bound is 0 is represented
// from a floor per unit (log of 0 is not). Residuals are robustified by a Huber loss; Ceres Solver
// runs from several starts (the given values, seeded perturbations or a fit's own estimates) and
// the lowest cost wins; ceres::Covariance at the optimum, scaled by the residual variance, gives
// each parameter's standard deviation (a log-space one is relative: value * sd).
#pragma once

#include <ceres/ceres.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/profile.hpp"

namespace tpsim {

// One fitted value as reported and written into profiles.
struct FittedParameter {
  const ParamInfo* param = nullptr;
  double value = 0;
  double stddev = -1;  // from the covariance, in the parameter's unit; < 0 when unavailable
  bool at_bound = false;
  // False when no residual depends on the parameter (say, a head-size effect in a table without
  // head size 64): it keeps its starting value and provenance.
  bool determined = true;
  // At a bound: the measurements (indexes in the order they were added) whose residuals pull the
  // parameter further past it, the strongest first (table_fit names them as rows).
  std::vector<size_t> pushed_by;
  // Where the parameter's physical range (its registry bounds) comes from, where the fit knows it.
  std::string_view range_source;
};

// The smallest value a fit represents in log space: seconds may be 0 in the registry, and are
// fitted from 1e-7 s up (table_fit's floor, which keeps its results — and the golden outputs of
// `validate --cv` — as they were; kernel_fit and comm_fit used 1e-9 s, and no launch overhead or
// per-step collective latency they fit comes near 100 ns). Other units from their lower bound,
// and never below 1e-12.
double log_floor(const ParamInfo& param);

// The Ceres Solver options the fits share: small dense problems solved by dense QR on one thread,
// silently, to tight tolerances.
ceres::Solver::Options fit_solver_options(int max_iterations, double tolerance);

// The error of one measurement under a candidate CostParams: log(predicted / measured). A value
// that is not finite tells Ceres the step left the model's domain.
using LogErrorFn = std::function<double(const CostParams&)>;
// The same for a model whose parameters are not CostParams fields (model/scaling's per-cluster and
// per-framework values): the fitted values in the fit's order. Their ParamInfo give the name,
// unit and bounds only (member is nullptr; value() is not used on them).
using VectorLogErrorFn = std::function<double(const std::vector<double>&)>;

// What every fit reports of Ceres' solve: its cost (robustified, 1/2 sum) before and after, the
// iterations, whether it converged, and Ceres' brief report.
struct SolveReport {
  double initial_cost = 0, final_cost = 0;
  int iterations = 0;
  bool converged = false;
  std::string summary;
};
SolveReport solve_report(const ceres::Solver::Summary& summary);

struct LogSpaceOptions {
  double robust_scale = 0.05;  // Huber loss scale on the log errors
  int max_iterations = 100;
  double tolerance = 1e-10;  // function and parameter tolerance
};

// A least-squares problem over `params` of a CostParams, in log space within their bounds.
class LogSpaceFit {
 public:
  // x starts at log(max(start value, floor)), clamped to the bounds.
  LogSpaceFit(std::vector<const ParamInfo*> params, const CostParams& start, const LogSpaceOptions& options);
  // Parameters outside CostParams, starting from `start` (one value per parameter).
  LogSpaceFit(std::vector<const ParamInfo*> params, const std::vector<double>& start, const LogSpaceOptions& options);

  // A robustified residual: `error` of `base` with the fitted values at exp(x). Differentiated by
  // central differences of 0.1% in log space: the model has kinks (tile and wave counts, max() in
  // the schedule and the collectives), and a wider step sees the trend rather than the nearest kink.
  // `base` must outlive the fit.
  void add_log_error(const CostParams& base, LogErrorFn error);
  // A robustified residual of the vector form (same differentiation).
  void add_log_error(VectorLogErrorFn error);
  // An unrobustified residual on x itself: scale * (x[index] - center) / width (a Gaussian prior).
  void add_prior(size_t index, double center, double width, double scale);

  size_t size() const { return params_.size(); }
  const std::vector<const ParamInfo*>& params() const { return params_; }
  const std::vector<double>& x() const { return x_; }
  double lower_x(size_t i) const { return lower_x_[i]; }
  double upper_x(size_t i) const { return upper_x_[i]; }
  double to_x(size_t i, double value) const;  // log(max(value, floor)) within the bounds

  // The given x, then count - 1 perturbations by N(0, spread) in each coordinate, clamped to the
  // bounds, drawn from a generator seeded with `seed` (so runs repeat exactly).
  std::vector<std::vector<double>> seeded_starts(const std::vector<double>& x0, int count, double spread,
                                                 uint64_t seed) const;
  // Solves from each start and keeps the lowest final cost (the first on a tie); x() is its optimum.
  ceres::Solver::Summary solve(const std::vector<std::vector<double>>& starts);

  // Which parameters some log-error residual moves with at x0: a zero Jacobian column means no
  // measurement depends on that parameter. Leaves x() as it was.
  std::vector<bool> determined_at(const std::vector<double>& x0);
  // The log errors (indexes in the order added) whose robustified gradient at x() pulls parameter i
  // outward past the bound it sits at, strongest first, at most `most`; empty when it is at none.
  std::vector<size_t> pushing(size_t i, size_t most);
  // The fitted value of parameter i: exp(x), clamped to its registry bounds (exp(log(bound)) can
  // land an ulp outside, which the profile reader then refuses).
  double value(size_t i) const;
  // Standard deviations at x() in each parameter's unit (< 0 where unavailable): ceres::Covariance
  // (dense SVD, which tolerates directions the measurements do not pin down) times the residual
  // variance 2 * final_cost / (log errors - parameters).
  std::vector<double> stddevs(double final_cost);

 private:
  std::vector<const ParamInfo*> params_;
  LogSpaceOptions options_;
  std::vector<double> x_, lower_x_, upper_x_;
  ceres::Problem problem_;
  std::vector<ceres::ResidualBlockId> log_errors_;
  bool bounded_ = false;  // Ceres takes bounds once the parameter block is in the problem
};

// The report of a fitted value: at its bound when within 1e-6 of it in log space (the lower one
// raised to the floor). A time below a microsecond — within a factor 10 of the floor, and below the
// fastest kernel launch or collective step any backend has — is the physical bound, zero, and is
// reported as 0 at its bound (table_fit's rule, which the golden `validate --cv` outputs depend on;
// comm_fit zeroed only a latency at the floor itself, kernel_fit never).
FittedParameter fitted_report(const ParamInfo& param, double value, double stddev);

// The values of `params` taken from `values`, everything else from `base`.
CostParams with_fitted(const CostParams& base, const CostParams& values, const std::vector<const ParamInfo*>& params);

}  // namespace tpsim
