#include "calibrate/table_fit.hpp"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "calibrate/solver_options.hpp"
#include "io/error.hpp"
#include "model/simulator.hpp"

namespace tpsim {

const std::vector<std::string>& default_table_fit_parameters() {
  static const std::vector<std::string> names = {
      // how fast compute runs in a long job, and how much of it checkpointing repeats
      "compute_clock_ratio", "recompute_fraction",
      // kernels no run on this device has measured (not the elementwise bandwidth: it is well known,
      // and the rows cannot tell it from the cross-entropy's once the smallest model is held out)
      "attn_fwd_efficiency", "attn_bwd_efficiency", "attn_head_dim_half", "xent_efficiency",
      // communication and its overlap
      "intra_node_link_efficiency", "inter_node_link_efficiency", "overlap_slowdown",
      // fixed CPU-side costs
      "block_overhead_s", "microbatch_overhead_s", "step_overhead_s"};
  return names;
}

CostParams with_fitted(const CostParams& base, const CostParams& fitted, const std::vector<std::string>& names) {
  CostParams p = base;
  for (const auto& name : names)
    if (const ParamInfo* info = find_param(name)) p.*(info->member) = fitted.*(info->member);
  return p;
}

double log_error(const FitRow& row, const CostParams& params) {
  const Prediction p = predict(*row.model, *row.device, params, row.cfg);
  return std::log(p.tokens_per_s / row.measured_tokens_per_s);
}

namespace {

// Parameters live in log space during the fit; time-like parameters that may be 0 get a floor.
struct Mapping {
  const ParamInfo* info;
  double floor;  // smallest value the fit represents (log of 0 is not)
};

double kLogStep = 1e-3;

double to_x(const Mapping& m, double v) { return std::log(std::max(v, m.floor)); }
double from_x(double x) { return std::exp(x); }

class RowResidual {
 public:
  RowResidual(const FitRow& row, const std::vector<Mapping>& maps) : row_(row), maps_(maps) {}

  bool operator()(double const* const* x, double* residual) const {
    CostParams p = *row_.base;
    for (size_t i = 0; i < maps_.size(); ++i) p.*(maps_[i].info->member) = from_x(x[0][i]);
    const double e = log_error(row_, p);
    if (!std::isfinite(e)) return false;
    residual[0] = e;
    return true;
  }

