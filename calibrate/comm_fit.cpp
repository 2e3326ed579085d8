#include "calibrate/comm_fit.hpp"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>

#include "calibrate/solver_options.hpp"
#include "io/error.hpp"

namespace tpsim {

std::string_view to_string(LinkTier tier) {
  return tier == LinkTier::kIntraNode ? "intra_node" : "inter_node";
}

TierParameters tier_parameters(LinkTier tier) {
  if (tier == LinkTier::kIntraNode) return {"intra_node_link_efficiency", "intra_node_latency_s"};
  return {"inter_node_link_efficiency", "inter_node_latency_s"};
}

double comm_log_error(const CommMeasurement& m, const DeviceSpec& device, const CostParams& params) {
  const CostModel cost(device, params);
  return std::log(cost.collective_seconds(m.kind, m.bytes, m.group()) / m.median_s);
}

namespace {

// Latencies may be 0 (the registry's bound); log space represents them from a nanosecond up,
// three orders below the fastest per-step latency of any MPI or NCCL transport.
constexpr double kLatencyFloor_s = 1e-9;

// Central differences of 0.1% in log space, as in table_fit: the formula is smooth except where
// the max() of the intra- and inter-node phases switches.
constexpr double kLogStep = 1e-3;

struct Mapping {
  const ParamInfo* info;
  double lower_x, upper_x;  // bounds in log space
};

Mapping mapping_of(std::string_view name) {
  const ParamInfo* info = find_param(name);
  const double floor = info->unit == std::string_view("s") ? kLatencyFloor_s : 1e-12;
  return {info, std::log(std::max(info->lower, floor)), std::log(info->upper)};
}

class MeasurementResidual {
 public:
  MeasurementResidual(const CommMeasurement& m, const DeviceSpec& device, const CostParams& start,
                      const std::vector<Mapping>& maps)
      : m_(m), device_(device), start_(start), maps_(maps) {}

  bool operator()(double const* const* x, double* residual) const {
    CostParams p = start_;
    for (size_t i = 0; i < maps_.size(); ++i) p.*(maps_[i].info->member) = std::exp(x[0][i]);
    const double e = comm_log_error(m_, device_, p);
    if (!std::isfinite(e)) return false;
    residual[0] = e;
    return true;
  }

