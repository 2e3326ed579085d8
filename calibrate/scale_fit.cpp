#include "calibrate/scale_fit.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace tpsim {

namespace {

// Physical ranges of the fitted shares, and the priors (centre, width in log space) that keep a fit
// that cannot tell overlap from bandwidth inside them. Sources in the strings below.
const ScaleRange kLinkEfficiency{0.5, 0.95, 0.75, 0.3};
const ScaleRange kExposedShare{0.0, 0.7, 0.3, 1.0};
const char* const kIntraNodeSource =
    "achieved / datasheet GPU-to-GPU bandwidth in the gradient all-reduce; range 0.5-0.95, prior 0.75: "
    "nccl-tests all_reduce_perf busbw on 8 A100 SXM4 (NVLink3, 300 GB/s per direction) is about 200-230 GB/s "
    "(0.67-0.77; NVIDIA/nccl-tests#149, #178), and NCCL's protocol overhead is about 20% of the line rate "
    "(370 of 450 GB/s on H100, NVIDIA/nccl-tests#212)";
const char* const kInterNodeSource =
    "achieved / datasheet network bandwidth per node in the gradient all-reduce; range 0.5-0.95, prior 0.75: "
    "the same protocol overhead (about 20%, NVIDIA/nccl-tests#212) on the network";
const char* const kExposedSource =
    "share of the all-reduce exposed beyond what the backward cannot hide (DDP and Lightning: beyond the last "
    "bucket); range 0-0.7, prior 0.3: PyTorch DDP launches each 25 MiB bucket's all-reduce as the backward fills "
    "it, so all but the buckets left at the backward's end overlap (Li et al. 2020, PyTorch Distributed, VLDB "
    "13(12), section 3.2.3 and the overlap measurements of section 5). Horovod and DeepSpeed: 0-1, no prior";
const char* const kJitterMeaning =
    "standard deviation / mean of one GPU's step compute; a synchronous step waits for the slowest of N GPUs, "
    "at most sqrt(2 ln N) standard deviations above the mean for Gaussian jitter (stragglers in synchronous SGD: "
    "Chen et al. 2016, Revisiting Distributed Synchronous SGD); range 0-0.2, fitted";

}  // namespace

ScaleInputs scale_inputs(const ScalingTable& t, const std::map<std::string, ScalingModel>& models) {
  ScaleInputs in;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const ScalingRow& row = t.rows[i];
    const ScalingRow* one = one_gpu_row(t, row);
    if (!one) {
      in.unanchored.push_back(i);
      continue;
    }
    if (!in.clusters.count(row.cluster)) {
      if (row.cluster == "unnamed") {
        DeviceSpec d;
        d.id = d.name = "unnamed";
        d.gpus_per_node = static_cast<int>(row.gpus_per_node);
        d.intra_node_bytes_per_s = 1000.0;  // gradients per second per GPU, nominal
        d.inter_node_bytes_per_s = 100.0;   // per node, nominal
        in.clusters.emplace(row.cluster, d);
      } else {
        in.clusters.emplace(row.cluster, load_cluster(row.cluster));
      }
    }
    ScaleCase c;
    c.row = i;
    c.anchor = static_cast<size_t>(one - t.rows.data());
    c.cluster = &in.clusters.at(row.cluster);
    c.cluster_id = row.cluster;
    c.model = row.model;
    c.group = row.group;
    c.measured = row.measured.value_or(0.0);
    c.run.gpus = row.gpus;
    c.run.framework = row.framework;
    c.run.throughput_1gpu = *one->measured;
    if (row.model == "unnamed") {
      c.run.per_device_batch = row.per_device_batch;
      c.run.grad_bytes = 1.0;  // one gradient: the unnamed cluster's bandwidths are in gradients/s
    } else {
      const ScalingModel& m = models.at(row.model);
      c.run.per_device_batch = m.per_device_batch > 0 ? m.per_device_batch : 1;
      c.run.global_batch = m.global_batch;
      c.run.grad_bytes = m.params * m.grad_bytes_per_param;
    }
    in.cases.push_back(c);
  }
  return in;
}

size_t ScaleParamSet::add(const std::string& name, Unit unit, double lower, double upper, double start,
                          const char* meaning, double prior_width) {
  names_.push_back(name);
  infos_.push_back(ParamInfo{names_.back(), nullptr, DType::kFp32, unit, lower, upper, ParamLevel::kSystem, meaning});
  ptrs_.push_back(&infos_.back());
  start_.push_back(start);
  priors_.push_back(ScalePrior{prior_width > 0 ? start : 0.0, prior_width});
  return ptrs_.size() - 1;
}

