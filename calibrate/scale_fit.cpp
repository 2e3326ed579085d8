#include "calibrate/scale_fit.hpp"

#include <cmath>
#include <set>

namespace tpsim {

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
                          const char* meaning) {
  names_.push_back(name);
  infos_.push_back(ParamInfo{names_.back(), nullptr, DType::kFp32, unit, lower, upper, ParamLevel::kSystem, meaning});
  ptrs_.push_back(&infos_.back());
  start_.push_back(start);
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
    intra_[c] = add(c + ".intra_node_link_efficiency", Unit::kFraction, 0.01, 1.0, 0.75,
                    "achieved / datasheet GPU-to-GPU bandwidth in the gradient all-reduce");
    inter_[c] = add(c + ".inter_node_link_efficiency", Unit::kFraction, 0.01, 1.0, 0.75,
                    "achieved / datasheet network bandwidth per node in the gradient all-reduce");
  }
  slowdown_ = add("overlap_slowdown", Unit::kFraction, 0.0, 1.0, 0.1,
                  "compute slower by this fraction of the all-reduce it hides");
  for (SyncFramework f : frameworks)
    exposed_[to_string(f)] = add(to_string(f) + ".exposed_fraction", Unit::kFraction, 0.0, 1.0, 0.05,
                                 "share of the all-reduce exposed beyond what the backward cannot hide");
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
  return out;
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
