#include "calibrate/comm_fit.hpp"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>

#include "calibrate/fit_core.hpp"
#include "io/error.hpp"

namespace tpsim {

std::string_view to_string(LinkTier tier) { return tier == LinkTier::kIntraNode ? "intra_node" : "inter_node"; }

TierParameters tier_parameters(LinkTier tier) {
  if (tier == LinkTier::kIntraNode)
    return {&param_of(&CostParams::intra_node_link_efficiency), &param_of(&CostParams::intra_node_latency_s)};
  return {&param_of(&CostParams::inter_node_link_efficiency), &param_of(&CostParams::inter_node_latency_s)};
}

double comm_log_error(const CommMeasurement& m, const DeviceSpec& device, const CostParams& params) {
  const CostModel cost(device, params);
  return std::log(cost.collective_seconds(m.kind, m.bytes, m.group()) / m.median_s);
}

namespace {

// A start read off the measurements, for when the given values are far off (a GPU's defaults
// for a CPU's shared memory): per tier, the latency as if the fastest collective were all
// latency, and the efficiency of the highest bus bandwidth measured, both clamped to the bounds.
std::vector<double> start_from_measurements(const std::vector<CommMeasurement>& ms, const DeviceSpec& device,
                                            const std::vector<LinkTier>& tiers, const LogSpaceFit& fit) {
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
      const double link =
          tiers[t] == LinkTier::kIntraNode ? device.intra_node_bytes_per_s : device.inter_node_bytes_per_s;
      efficiency = std::max(efficiency, bus / link);
    }
    x.push_back(fit.to_x(2 * t, efficiency));
    x.push_back(fit.to_x(2 * t + 1, latency_s));
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
  std::vector<const ParamInfo*> params;
  for (LinkTier tier : {LinkTier::kIntraNode, LinkTier::kInterNode}) {
    if (!has[static_cast<int>(tier)]) continue;
    const double link = tier == LinkTier::kIntraNode ? device.intra_node_bytes_per_s : device.inter_node_bytes_per_s;
    if (!(link > 0))
      throw Error("collective fit: device " + device.id + " has no " + std::string(to_string(tier)) +
                  " link bandwidth");
    r.tiers.push_back(tier);
    params.push_back(tier_parameters(tier).efficiency);
    params.push_back(tier_parameters(tier).latency_s);
  }
  LogSpaceFit fit(params, start, {options.robust_scale, options.max_iterations, 1e-12});
  for (const CommMeasurement& m : ms)
    fit.add_log_error(start, [&m, &device](const CostParams& p) { return comm_log_error(m, device, p); });
  // Two starts: the given values and the measurements' own estimate; the lower cost wins.
  const ceres::Solver::Summary summary = fit.solve({fit.x(), start_from_measurements(ms, device, r.tiers, fit)});
  static_cast<SolveReport&>(r) = solve_report(summary);
  const std::vector<double> stddev =
      options.covariance ? fit.stddevs(summary.final_cost) : std::vector<double>(fit.size(), -1.0);
  r.params = start;
  for (size_t i = 0; i < fit.size(); ++i) {
    const FittedParameter f = fitted_report(*fit.params()[i], fit.value(i), stddev[i]);
    f.param->value(r.params) = f.value;
    r.fitted.push_back(f);
  }
  for (const CommMeasurement& m : ms) r.residuals.push_back(comm_log_error(m, device, r.params));
  return r;
}

}  // namespace tpsim
