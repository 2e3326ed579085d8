#include "calibrate/fit_core.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

namespace tpsim {

double log_floor(const ParamInfo& param) { return param.unit == Unit::kSeconds ? 1e-7 : std::max(param.lower, 1e-12); }

ceres::Solver::Options fit_solver_options(int max_iterations, double tolerance) {
  ceres::Solver::Options o;
  o.linear_solver_type = ceres::DENSE_QR;
  o.max_num_iterations = max_iterations;
  o.function_tolerance = tolerance;
  o.parameter_tolerance = tolerance;
  o.num_threads = 1;
  o.logging_type = ceres::SILENT;
  return o;
}

CostParams with_fitted(const CostParams& base, const CostParams& values, const std::vector<const ParamInfo*>& params) {
  CostParams p = base;
  for (const ParamInfo* info : params) info->value(p) = info->value(values);
  return p;
}

namespace {

// A fitted time below this is reported as zero (see fitted_report).
constexpr double kZeroBelow_s = 1e-6;

// Central differences of 0.1% in log space (see add_log_error).
constexpr double kLogStep = 1e-3;

// r = error(base with the fitted values at exp(x)); false (Ceres shortens the step) when the
// prediction leaves the model's domain.
class LogErrorResidual {
 public:
  LogErrorResidual(const std::vector<const ParamInfo*>& params, const CostParams& base, LogErrorFn error)
      : params_(params), base_(base), error_(std::move(error)) {}

  bool operator()(double const* const* x, double* residual) const {
    CostParams p = base_;
    for (size_t i = 0; i < params_.size(); ++i) params_[i]->value(p) = std::exp(x[0][i]);
    const double e = error_(p);
    if (!std::isfinite(e)) return false;
    residual[0] = e;
    return true;
  }

 private:
  const std::vector<const ParamInfo*>& params_;
  const CostParams& base_;
  LogErrorFn error_;
};

// r = error(exp(x)) for parameters outside CostParams.
class VectorLogErrorResidual {
 public:
  VectorLogErrorResidual(size_t n, VectorLogErrorFn error) : n_(n), error_(std::move(error)) {}
  bool operator()(double const* const* x, double* residual) const {
    std::vector<double> values(n_);
    for (size_t i = 0; i < n_; ++i) values[i] = std::exp(x[0][i]);
    const double e = error_(values);
    if (!std::isfinite(e)) return false;
    residual[0] = e;
    return true;
  }

 private:
  size_t n_;
  VectorLogErrorFn error_;
};

// (x - center) / width, scaled to weigh like one log error of `scale`.
class PriorResidual {
 public:
  PriorResidual(size_t index, double center, double width, double scale)
      : index_(index), center_(center), width_(width), scale_(scale) {}
  bool operator()(double const* const* x, double* residual) const {
    residual[0] = scale_ * (x[0][index_] - center_) / width_;
    return true;
  }