 private:
  const FitRow& row_;
  const std::vector<Mapping>& maps_;
};

// (x - x0) / width, scaled to weigh like one row error of `scale`.
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

}  // namespace

TableFitResult fit_table(const std::vector<FitRow>& rows, const CostParams& start, const TableFitOptions& options) {
  if (rows.empty()) throw Error("table fit: no rows to fit");
  for (const FitRow& row : rows)
    if (!row.base || !row.model || !row.device) throw Error("table fit: row " + row.where + " is incomplete");
  std::vector<Mapping> maps;
  for (const auto& name : options.parameters) {
    const ParamInfo* info = find_param(name);
    if (!info) throw Error("table fit: unknown parameter '" + name + "'");
    // Seconds may be 0; fit them from a microsecond floor up.
    const double floor = info->unit == std::string_view("s") ? 1e-7 : std::max(info->lower, 1e-12);
    maps.push_back({info, floor});
  }
  const size_t n = maps.size();
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = to_x(maps[i], start.*(maps[i].info->member));

  ceres::Problem problem;
  std::vector<ceres::ResidualBlockId> blocks;
  for (const FitRow& row : rows) {
    // The model has kinks (tile and wave counts, max() in the schedule): a step of 1e-3 in log
    // space (0.1%) sees the trend rather than the kink nearest the point.
    ceres::NumericDiffOptions diff;
    diff.relative_step_size = kLogStep;
    auto* cost = new ceres::DynamicNumericDiffCostFunction<RowResidual, ceres::CENTRAL>(
        new RowResidual(row, maps), ceres::TAKE_OWNERSHIP, diff);
    cost->AddParameterBlock(static_cast<int>(n));
    cost->SetNumResiduals(1);
    blocks.push_back(problem.AddResidualBlock(cost, new ceres::HuberLoss(options.robust_scale), x.data()));
  }
  if (options.prior_width > 0) {
    for (size_t i = 0; i < n; ++i) {
      auto* prior = new ceres::DynamicNumericDiffCostFunction<PriorResidual, ceres::CENTRAL>(
          new PriorResidual(i, x[i], options.prior_width, options.robust_scale));
      prior->AddParameterBlock(static_cast<int>(n));
      prior->SetNumResiduals(1);
      problem.AddResidualBlock(prior, nullptr, x.data());
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const ParamInfo& info = *maps[i].info;
    problem.SetParameterLowerBound(x.data(), static_cast<int>(i), std::log(std::max(info.lower, maps[i].floor)));
    problem.SetParameterUpperBound(x.data(), static_cast<int>(i), std::log(std::min(info.upper, 1e300)));
    x[i] = std::clamp(x[i], std::log(std::max(info.lower, maps[i].floor)), std::log(std::min(info.upper, 1e300)));
  }

  const ceres::Solver::Options solver = fit_solver_options(options.max_iterations, 1e-10);
  // The objective has local minima where rows leave a parameter weakly determined: start from the
  // reasoned values and from a few seeded perturbations of them, and keep the lowest cost.
  const std::vector<double> x0 = x;
  std::vector<double> best_x = x0;
  ceres::Solver::Summary summary;
  std::mt19937_64 rng(0x7470'7369'6dULL);
  std::normal_distribution<double> jitter(0.0, options.start_spread);
  bool have = false;
  for (int start_index = 0; start_index < std::max(1, options.starts); ++start_index) {
    for (size_t i = 0; i < n; ++i) {
      const double lo = problem.GetParameterLowerBound(x.data(), static_cast<int>(i));
      const double hi = problem.GetParameterUpperBound(x.data(), static_cast<int>(i));
      x[i] = start_index == 0 ? x0[i] : std::clamp(x0[i] + jitter(rng), lo, hi);
    }
    ceres::Solver::Summary s;
    ceres::Solve(solver, &problem, &s);
    if (!have || s.final_cost < summary.final_cost) {
      summary = s;
      best_x = x;
      have = true;
    }
  }
  x = best_x;

  // Which parameters the rows determine: a Jacobian column that is zero at the starting values means
  // no row's prediction moves with that parameter. (At the solution a parameter pinned at a bound
  // can have a vanishing column too, yet the rows did decide it.)
  std::vector<bool> determined(n, true);
  {
    x = x0;
    ceres::CRSMatrix jacobian;
    ceres::Problem::EvaluateOptions eval;
    eval.residual_blocks = blocks;
    double cost = 0;
    problem.Evaluate(eval, &cost, nullptr, nullptr, &jacobian);
    std::vector<double> column(n, 0.0);
    for (int row = 0; row < jacobian.num_rows; ++row)
      for (int k = jacobian.rows[row]; k < jacobian.rows[row + 1]; ++k)
        column[static_cast<size_t>(jacobian.cols[k])] += jacobian.values[k] * jacobian.values[k];
    for (size_t i = 0; i < n; ++i) determined[i] = column[i] > 1e-12;
    x = best_x;
  }

  TableFitResult r;
  r.params = start;
  for (size_t i = 0; i < n; ++i)
    // exp(log(bound)) can land an ulp outside the bound, which the profile reader then refuses.
    r.params.*(maps[i].info->member) = determined[i] ? std::clamp(from_x(x[i]), maps[i].info->lower, maps[i].info->upper)
                                                     : start.*(maps[i].info->member);
  r.initial_cost = summary.initial_cost;
  r.final_cost = summary.final_cost;
  r.iterations = static_cast<int>(summary.iterations.size());
  r.converged = summary.termination_type == ceres::CONVERGENCE;
  r.summary = summary.BriefReport();

  std::vector<double> stddev(n, -1.0);
  if (options.covariance) {
    ceres::Covariance::Options copt;
    copt.algorithm_type = ceres::DENSE_SVD;  // tolerates parameters the rows cannot pin down
    copt.null_space_rank = -1;
    ceres::Covariance cov(copt);
    std::vector<std::pair<const double*, const double*>> pairs = {{x.data(), x.data()}};
    if (cov.Compute(pairs, &problem)) {
      std::vector<double> c(n * n);
      cov.GetCovarianceBlock(x.data(), x.data(), c.data());
      // Ceres returns (J'J)^-1; scaled by the residuals' variance it is the parameters' covariance.
      // A log-space standard deviation s is a relative one: value * s.
      const double dof = static_cast<double>(rows.size()) - static_cast<double>(n);
      const double variance = dof > 0 ? 2.0 * summary.final_cost / dof : 0.0;
      for (size_t i = 0; i < n; ++i)
        if (c[i * n + i] >= 0 && dof > 0)
          stddev[i] = r.params.*(maps[i].info->member) * std::sqrt(c[i * n + i] * variance);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const ParamInfo& info = *maps[i].info;
    double& v = r.params.*(info.member);
    const double lo = std::max(info.lower, maps[i].floor), hi = std::min(info.upper, 1e300);
    bool at_bound = determined[i] && (std::fabs(std::log(v / lo)) < 1e-6 || std::fabs(std::log(hi / v)) < 1e-6);
    // A time within a microsecond of the fit's floor is the physical bound, zero.
    if (determined[i] && info.unit == std::string_view("s") && v < 1e-6) {
      v = 0.0;
      at_bound = true;
    }
    r.fitted.push_back({std::string(info.name), v, determined[i] ? stddev[i] : -1.0, at_bound, determined[i]});
  }
  for (const FitRow& row : rows) {
    const double e = log_error(row, with_fitted(*row.base, r.params, options.parameters));
    r.residuals.push_back(e);
    r.outliers.push_back(std::fabs(e) > options.outlier_threshold);
  }
  return r;
}

}  // namespace tpsim