ScaleParamSet::ScaleParamSet(const std::vector<ScaleCase>& cases) {
  std::set<std::string> clusters, models;
  std::set<SyncFramework> frameworks;
  for (const ScaleCase& c : cases) {
    clusters.insert(c.cluster_id);
    models.insert(c.model);
    frameworks.insert(c.run.framework);
  }
  for (const std::string& c : clusters) {
    // The unnamed cluster (seed 002): nominal links (scale_inputs), so the efficiencies are rates, not
    // shares of a datasheet; and no jitter: its 11 rows held out by batch size cannot tell it from
    // those rates (with it, held out 4.06% instead of 2.06%).
    if (c == "unnamed") {
      intra_[c] = add(c + ".intra_node_link_efficiency", Unit::kFraction, 0.01, 1.0, 0.75,
                      "achieved / nominal GPU-to-GPU rate in the gradient all-reduce (links unknown)");
      inter_[c] = add(c + ".inter_node_link_efficiency", Unit::kFraction, 0.01, 1.0, 0.75,
                      "achieved / nominal network rate per node in the gradient all-reduce (links unknown)");
      continue;
    }
    jitter_[c] = add(c + ".sync_jitter", Unit::kFraction, 0.0, 0.2, 0.01, kJitterMeaning);
    intra_[c] = add(c + ".intra_node_link_efficiency", Unit::kFraction, kLinkEfficiency.lower, kLinkEfficiency.upper,
                    kLinkEfficiency.center, kIntraNodeSource, kLinkEfficiency.width);
    inter_[c] = add(c + ".inter_node_link_efficiency", Unit::kFraction, kLinkEfficiency.lower, kLinkEfficiency.upper,
                    kLinkEfficiency.center, kInterNodeSource, kLinkEfficiency.width);
  }
  slowdown_ = add("overlap_slowdown", Unit::kFraction, 0.0, 1.0, 0.1,
                  "compute slower by this fraction of the all-reduce it hides");
  for (SyncFramework f : frameworks) {
    const bool named = f == SyncFramework::kDdp || f == SyncFramework::kLightning;
    exposed_[to_string(f)] = named ? add(to_string(f) + ".exposed_fraction", Unit::kFraction, 0.0, kExposedShare.upper,
                                         kExposedShare.center, kExposedSource, kExposedShare.width)
                                   : add(to_string(f) + ".exposed_fraction", Unit::kFraction, 0.0, 1.0, 0.05,
                                         "share of the all-reduce exposed beyond what the backward cannot hide");
  }
  if (frameworks.count(SyncFramework::kHorovod))
    coordination_ = add("horovod.coordination_s", Unit::kSeconds, 0.0, 0.02, 0.002,
                        "seconds per step of Horovod's negotiation cycles (HOROVOD_CYCLE_TIME: 1 ms by default "
                        "since v0.21, 5 ms before; horovod/horovod CHANGELOG, #2468)");
  for (const std::string& m : models)
    fixed_[m] = add(m + ".fixed_fraction", Unit::kFraction, 0.0, 0.9, 0.02,
                    "share of the one-GPU step that every GPU repeats whatever the GPU count");
}

int ScaleParamSet::index(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  return -1;
}

double repeat_cv(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0, ss = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1)) / mean;
}

std::vector<double> ScaleParamSet::start() const { return start_; }

ScalingParams ScaleParamSet::for_case(const ScaleCase& c, const std::vector<double>& v) const {
  ScalingParams p;
  p.intra_node_link_efficiency = v.at(intra_.at(c.cluster_id));
  p.inter_node_link_efficiency = v.at(inter_.at(c.cluster_id));
  p.overlap_slowdown = v.at(slowdown_);
  p.exposed_fraction = v.at(exposed_.at(to_string(c.run.framework)));
  p.fixed_fraction = v.at(fixed_.at(c.model));
  if (jitter_.count(c.cluster_id)) p.sync_jitter = v.at(jitter_.at(c.cluster_id));
  if (coordination_ != kNone) p.coordination_s = v.at(coordination_);
  return p;
}

namespace {

bool counts(const ScaleCase& c) { return c.measured > 0 && c.run.gpus > 1; }

double log_error(const ScaleParamSet& set, const ScaleCase& c, const std::vector<double>& v) {
  return std::log(predict_scaling(c.run, *c.cluster, set.for_case(c, v)).throughput / c.measured);
}

}  // namespace