 private:
  const CommMeasurement& m_;
  const DeviceSpec& device_;
  const CostParams& start_;
  const std::vector<Mapping>& maps_;
};

// A start read off the measurements, for when the given values are far off (a GPU's defaults
// for a CPU's shared memory): per tier, the latency as if the fastest collective were all
// latency, and the efficiency of the highest bus bandwidth measured, both clamped to the bounds.
std::vector<double> start_from_measurements(const std::vector<CommMeasurement>& ms, const DeviceSpec& device,
                                            const std::vector<LinkTier>& tiers, const std::vector<Mapping>& maps) {
  std::vector<double> x;
  for (size_t t = 0; t < tiers.size(); ++t) {
    double latency_s = 1e300, efficiency = 0;
    for (const CommMeasurement& m : ms) {
      if (m.tier() != tiers[t]) continue;
      const double passes = m.kind == CollectiveKind::kAllReduce ? 2.0 : 1.0;
      const double n = static_cast<double>(m.ranks), nodes = static_cast<double>(m.nodes);
      latency_s = std::min(latency_s, m.median_s / (passes * (n - 1.0)));
      // Bus bandwidth of the tier's link, as the cost model's bandwidth term counts it.
      const double bus = tiers[t] == LinkTier::kIntraNode ? passes * (n - 1.0) / n * m.bytes / m.median_s
                                                          : passes * (nodes - 1.0) / nodes * m.bytes / m.median_s;
      const double link = tiers[t] == LinkTier::kIntraNode ? device.intra_node_bytes_per_s : device.inter_node_bytes_per_s;
      efficiency = std::max(efficiency, bus / link);
    }
    const Mapping& me = maps[2 * t];
    const Mapping& ml = maps[2 * t + 1];
    x.push_back(std::clamp(std::log(std::max(efficiency, 1e-12)), me.lower_x, me.upper_x));
    x.push_back(std::clamp(std::log(std::max(latency_s, kLatencyFloor_s)), ml.lower_x, ml.upper_x));
  }
  return x;
}

}  // namespace

CommFitResult fit_comm(const std::vector<CommMeasurement>& ms, const DeviceSpec& device, const CostParams& start,
                       const CommFitOptions& options) {
  if (ms.empty()) throw Error("collective fit: no measurements");
  bool has[2] = {false, false};
  for (const CommMeasurement& m : ms) {
    if (m.ranks < 2 || m.nodes < 1 || m.nodes > m.ranks)
      throw Error("collective fit: a measurement over " + std::to_string(m.ranks) + " ranks on " +
                  std::to_string(m.nodes) + " nodes (a collective needs at least two ranks, at most one node each)");
    if (!(m.bytes > 0) || !(m.median_s > 0) || !std::isfinite(m.bytes) || !std::isfinite(m.median_s))
      throw Error("collective fit: a measurement over " + std::to_string(m.ranks) +
                  " ranks needs positive, finite bytes and seconds");
    has[static_cast<int>(m.tier())] = true;
  }
  CommFitResult r;
  std::vector<Mapping> maps;
  for (LinkTier tier : {LinkTier::kIntraNode, LinkTier::kInterNode}) {
    if (!has[static_cast<int>(tier)]) continue;
    const double link = tier == LinkTier::kIntraNode ? device.intra_node_bytes_per_s : device.inter_node_bytes_per_s;
    if (!(link > 0))
      throw Error("collective fit: device " + device.id + " has no " + std::string(to_string(tier)) + " link bandwidth");
    r.tiers.push_back(tier);
    maps.push_back(mapping_of(tier_parameters(tier).efficiency));
    maps.push_back(mapping_of(tier_parameters(tier).latency_s));
  }
  const size_t n = maps.size();

  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = std::clamp(std::log(std::max(start.*(maps[i].info->member), std::exp(maps[i].lower_x))), maps[i].lower_x,
                      maps[i].upper_x);

  ceres::Problem problem;
  for (const CommMeasurement& m : ms) {
    ceres::NumericDiffOptions diff;
    diff.relative_step_size = kLogStep;
    auto* cost = new ceres::DynamicNumericDiffCostFunction<MeasurementResidual, ceres::CENTRAL>(
        new MeasurementResidual(m, device, start, maps), ceres::TAKE_OWNERSHIP, diff);
    cost->AddParameterBlock(static_cast<int>(n));
    cost->SetNumResiduals(1);
    problem.AddResidualBlock(cost, new ceres::HuberLoss(options.robust_scale), x.data());
  }
  for (size_t i = 0; i < n; ++i) {
    problem.SetParameterLowerBound(x.data(), static_cast<int>(i), maps[i].lower_x);
    problem.SetParameterUpperBound(x.data(), static_cast<int>(i), maps[i].upper_x);
  }

  const ceres::Solver::Options solver = fit_solver_options(options.max_iterations, 1e-12);
  // Two starts: the given values and the measurements' own estimate; the lower cost wins.
  const std::vector<std::vector<double>> starts = {x, start_from_measurements(ms, device, r.tiers, maps)};
  std::vector<double> best_x;
  ceres::Solver::Summary summary;
  for (const std::vector<double>& s : starts) {
    x = s;
    ceres::Solver::Summary this_summary;
    ceres::Solve(solver, &problem, &this_summary);
    if (best_x.empty() || this_summary.final_cost < summary.final_cost) {
      summary = this_summary;
      best_x = x;
    }
  }
  x = best_x;
  r.initial_cost = summary.initial_cost;
  r.final_cost = summary.final_cost;
  r.iterations = static_cast<int>(summary.iterations.size());
  r.converged = summary.termination_type == ceres::CONVERGENCE;
  r.summary = summary.BriefReport();

  std::vector<double> stddev(n, -1.0);
  const double dof = static_cast<double>(ms.size()) - static_cast<double>(n);
  if (options.covariance && dof > 0) {
    ceres::Covariance::Options copt;
    copt.algorithm_type = ceres::DENSE_SVD;  // a tier whose latency the sizes barely constrain still gets a value
    copt.null_space_rank = -1;
    ceres::Covariance covariance(copt);
    const std::vector<std::pair<const double*, const double*>> blocks = {{x.data(), x.data()}};
    if (covariance.Compute(blocks, &problem)) {
      std::vector<double> c(n * n);
      covariance.GetCovarianceBlock(x.data(), x.data(), c.data());
      // (J'J)^-1 times the residuals' variance; a log-space standard deviation is a relative one.
      const double variance = 2.0 * summary.final_cost / dof;
      for (size_t i = 0; i < n; ++i)
        if (c[i * n + i] >= 0) stddev[i] = std::exp(x[i]) * std::sqrt(c[i * n + i] * variance);
    }
  }

  r.params = start;
  for (size_t i = 0; i < n; ++i) {
    const ParamInfo& info = *maps[i].info;
    double value = std::clamp(std::exp(x[i]), info.lower, info.upper);  // exp(log(bound)) may miss it by an ulp
    bool at_bound = std::fabs(x[i] - maps[i].lower_x) < 1e-6 || std::fabs(maps[i].upper_x - x[i]) < 1e-6;
    // A latency at the fit's floor is the physical bound, zero.
    if (info.unit == std::string_view("s") && std::fabs(x[i] - maps[i].lower_x) < 1e-6) value = 0.0;
    r.params.*(info.member) = value;
    r.fitted.push_back({std::string(info.name), value, stddev[i], at_bound, true});
  }
  for (const CommMeasurement& m : ms) r.residuals.push_back(comm_log_error(m, device, r.params));
  return r;
}

}  // namespace tpsim
