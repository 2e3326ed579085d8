// Fitting model/scaling's parameters to a data-parallel scaling table, and its held-out test.
// The parameters: per cluster, the intra-node and inter-node link efficiencies; one overlap
// slowdown; per framework, the exposed share of the all-reduce (DDP's last bucket is added by the
// model); per model, the fixed fraction of the one-GPU step. All go through calibrate/fit_core's
// LogSpaceFit (log space within bounds, Huber loss, seeded restarts, covariance).
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "calibrate/fit_core.hpp"
#include "io/scaling_io.hpp"
#include "model/scaling.hpp"

namespace tpsim {

// A table row resolved for the model: its run, the cluster it ran on, the one-GPU row it scales.
struct ScaleCase {
  size_t row = 0;     // index into ScalingTable::rows
  size_t anchor = 0;  // the one-GPU row's index
  ScalingRun run;
  const DeviceSpec* cluster = nullptr;
  std::string cluster_id, model, group;
  double measured = 0;  // 0: missing
};

// A table's rows resolved: the clusters (data/clusters files; the 32gpu table's unnamed cluster of
// its own node size, whose links are unknown: nominal 1000 gradients/s per GPU link and 100 per
// node on the network, so that its fitted
// efficiencies are rates relative to that) and one case per row with a one-GPU row. Rows without
// one are listed in `unanchored`. Move-only: the cases point into `clusters`.
struct ScaleInputs {
  std::map<std::string, DeviceSpec> clusters;
  std::vector<ScaleCase> cases;
  std::vector<size_t> unanchored;
  ScaleInputs() = default;
  ScaleInputs(ScaleInputs&&) = default;
  ScaleInputs(const ScaleInputs&) = delete;
};
ScaleInputs scale_inputs(const ScalingTable& t, const std::map<std::string, ScalingModel>& models);

// A fitted share's physical range and the prior centred in it (width in log space; 0: no prior).
struct ScaleRange {
  double lower = 0, upper = 1, center = 0, width = 0;
};
struct ScalePrior {
  double center = 0, width = 0;  // width 0: none
};

// The named parameters of a fit over some clusters, frameworks and models (names and bounds for
// fit_core; the ParamInfo live as long as the set).
class ScaleParamSet {
 public:
  ScaleParamSet(const std::vector<ScaleCase>& cases);
  const std::vector<const ParamInfo*>& params() const { return ptrs_; }
  std::vector<double> start() const;
  ScalingParams for_case(const ScaleCase& c, const std::vector<double>& values) const;
  // The index of the parameter of this name (as ParamInfo::name spells it), or -1.
  int index(const std::string& name) const;
  // One per parameter: the Gaussian prior in log space on the sourced value (links of a named
  // cluster, a named framework's exposed share), or width 0.
  const std::vector<ScalePrior>& priors() const { return priors_; }

 private:
  size_t add(const std::string& name, Unit unit, double lower, double upper, double start, const char* meaning,
             double prior_width = 0);
  std::deque<std::string> names_;
  std::deque<ParamInfo> infos_;
  std::vector<const ParamInfo*> ptrs_;
  std::vector<double> start_;
  std::vector<ScalePrior> priors_;
  std::map<std::string, size_t> intra_, inter_, exposed_, fixed_, jitter_;
  size_t slowdown_ = 0;
  static constexpr size_t kNone = static_cast<size_t>(-1);
  size_t coordination_ = kNone;  // Horovod's seconds per step, when a case runs Horovod
};

// The coefficient of variation (sample standard deviation / mean) of repeated measurements.
double repeat_cv(const std::vector<double>& values);

// A fitted parameter that ended at a bound, and the groups whose residuals push it there: the
// derivative of a group's squared log errors, sum of r * dr/d(log value), is negative at an upper
// bound (raising the value would lower its error) or positive at a lower one.
struct BoundPush {
  std::string group;
  double gradient = 0;  // d(0.5 sum r^2) / d(log value) over the group's rows
};
struct AtBoundNote {
  size_t param = 0;
  bool upper = false;
  std::vector<BoundPush> pushing, pulling;  // by |gradient|, largest first
};

struct ScaleFit {
  std::vector<double> values;
  std::vector<FittedParameter> report;
  int residuals = 0;
  std::vector<AtBoundNote> at_bound;  // one per determined parameter at a bound
};
// Fits on `cases` whose index is not excluded; cases without a measurement or at one GPU do not count.
ScaleFit fit_scaling(const ScaleParamSet& set, const std::vector<ScaleCase>& cases, const std::vector<bool>& excluded);

// The notes of `fit` (fitted on the cases not excluded): for each determined parameter at a bound,
// every group's push (scale_fit.cpp). Central differences of 0.1% in log space, as the fit's own.
std::vector<AtBoundNote> at_bound_notes(const ScaleParamSet& set, const std::vector<ScaleCase>& cases,
                                        const std::vector<bool>& excluded, const ScaleFit& fit);

struct ScaleCvRow {
  double predicted = 0;  // 0: not predicted (missing measurement, or the one-GPU row itself)
  double efficiency = 0, error_pct = 0;
  double linear_error_pct = 0;  // perfect linear scaling from the one-GPU row
};
struct ScaleCv {
  std::vector<ScaleCvRow> rows;  // one per table row
  double mape = 0, linear_mape = 0;
  int predicted = 0;
  ScaleFit full;  // on every row: the parameters reported
};
// Every multi-GPU row predicted from its one-GPU row with parameters fitted on the other groups
// (the whole group held out).
ScaleCv cross_validate_scaling(const ScaleParamSet& set, const std::vector<ScaleCase>& cases, size_t table_rows);

}  // namespace tpsim
