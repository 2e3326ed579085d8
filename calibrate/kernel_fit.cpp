#include "calibrate/kernel_fit.hpp"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "calibrate/solver_options.hpp"
#include "io/error.hpp"
#include "model/cost.hpp"

namespace tpsim {
namespace {

// Seconds may be 0 in the registry; the fit represents them from a nanosecond up (log of 0 is not).
double floor_of(const ParamInfo& info) {
  return info.unit == std::string_view("s") ? 1e-9 : std::max(info.lower, 1e-12);
}

const ParamInfo& param(std::string_view name) {
  const ParamInfo* p = find_param(name);
  if (!p) throw Error("kernel fit: unknown parameter '" + std::string(name) + "'");
  return *p;
}

std::string rate_name(DType t) { return "gemm_" + std::string(to_string(t)) + "_flops_per_s"; }

double predicted_s(const Op& op, const DeviceSpec& device, const CostParams& params) {
  const CostModel cost(device, params);
  return cost.op_seconds(op);
}

class OpResidual {
 public:
  OpResidual(const KernelSample& s, const DeviceSpec& device, const CostParams& base,
             const std::vector<const ParamInfo*>& params)
      : sample_(s), device_(device), base_(base), params_(params) {}

  bool operator()(double const* const* x, double* residual) const {
    CostParams p = base_;
    for (size_t i = 0; i < params_.size(); ++i) p.*(params_[i]->member) = std::exp(x[0][i]);
    const double s = predicted_s(sample_.op, device_, p);
    if (!(s > 0) || !std::isfinite(s)) return false;
    residual[0] = std::log(s / sample_.measured_s);
    return true;
  }