ScaleFit fit_scaling(const ScaleParamSet& set, const std::vector<ScaleCase>& cases, const std::vector<bool>& excluded) {
  LogSpaceOptions options;
  options.robust_scale = 0.05;
  LogSpaceFit fit(set.params(), set.start(), options);
  ScaleFit out;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (excluded[i] || !counts(cases[i])) continue;
    const ScaleCase* c = &cases[i];
    fit.add_log_error([&set, c](const std::vector<double>& v) { return log_error(set, *c, v); });
    ++out.residuals;
  }
  for (size_t i = 0; i < set.priors().size(); ++i)
    if (set.priors()[i].width > 0)
      fit.add_prior(i, std::log(set.priors()[i].center), set.priors()[i].width, options.robust_scale);
  const std::vector<double> x0 = fit.x();
  const std::vector<bool> determined = fit.determined_at(x0);
  const ceres::Solver::Summary summary = fit.solve(fit.seeded_starts(x0, 4, 0.7, 20240518));
  const std::vector<double> sd = fit.stddevs(summary.final_cost);
  for (size_t i = 0; i < fit.size(); ++i) {
    out.values.push_back(fit.value(i));
    FittedParameter r = fitted_report(*set.params()[i], fit.value(i), sd[i]);
    r.determined = determined[i];
    if (!determined[i]) r.value = set.start()[i];
    if (!determined[i]) out.values.back() = set.start()[i];
    out.report.push_back(r);
  }
  out.at_bound = at_bound_notes(set, cases, excluded, out);
  return out;
}

namespace {

// Every group's d(0.5 sum r^2)/d(log value of parameter i) at `values`.
std::map<std::string, double> group_gradients(const ScaleParamSet& set, const std::vector<ScaleCase>& cases,
                                              const std::vector<bool>& excluded, const std::vector<double>& values,
                                              size_t i) {
  constexpr double kStep = 1e-3;  // in log space, as LogSpaceFit's differences
  std::vector<double> up = values, down = values;
  up[i] *= std::exp(kStep);
  down[i] *= std::exp(-kStep);
  std::map<std::string, double> out;
  for (size_t k = 0; k < cases.size(); ++k) {
    if (excluded[k] || !counts(cases[k])) continue;
    const double r = log_error(set, cases[k], values);
    const double dr = (log_error(set, cases[k], up) - log_error(set, cases[k], down)) / (2 * kStep);
    out[cases[k].group] += r * dr;
  }
  return out;
}

}  // namespace

std::vector<AtBoundNote> at_bound_notes(const ScaleParamSet& set, const std::vector<ScaleCase>& cases,
                                        const std::vector<bool>& excluded, const ScaleFit& fit) {
  std::vector<AtBoundNote> notes;
  for (size_t i = 0; i < fit.report.size(); ++i) {
    const FittedParameter& f = fit.report[i];
    if (!f.at_bound || !f.determined) continue;
    AtBoundNote n;
    n.param = i;
    n.upper = std::fabs(std::log(f.param->upper / fit.values[i])) < 1e-6;
    for (const auto& [group, g] : group_gradients(set, cases, excluded, fit.values, i)) {
      if (g == 0) continue;
      const bool pushes = n.upper ? g < 0 : g > 0;
      (pushes ? n.pushing : n.pulling).push_back(BoundPush{group, g});
    }
    const auto larger = [](const BoundPush& a, const BoundPush& b) {
      return std::fabs(a.gradient) > std::fabs(b.gradient);
    };
    std::sort(n.pushing.begin(), n.pushing.end(), larger);
    std::sort(n.pulling.begin(), n.pulling.end(), larger);
    notes.push_back(std::move(n));
  }
  return notes;
}

ScaleCv cross_validate_scaling(const ScaleParamSet& set, const std::vector<ScaleCase>& cases, size_t table_rows) {
  ScaleCv cv;
  cv.rows.resize(table_rows);
  std::set<std::string> groups;
  for (const ScaleCase& c : cases)
    if (counts(c)) groups.insert(c.group);
  double sum = 0, linear = 0;
  for (const std::string& g : groups) {
    std::vector<bool> excluded(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) excluded[i] = cases[i].group == g;
    const ScaleFit fit = fit_scaling(set, cases, excluded);
    for (const ScaleCase& c : cases) {
      if (c.group != g || !counts(c)) continue;
      const ScalingPrediction p = predict_scaling(c.run, *c.cluster, set.for_case(c, fit.values));
      ScaleCvRow& r = cv.rows[c.row];
      r.predicted = p.throughput;
      r.efficiency = 100.0 * p.efficiency;
      r.error_pct = 100.0 * (p.throughput - c.measured) / c.measured;
      const double lin = c.run.throughput_1gpu * static_cast<double>(c.run.gpus);
      r.linear_error_pct = 100.0 * (lin - c.measured) / c.measured;
      sum += std::fabs(r.error_pct);
      linear += std::fabs(r.linear_error_pct);
      ++cv.predicted;
    }
  }
  if (cv.predicted > 0) {
    cv.mape = sum / cv.predicted;
    cv.linear_mape = linear / cv.predicted;
  }
  cv.full = fit_scaling(set, cases, std::vector<bool>(cases.size(), false));
  return cv;
}

}  // namespace tpsim
