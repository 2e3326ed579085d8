#include "calibrate/table_fit.hpp"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "io/error.hpp"
#include "model/simulator.hpp"

namespace tpsim {

const std::vector<const ParamInfo*>& default_table_fit_parameters() {
  static const std::vector<const ParamInfo*> params = {
      // how fast compute runs in a long job, and how much of it checkpointing repeats
      &param_of(&CostParams::compute_clock_ratio), &param_of(&CostParams::recompute_fraction),
      // kernels no run on this device has measured (not the elementwise bandwidth: it is well known,
      // and the rows cannot tell it from the cross-entropy's once the smallest model is held out)
      &param_of(&CostParams::attn_fwd_efficiency), &param_of(&CostParams::attn_bwd_efficiency),
      &param_of(&CostParams::attn_head_dim_half), &param_of(&CostParams::xent_efficiency),
      // communication and its overlap
      &param_of(&CostParams::intra_node_link_efficiency), &param_of(&CostParams::inter_node_link_efficiency),
      &param_of(&CostParams::overlap_slowdown),
      // fixed CPU-side costs
      &param_of(&CostParams::block_overhead_s), &param_of(&CostParams::microbatch_overhead_s),
      &param_of(&CostParams::step_overhead_s)};
  return params;
}

double log_error(const FitRow& row, const CostParams& params) {
  const Prediction p = predict(*row.model, *row.device, params, row.cfg);
  return std::log(p.tokens_per_s / row.measured_tokens_per_s);
}

namespace {
// The seed of the restarts' perturbations (fixed: fits repeat exactly).
constexpr uint64_t kStartSeed = 0x7470'7369'6dULL;
}  // namespace

TableFitResult fit_table(const std::vector<FitRow>& rows, const CostParams& start, const TableFitOptions& options) {
  if (rows.empty()) throw Error("table fit: no rows to fit");
  for (const FitRow& row : rows)
    if (!row.base || !row.model || !row.device) throw Error("table fit: row " + row.where + " is incomplete");
  LogSpaceFit fit(options.parameters, start, {options.robust_scale, options.max_iterations, 1e-10});
  const size_t n = fit.size();
  for (const FitRow& row : rows)
    fit.add_log_error(*row.base, [&row](const CostParams& p) { return log_error(row, p); });
  const std::vector<double> x0 = fit.x();
  if (options.prior_width > 0)
    for (size_t i = 0; i < n; ++i) fit.add_prior(i, x0[i], options.prior_width, options.robust_scale);

  // The objective has local minima where rows leave a parameter weakly determined: start from the
  // reasoned values and from a few seeded perturbations of them, and keep the lowest cost.
  const ceres::Solver::Summary summary =
      fit.solve(fit.seeded_starts(x0, std::max(1, options.starts), options.start_spread, kStartSeed));
  // Which parameters the rows determine, judged at the starting values: at the solution a parameter
  // pinned at a bound can have a vanishing column too, yet the rows did decide it.
  const std::vector<bool> determined = fit.determined_at(x0);

  TableFitResult r;
  r.params = start;
  r.initial_cost = summary.initial_cost;
  r.final_cost = summary.final_cost;
  r.iterations = static_cast<int>(summary.iterations.size());
  r.converged = summary.termination_type == ceres::CONVERGENCE;
  r.summary = summary.BriefReport();
  const std::vector<double> stddev = options.covariance ? fit.stddevs(summary.final_cost) : std::vector<double>(n, -1.0);
  for (size_t i = 0; i < n; ++i) {
    const ParamInfo* info = fit.params()[i];
    // An undetermined parameter keeps its starting value (and, in a profile, its provenance).
    const FittedParameter f = determined[i] ? fitted_report(*info, fit.value(i), stddev[i])
                                            : FittedParameter{info, info->value(start), -1.0, false, false};
    info->value(r.params) = f.value;
    r.fitted.push_back(f);
  }
  for (const FitRow& row : rows) {
    const double e = log_error(row, with_fitted(*row.base, r.params, options.parameters));
    r.residuals.push_back(e);
    r.outliers.push_back(std::fabs(e) > options.outlier_threshold);
  }
  return r;
}

}  // namespace tpsim
