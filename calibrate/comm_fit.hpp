// Fitting the cost model's collective parameters to timed collectives (`tpsim calibrate comm`).
//
// Each measurement contributes r = log(predicted / measured median), where the prediction is
// CostModel::collective_seconds itself (model/cost.hpp), so that fitted values mean exactly what
// the simulator does with them. For a buffer of B bytes over n ranks on N nodes:
//   one node:  (n-1)/n * B / (intra_node_bytes_per_s * intra_node_link_efficiency) + (n-1) * intra_node_latency_s
//   N nodes:   max(that bandwidth term, (N-1)/N * B / (inter_node_bytes_per_s * inter_node_link_efficiency))
//              + (n-1) * inter_node_latency_s
// for an all-gather or a reduce-scatter, twice that for an all-reduce. The link bandwidths come
// from the device spec; the fit finds the efficiencies (achieved bus bandwidth over the spec's
// link bandwidth) and the per-step latencies of each link tier the measurements cover: same node
// (groups on one node) and across nodes (groups spanning several). A tier without measurements
// keeps its values.
//
// The fit is calibrate/fit_core's: parameters in log space within the registry's bounds, a Huber
// loss on the log errors (the odd size a library runs with another algorithm counts linearly),
// Ceres Solver from two starts, and standard deviations from ceres::Covariance scaled by the
// residual variance.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "calibrate/fit_core.hpp"
#include "model/cost.hpp"
#include "model/device.hpp"
#include "model/profile.hpp"

namespace tpsim {

// The links a collective's time depends on (model/cost.hpp): NVLink-like links inside a node, or
// the nodes' NICs once the group spans nodes.
enum class LinkTier : uint8_t { kIntraNode, kInterNode };
std::string_view to_string(LinkTier tier);  // "intra_node", "inter_node"

// The parameters CostModel::collective_seconds takes from a tier: {link efficiency, latency}.
struct TierParameters {
  const ParamInfo* efficiency;
  const ParamInfo* latency_s;
};
TierParameters tier_parameters(LinkTier tier);

// One timed collective.
struct CommMeasurement {
  CollectiveKind kind = CollectiveKind::kAllGather;
  double bytes = 0;   // the full buffer as the cost model counts it (as actually run, after rounding)
  int64_t ranks = 0;  // ranks in the group
  int64_t nodes = 0;  // nodes they span
  double median_s = 0, p10_s = 0, p90_s = 0;
  int repetitions = 0;

  LinkTier tier() const { return nodes > 1 ? LinkTier::kInterNode : LinkTier::kIntraNode; }
  CommGroup group() const { return {ranks, nodes, 1}; }
};

struct CommFitOptions {
  // Huber loss scale on log errors: a measurement off by more than ~this fraction counts linearly.
  double robust_scale = 0.1;
  int max_iterations = 200;
  bool covariance = true;
};

struct CommFitResult : SolveReport {    // of the kept start
  CostParams params;                    // the start with the fitted values
  std::vector<LinkTier> tiers;          // the tiers the measurements cover, in enum order
  std::vector<FittedParameter> fitted;  // per tier: efficiency, then latency
  std::vector<double> residuals;        // log(predicted / measured median), per measurement
};

// log(CostModel(device, params).collective_seconds(...) / m.median_s).
double comm_log_error(const CommMeasurement& m, const DeviceSpec& device, const CostParams& params);

// Fits the efficiency and latency of every tier `measurements` cover, starting from `start`.
// Error when there are no measurements, a measurement is not a collective over at least two ranks
// with a positive time, or the device spec lacks a tier's link bandwidth.
CommFitResult fit_comm(const std::vector<CommMeasurement>& measurements, const DeviceSpec& device,
                       const CostParams& start, const CommFitOptions& options = {});

}  // namespace tpsim