 private:
  const KernelSample& sample_;
  const DeviceSpec& device_;
  const CostParams& base_;
  const std::vector<const ParamInfo*>& params_;
};

struct StageFit {
  std::vector<double> values;
  std::vector<double> stddev;  // < 0 when unavailable
  double final_cost = 0;
  std::string summary;
};

// Fits `names` to `samples`, everything else as in `base` (which also gives the starting values).
StageFit fit_stage(const std::vector<const KernelSample*>& samples, const std::vector<const ParamInfo*>& params,
                   const DeviceSpec& device, const CostParams& base, const KernelFitOptions& options) {
  const size_t n = params.size();
  std::vector<double> x(n), lo(n), hi(n);
  for (size_t i = 0; i < n; ++i) {
    lo[i] = std::log(std::max(params[i]->lower, floor_of(*params[i])));
    hi[i] = std::log(std::min(params[i]->upper, 1e300));
    x[i] = std::clamp(std::log(std::max(base.*(params[i]->member), floor_of(*params[i]))), lo[i], hi[i]);
  }
  ceres::Problem problem;
  for (const KernelSample* s : samples) {
    // The model has kinks at tile and wave counts: a step of 0.1% in log space sees the trend
    // rather than the nearest kink (as table_fit).
    ceres::NumericDiffOptions diff;
    diff.relative_step_size = 1e-3;
    auto* cost = new ceres::DynamicNumericDiffCostFunction<OpResidual, ceres::CENTRAL>(
        new OpResidual(*s, device, base, params), ceres::TAKE_OWNERSHIP, diff);
    cost->AddParameterBlock(static_cast<int>(n));
    cost->SetNumResiduals(1);
    problem.AddResidualBlock(cost, new ceres::HuberLoss(options.robust_scale), x.data());
  }
  for (size_t i = 0; i < n; ++i) {
    problem.SetParameterLowerBound(x.data(), static_cast<int>(i), lo[i]);
    problem.SetParameterUpperBound(x.data(), static_cast<int>(i), hi[i]);
  }
  const ceres::Solver::Options solver = fit_solver_options(options.max_iterations, 1e-10);
  const std::vector<double> x0 = x;
  std::vector<double> best_x = x0;
  ceres::Solver::Summary best;
  bool have = false;
  std::mt19937_64 rng(0x6b65'726e'656cULL);
  std::normal_distribution<double> jitter(0.0, options.start_spread);
  for (int start = 0; start < std::max(1, options.starts); ++start) {
    for (size_t i = 0; i < n; ++i) x[i] = start == 0 ? x0[i] : std::clamp(x0[i] + jitter(rng), lo[i], hi[i]);
    ceres::Solver::Summary s;
    ceres::Solve(solver, &problem, &s);
    if (!have || s.final_cost < best.final_cost) {
      best = s;
      best_x = x;
      have = true;
    }
  }
  x = best_x;

  StageFit r;
  r.final_cost = best.final_cost;
  r.summary = best.BriefReport();
  // exp(log(bound)) can land an ulp outside the bound, which the profile reader then refuses.
  for (size_t i = 0; i < n; ++i) r.values.push_back(std::clamp(std::exp(x[i]), params[i]->lower, params[i]->upper));
  r.stddev.assign(n, -1.0);
  if (options.covariance) {
    ceres::Covariance::Options copt;
    copt.algorithm_type = ceres::DENSE_SVD;  // tolerates directions the shapes do not pin down
    copt.null_space_rank = -1;
    ceres::Covariance cov(copt);
    const std::vector<std::pair<const double*, const double*>> pairs = {{x.data(), x.data()}};
    const double dof = static_cast<double>(samples.size()) - static_cast<double>(n);
    if (dof > 0 && cov.Compute(pairs, &problem)) {
      std::vector<double> c(n * n);
      cov.GetCovarianceBlock(x.data(), x.data(), c.data());
      // (J'J)^-1 scaled by the residual variance; a log-space sd s is a relative one: value * s.
      const double variance = 2.0 * best.final_cost / dof;
      for (size_t i = 0; i < n; ++i)
        if (c[i * n + i] >= 0) r.stddev[i] = r.values[i] * std::sqrt(c[i * n + i] * variance);
    }
  }
  return r;
}

std::string names_of(const std::vector<const ParamInfo*>& params) {
  std::string s;
  for (const ParamInfo* p : params) s += (s.empty() ? "" : ", ") + std::string(p->name);
  return s;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double quantile_of(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto i = static_cast<size_t>(pos);
  const size_t j = std::min(i + 1, v.size() - 1);
  return v[i] + (pos - static_cast<double>(i)) * (v[j] - v[i]);
}

}  // namespace

std::vector<GroupErrors> kernel_errors(const std::vector<KernelSample>& samples, const DeviceSpec& device,
                                       const CostParams& params) {
  std::vector<GroupErrors> out;
  for (ShapeGroup g : {ShapeGroup::kGemm, ShapeGroup::kAttention, ShapeGroup::kMemoryBound}) {
    std::vector<double> fitted, held;
    for (const KernelSample& s : samples) {
      if (group_of(s.op) != g) continue;
      const double e = std::fabs(predicted_s(s.op, device, params) / s.measured_s - 1.0);
      (s.held_out ? held : fitted).push_back(e);
    }
    GroupErrors e;
    e.group = g;
    e.fitted = static_cast<int64_t>(fitted.size());
    e.held_out = static_cast<int64_t>(held.size());
    e.fitted_median = median_of(fitted);
    e.held_out_median = median_of(held);
    e.held_out_p90 = quantile_of(held, 0.9);
    out.push_back(e);
  }
  return out;
}

KernelFitResult fit_kernels(const std::vector<KernelSample>& samples, const DeviceSpec& device,
                            const CostParams& start, const KernelFitOptions& options) {
  if (samples.empty()) throw Error("kernel fit: no measurements to fit");
  for (const KernelSample& s : samples)
    if (!(s.measured_s > 0) || !std::isfinite(s.measured_s))
      throw Error("kernel fit: " + shape_key(s.op) + " has a measured time of " + std::to_string(s.measured_s) +
                  " s; it must be positive");
  if (!(device.hbm_bytes_per_s > 0) || device.compute_units < 1)
    throw Error("kernel fit: device " + device.id + " needs a positive memory bandwidth and compute units");

  // The shapes each stage fits (held-out ones never).
  std::vector<const KernelSample*> membound, xent, gemm, attention;
  std::set<DType> gemm_dtypes;
  std::set<int64_t> head_dims;
  bool attn_fwd = false, attn_bwd = false;
  for (const KernelSample& s : samples) {
    if (s.held_out) continue;
    switch (group_of(s.op)) {
      case ShapeGroup::kMemoryBound:
        membound.push_back(&s);
        if (s.op.mem == MemKind::kCrossEntropy || s.op.mem == MemKind::kCrossEntropyBackward) xent.push_back(&s);
        break;
      case ShapeGroup::kGemm:
        gemm.push_back(&s);
        gemm_dtypes.insert(s.op.dtype);
        break;
      case ShapeGroup::kAttention:
        attention.push_back(&s);
        head_dims.insert(s.op.head_dim);
        (s.op.kind == OpKind::kAttentionFwd ? attn_fwd : attn_bwd) = true;
        break;
    }
  }

  KernelFitResult result;
  result.params = start;
  CostParams& p = result.params;
  std::set<std::string> determined;
  std::map<std::string, double> stddev;
  const auto keep = [&](const std::vector<const ParamInfo*>& params, const StageFit& f) {
    for (size_t i = 0; i < params.size(); ++i) {
      p.*(params[i]->member) = f.values[i];
      determined.insert(std::string(params[i]->name));
      stddev[std::string(params[i]->name)] = f.stddev[i];
    }
  };

  // 1. Memory-bound kernels.
  {
    std::vector<const ParamInfo*> params = {&param("membound_efficiency"), &param("kernel_overhead_s")};
    if (!xent.empty()) params.push_back(&param("xent_efficiency"));
    if (membound.size() > params.size()) {
      const StageFit f = fit_stage(membound, params, device, p, options);
      keep(params, f);
      result.report.push_back("memory-bound (" + std::to_string(membound.size()) + " shapes; " + names_of(params) +
                              "): " + f.summary);
    } else {
      result.report.push_back("memory-bound: " + std::to_string(membound.size()) + " shapes, too few to fit " +
                              names_of(params) + "; kept");
    }
  }

  // 2. GEMMs, for each candidate tile.
  {
    std::vector<const ParamInfo*> params;
    for (DType t : gemm_dtypes) {
      params.push_back(&param(rate_name(t)));
      // Start each rate just above the fastest shape measured in its format: the shape terms only
      // ever slow a GEMM below the large-GEMM rate.
      double fastest = 0;
      for (const KernelSample* s : gemm)
        if (s->op.dtype == t) fastest = std::max(fastest, s->op.flops / s->measured_s);
      p.*(param(rate_name(t)).member) = 1.1 * fastest;
    }
    for (const char* name : {"gemm_k_half", "gemm_tile_intensity_half", "gemm_overhead_s"}) params.push_back(&param(name));
    if (gemm.size() > params.size() + 2) {
      double best_cost = 0;
      std::pair<double, double> best_tile;
      StageFit best;
      for (const auto& tile : options.tile_candidates) {
        CostParams q = p;
        q.gemm_tile_m = tile.first;
        q.gemm_tile_n = tile.second;
        const StageFit f = fit_stage(gemm, params, device, q, options);
        char line[96];
        std::snprintf(line, sizeof line, "  tile %gx%g: cost %.6g", tile.first, tile.second, f.final_cost);
        result.report.push_back(line);
        if (best.values.empty() || f.final_cost < best_cost) {
          best_cost = f.final_cost;
          best_tile = tile;
          best = f;
        }
      }
      p.gemm_tile_m = best_tile.first;
      p.gemm_tile_n = best_tile.second;
      determined.insert("gemm_tile_m");
      determined.insert("gemm_tile_n");
      keep(params, best);
      char line[96];
      std::snprintf(line, sizeof line, "; tile %gx%g of %zu candidates: ", best_tile.first, best_tile.second,
                    options.tile_candidates.size());
      result.report.push_back("GEMM (" + std::to_string(gemm.size()) + " shapes; " + names_of(params) + line +
                              best.summary);
    } else {
      result.report.push_back("GEMM: " + std::to_string(gemm.size()) + " shapes, too few to fit " + names_of(params) +
                              "; kept");
    }
  }

  // 3. Attention, for each candidate block, at the GEMM rate of its format.
  {
    std::vector<const ParamInfo*> params;
    if (attn_fwd) params.push_back(&param("attn_fwd_efficiency"));
    if (attn_bwd) params.push_back(&param("attn_bwd_efficiency"));
    if (head_dims.size() >= 2) params.push_back(&param("attn_head_dim_half"));
    bool rates = true;
    for (const KernelSample* s : attention) rates = rates && p.gemm_flops_per_s(s->op.dtype) > 0;
    if (!params.empty() && rates && attention.size() > params.size() + 1) {
      double best_cost = 0, best_block = 0;
      StageFit best;
      for (double block : options.attn_block_candidates) {
        CostParams q = p;
        q.attn_block = block;
        const StageFit f = fit_stage(attention, params, device, q, options);
        char line[96];
        std::snprintf(line, sizeof line, "  block %g: cost %.6g", block, f.final_cost);
        result.report.push_back(line);
        if (best.values.empty() || f.final_cost < best_cost) {
          best_cost = f.final_cost;
          best_block = block;
          best = f;
        }
      }
      p.attn_block = best_block;
      determined.insert("attn_block");
      keep(params, best);
      char line[64];
      std::snprintf(line, sizeof line, "; block %g): ", best_block);
      result.report.push_back("attention (" + std::to_string(attention.size()) + " shapes; " + names_of(params) + line +
                              best.summary);
    } else {
      result.report.push_back("attention: " + std::to_string(attention.size()) +
                              " shapes; too few, or no GEMM rate for their format; kept");
    }
  }

  for (const ParamInfo& info : cost_param_registry()) {
    const std::string name(info.name);
    if (!determined.count(name)) continue;
    const double v = p.*(info.member);
    const double lo = std::max(info.lower, floor_of(info)), hi = std::min(info.upper, 1e300);
    const bool discrete = name == "gemm_tile_m" || name == "gemm_tile_n" || name == "attn_block";
    const bool at_bound = !discrete && (std::fabs(std::log(v / lo)) < 1e-6 || std::fabs(std::log(hi / v)) < 1e-6);
    const auto it = stddev.find(name);
    result.fitted.push_back({name, v, it != stddev.end() ? it->second : -1.0, at_bound, true});
  }
  for (const KernelSample& s : samples) result.log_residuals.push_back(std::log(predicted_s(s.op, device, p) / s.measured_s));
  result.errors = kernel_errors(samples, device, p);
  return result;
}

}  // namespace tpsim