 private:
  size_t index_;
  double center_, width_, scale_;
};

template <class Functor>
ceres::CostFunction* numeric_cost(Functor* functor, size_t n) {
  ceres::NumericDiffOptions diff;
  diff.relative_step_size = kLogStep;
  auto* cost = new ceres::DynamicNumericDiffCostFunction<Functor, ceres::CENTRAL>(functor, ceres::TAKE_OWNERSHIP, diff);
  cost->AddParameterBlock(static_cast<int>(n));
  cost->SetNumResiduals(1);
  return cost;
}

}  // namespace

LogSpaceFit::LogSpaceFit(std::vector<const ParamInfo*> params, const CostParams& start, const LogSpaceOptions& options)
    : params_(std::move(params)), options_(options) {
  for (const ParamInfo* p : params_) {
    lower_x_.push_back(std::log(std::max(p->lower, log_floor(*p))));
    upper_x_.push_back(std::log(std::min(p->upper, 1e300)));
  }
  for (size_t i = 0; i < params_.size(); ++i) x_.push_back(to_x(i, params_[i]->value(start)));
}

LogSpaceFit::LogSpaceFit(std::vector<const ParamInfo*> params, const std::vector<double>& start,
                         const LogSpaceOptions& options)
    : params_(std::move(params)), options_(options) {
  for (const ParamInfo* p : params_) {
    lower_x_.push_back(std::log(std::max(p->lower, log_floor(*p))));
    upper_x_.push_back(std::log(std::min(p->upper, 1e300)));
  }
  for (size_t i = 0; i < params_.size(); ++i) x_.push_back(to_x(i, start.at(i)));
}

double LogSpaceFit::to_x(size_t i, double value) const {
  return std::clamp(std::log(std::max(value, log_floor(*params_[i]))), lower_x_[i], upper_x_[i]);
}

void LogSpaceFit::add_log_error(const CostParams& base, LogErrorFn error) {
  ceres::CostFunction* cost = numeric_cost(new LogErrorResidual(params_, base, std::move(error)), size());
  log_errors_.push_back(problem_.AddResidualBlock(cost, new ceres::HuberLoss(options_.robust_scale), x_.data()));
}

void LogSpaceFit::add_log_error(VectorLogErrorFn error) {
  ceres::CostFunction* cost = numeric_cost(new VectorLogErrorResidual(size(), std::move(error)), size());
  log_errors_.push_back(problem_.AddResidualBlock(cost, new ceres::HuberLoss(options_.robust_scale), x_.data()));
}

void LogSpaceFit::add_prior(size_t index, double center, double width, double scale) {
  problem_.AddResidualBlock(numeric_cost(new PriorResidual(index, center, width, scale), size()), nullptr, x_.data());
}

std::vector<std::vector<double>> LogSpaceFit::seeded_starts(const std::vector<double>& x0, int count, double spread,
                                                            uint64_t seed) const {
  std::vector<std::vector<double>> starts = {x0};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> jitter(0.0, spread);
  for (int s = 1; s < count; ++s) {
    std::vector<double> x(size());
    for (size_t i = 0; i < size(); ++i) x[i] = std::clamp(x0[i] + jitter(rng), lower_x_[i], upper_x_[i]);
    starts.push_back(std::move(x));
  }
  return starts;
}

ceres::Solver::Summary LogSpaceFit::solve(const std::vector<std::vector<double>>& starts) {
  if (!bounded_) {
    for (size_t i = 0; i < size(); ++i) {
      problem_.SetParameterLowerBound(x_.data(), static_cast<int>(i), lower_x_[i]);
      problem_.SetParameterUpperBound(x_.data(), static_cast<int>(i), upper_x_[i]);
    }
    bounded_ = true;
  }
  const ceres::Solver::Options solver = fit_solver_options(options_.max_iterations, options_.tolerance);
  std::vector<double> best_x;
  ceres::Solver::Summary best;
  for (const std::vector<double>& start : starts) {
    x_ = start;  // same size: the problem's pointer into x_ stays valid
    ceres::Solver::Summary s;
    ceres::Solve(solver, &problem_, &s);
    if (best_x.empty() || s.final_cost < best.final_cost) {
      best = s;
      best_x = x_;
    }
  }
  x_ = best_x;
  return best;
}

std::vector<bool> LogSpaceFit::determined_at(const std::vector<double>& x0) {
  const std::vector<double> kept = x_;
  x_ = x0;
  ceres::CRSMatrix jacobian;
  ceres::Problem::EvaluateOptions eval;
  eval.residual_blocks = log_errors_;
  double cost = 0;
  problem_.Evaluate(eval, &cost, nullptr, nullptr, &jacobian);
  std::vector<double> column(size(), 0.0);
  for (int row = 0; row < jacobian.num_rows; ++row)
    for (int k = jacobian.rows[row]; k < jacobian.rows[row + 1]; ++k)
      column[static_cast<size_t>(jacobian.cols[k])] += jacobian.values[k] * jacobian.values[k];
  x_ = kept;
  std::vector<bool> determined(size());
  for (size_t i = 0; i < size(); ++i) determined[i] = column[i] > 1e-12;
  return determined;
}

std::vector<size_t> LogSpaceFit::pushing(size_t i, size_t most) {
  // A time under a microsecond is reported as zero at its bound (fitted_report): so here too.
  const bool zero_time = params_[i]->unit == Unit::kSeconds && std::exp(x_[i]) < kZeroBelow_s;
  const bool at_lower = std::fabs(x_[i] - lower_x_[i]) < 1e-6 || zero_time,
             at_upper = std::fabs(x_[i] - upper_x_[i]) < 1e-6;
  if (!at_lower && !at_upper) return {};
  ceres::CRSMatrix jacobian;
  std::vector<double> residuals;
  ceres::Problem::EvaluateOptions eval;
  eval.residual_blocks = log_errors_;
  double cost = 0;
  problem_.Evaluate(eval, &cost, &residuals, nullptr, &jacobian);
  // d(cost)/dx_i of row j is r_j * J_ji: negative pulls x_i up (past an upper bound), positive down.
  std::vector<std::pair<double, size_t>> pulls;
  for (int row = 0; row < jacobian.num_rows; ++row)
    for (int k = jacobian.rows[row]; k < jacobian.rows[row + 1]; ++k) {
      if (static_cast<size_t>(jacobian.cols[k]) != i) continue;
      const double g = residuals[static_cast<size_t>(row)] * jacobian.values[k];
      const double outward = at_upper ? -g : g;
      if (outward > 1e-12) pulls.emplace_back(outward, static_cast<size_t>(row));
    }
  std::stable_sort(pulls.begin(), pulls.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<size_t> out;
  for (size_t k = 0; k < pulls.size() && k < most; ++k) out.push_back(pulls[k].second);
  return out;
}

double LogSpaceFit::value(size_t i) const { return std::clamp(std::exp(x_[i]), params_[i]->lower, params_[i]->upper); }

std::vector<double> LogSpaceFit::stddevs(double final_cost) {
  const size_t n = size();
  std::vector<double> stddev(n, -1.0);
  const double dof = static_cast<double>(log_errors_.size()) - static_cast<double>(n);
  if (!(dof > 0)) return stddev;
  ceres::Covariance::Options copt;
  copt.algorithm_type = ceres::DENSE_SVD;
  copt.null_space_rank = -1;
  ceres::Covariance covariance(copt);
  const std::vector<std::pair<const double*, const double*>> blocks = {{x_.data(), x_.data()}};
  if (!covariance.Compute(blocks, &problem_)) return stddev;
  std::vector<double> c(n * n);
  covariance.GetCovarianceBlock(x_.data(), x_.data(), c.data());
  // Ceres returns (J'J)^-1; scaled by the residuals' variance it is the parameters' covariance.
  const double variance = 2.0 * final_cost / dof;
  for (size_t i = 0; i < n; ++i)
    if (c[i * n + i] >= 0) stddev[i] = value(i) * std::sqrt(c[i * n + i] * variance);
  return stddev;
}

FittedParameter fitted_report(const ParamInfo& param, double value, double stddev) {
  const double lo = std::max(param.lower, log_floor(param)), hi = std::min(param.upper, 1e300);
  const bool at_bound = std::fabs(std::log(value / lo)) < 1e-6 || std::fabs(std::log(hi / value)) < 1e-6;
  if (param.unit == Unit::kSeconds && value < kZeroBelow_s) return {&param, 0.0, stddev, true, true};
  return {&param, value, stddev, at_bound, true};
}

SolveReport solve_report(const ceres::Solver::Summary& summary) {
  return {.initial_cost = summary.initial_cost,
          .final_cost = summary.final_cost,
          .iterations = static_cast<int>(summary.iterations.size()),
          .converged = summary.termination_type == ceres::CONVERGENCE,
          .summary = summary.BriefReport()};
}

}  // namespace tpsim
