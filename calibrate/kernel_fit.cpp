#include "calibrate/kernel_fit.hpp"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>

#include "calibrate/fit_core.hpp"
#include "io/error.hpp"
#include "model/cost.hpp"

namespace tpsim {
namespace {

// The seed of the restarts' perturbations (fixed: fits repeat exactly).
constexpr uint64_t kStartSeed = 0x6b65'726e'656cULL;

double predicted_s(const Op& op, const DeviceSpec& device, const CostParams& params) {
  const CostModel cost(device, params);
  return cost.op_seconds(op);
}

struct StageFit {
  std::vector<double> values;
  std::vector<double> stddev;  // < 0 when unavailable
  double final_cost = 0;
  std::string summary;
};

// Fits `params` to `samples`, everything else as in `base` (which also gives the starting values):
// r = log(predicted / measured) per sample, from the given values and seeded perturbations.
StageFit fit_stage(const std::vector<const KernelSample*>& samples, const std::vector<const ParamInfo*>& params,
                   const DeviceSpec& device, const CostParams& base, const KernelFitOptions& options) {
  LogSpaceFit fit(params, base, {options.robust_scale, options.max_iterations, 1e-10});
  for (const KernelSample* s : samples)
    fit.add_log_error(
        base, [s, &device](const CostParams& p) { return std::log(predicted_s(s->op, device, p) / s->measured_s); });
  const ceres::Solver::Summary best =
      fit.solve(fit.seeded_starts(fit.x(), std::max(1, options.starts), options.start_spread, kStartSeed));
  StageFit r;
  r.final_cost = best.final_cost;
  r.summary = best.BriefReport();
  for (size_t i = 0; i < fit.size(); ++i) r.values.push_back(fit.value(i));
  r.stddev = options.covariance ? fit.stddevs(best.final_cost) : std::vector<double>(fit.size(), -1.0);
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
                                       const CostParams& profile_params) {
  const CostParams params = at_kernel_run_clock(profile_params);
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

namespace {

// The shapes each stage fits (held-out ones never).
struct StageShapes {
  std::vector<const KernelSample*> membound, xent, gemm, attention;
  std::set<DType> gemm_dtypes;
  std::set<int64_t> head_dims;
  bool attn_fwd = false, attn_bwd = false;
};

StageShapes stage_shapes(const std::vector<KernelSample>& samples) {
  StageShapes in;
  for (const KernelSample& s : samples) {
    if (s.held_out) continue;
    switch (group_of(s.op)) {
      case ShapeGroup::kMemoryBound:
        in.membound.push_back(&s);
        if (s.op.mem == MemKind::kCrossEntropy || s.op.mem == MemKind::kCrossEntropyBackward) in.xent.push_back(&s);
        break;
      case ShapeGroup::kGemm:
        in.gemm.push_back(&s);
        in.gemm_dtypes.insert(s.op.dtype);
        break;
      case ShapeGroup::kAttention:
        in.attention.push_back(&s);
        in.head_dims.insert(s.op.head_dim);
        (s.op.kind == OpKind::kAttentionFwd ? in.attn_fwd : in.attn_bwd) = true;
        break;
    }
  }
  return in;
}

// What the stages have fitted so far: each stage starts from the values of those before it.
struct StageState {
  CostParams params;
  std::set<const ParamInfo*> determined;
  std::map<const ParamInfo*, double> stddev;
  std::vector<std::string> report;

  void keep(const std::vector<const ParamInfo*>& fitted, const StageFit& f) {
    for (size_t i = 0; i < fitted.size(); ++i) {
      fitted[i]->value(params) = f.values[i];
      determined.insert(fitted[i]);
      stddev[fitted[i]] = f.stddev[i];
    }
  }
};

// 1. Memory-bound kernels.
void fit_memory_bound(const StageShapes& in, const DeviceSpec& device, const KernelFitOptions& options,
                      StageState& st) {
  std::vector<const ParamInfo*> params = {&param_of(&CostParams::membound_efficiency),
                                          &param_of(&CostParams::kernel_overhead_s)};
  if (!in.xent.empty()) params.push_back(&param_of(&CostParams::xent_efficiency));
  if (in.membound.size() > params.size()) {
    const StageFit f = fit_stage(in.membound, params, device, st.params, options);
    st.keep(params, f);
    st.report.push_back("memory-bound (" + std::to_string(in.membound.size()) + " shapes; " + names_of(params) +
                        "): " + f.summary);
  } else {
    st.report.push_back("memory-bound: " + std::to_string(in.membound.size()) + " shapes, too few to fit " +
                        names_of(params) + "; kept");
  }
}

// 2. GEMMs, for each candidate tile.
void fit_gemm(const StageShapes& in, const DeviceSpec& device, const KernelFitOptions& options, StageState& st) {
  std::vector<const ParamInfo*> params;
  for (DType t : in.gemm_dtypes) {
    params.push_back(&gemm_rate_param(t));
    // Start each rate just above the fastest shape measured in its format: the shape terms only
    // ever slow a GEMM below the large-GEMM rate.
    double fastest = 0;
    for (const KernelSample* s : in.gemm)
      if (s->op.dtype == t) fastest = std::max(fastest, s->op.flops / s->measured_s);
    // Below the datasheet peak, which caps every rate: above it no residual would move the rate
    // (Milabench's A100 fp32 matmuls ran at 19.0 of its 19.5 TFLOP/s).
    const double peak = device.peak_flops_per_s[static_cast<int>(t)];
    st.params.gemm_flops_per_s(t) = peak > 0 ? std::min(1.1 * fastest, 0.99 * peak) : 1.1 * fastest;
  }
  for (CostParamMember m :
       {&CostParams::gemm_k_half, &CostParams::gemm_tile_intensity_half, &CostParams::gemm_overhead_s})
    params.push_back(&param_of(m));
  if (in.gemm.size() > params.size() + 2) {
    double best_cost = 0;
    std::pair<double, double> best_tile;
    StageFit best;
    for (const auto& tile : options.tile_candidates) {
      CostParams q = st.params;
      q.gemm_tile_m = tile.first;
      q.gemm_tile_n = tile.second;
      const StageFit f = fit_stage(in.gemm, params, device, q, options);
      char line[96];
      std::snprintf(line, sizeof line, "  tile %gx%g: cost %.6g", tile.first, tile.second, f.final_cost);
      st.report.push_back(line);
      if (best.values.empty() || f.final_cost < best_cost) {
        best_cost = f.final_cost;
        best_tile = tile;
        best = f;
      }
    }
    st.params.gemm_tile_m = best_tile.first;
    st.params.gemm_tile_n = best_tile.second;
    st.determined.insert(&param_of(&CostParams::gemm_tile_m));
    st.determined.insert(&param_of(&CostParams::gemm_tile_n));
    st.keep(params, best);
    char line[96];
    std::snprintf(line, sizeof line, "; tile %gx%g of %zu candidates: ", best_tile.first, best_tile.second,
                  options.tile_candidates.size());
    st.report.push_back("GEMM (" + std::to_string(in.gemm.size()) + " shapes; " + names_of(params) + line +
                        best.summary);
  } else {
    st.report.push_back("GEMM: " + std::to_string(in.gemm.size()) + " shapes, too few to fit " + names_of(params) +
                        "; kept");
  }
}

// 3. Attention, for each candidate block, at the GEMM rate of its format.
void fit_attention(const StageShapes& in, const DeviceSpec& device, const KernelFitOptions& options, StageState& st) {
  std::vector<const ParamInfo*> params;
  if (in.attn_fwd) params.push_back(&param_of(&CostParams::attn_fwd_efficiency));
  if (in.attn_bwd) params.push_back(&param_of(&CostParams::attn_bwd_efficiency));
  if (in.head_dims.size() >= 2) params.push_back(&param_of(&CostParams::attn_head_dim_half));
  bool rates = true;
  for (const KernelSample* s : in.attention) rates = rates && st.params.gemm_flops_per_s(s->op.dtype) > 0;
  if (!params.empty() && rates && in.attention.size() > params.size() + 1) {
    double best_cost = 0, best_block = 0;
    StageFit best;
    for (double block : options.attn_block_candidates) {
      CostParams q = st.params;
      q.attn_block = block;
      const StageFit f = fit_stage(in.attention, params, device, q, options);
      char line[96];
      std::snprintf(line, sizeof line, "  block %g: cost %.6g", block, f.final_cost);
      st.report.push_back(line);
      if (best.values.empty() || f.final_cost < best_cost) {
        best_cost = f.final_cost;
        best_block = block;
        best = f;
      }
    }
    st.params.attn_block = best_block;
    st.determined.insert(&param_of(&CostParams::attn_block));
    st.keep(params, best);
    char line[64];
    std::snprintf(line, sizeof line, "; block %g): ", best_block);
    st.report.push_back("attention (" + std::to_string(in.attention.size()) + " shapes; " + names_of(params) + line +
                        best.summary);
  } else {
    st.report.push_back("attention: " + std::to_string(in.attention.size()) +
                        " shapes; too few, or no GEMM rate for their format; kept");
  }
}

}  // namespace

KernelFitResult fit_kernels(const std::vector<KernelSample>& samples, const DeviceSpec& device, const CostParams& start,
                            const KernelFitOptions& options) {
  if (samples.empty()) throw Error("kernel fit: no measurements to fit");
  for (const KernelSample& s : samples)
    if (!(s.measured_s > 0) || !std::isfinite(s.measured_s))
      throw Error("kernel fit: " + shape_key(s.op) + " has a measured time of " + std::to_string(s.measured_s) +
                  " s; it must be positive");
  if (!(device.hbm_bytes_per_s > 0) || device.compute_units < 1)
    throw Error("kernel fit: device " + device.id + " needs a positive memory bandwidth and compute units");

  const StageShapes in = stage_shapes(samples);
  StageState st;
  // Kernel runs are short: their clock is the one the rates are defined at. The start's sustained
  // clock ratio (a training run's, 0.9 in the GPU defaults) would have the fitted rates absorb it,
  // 1/0.9 too fast; the result keeps it, for training.
  st.params = at_kernel_run_clock(start);
  fit_memory_bound(in, device, options, st);
  fit_gemm(in, device, options, st);
  fit_attention(in, device, options, st);

  KernelFitResult result;
  // Tile sizes and the attention block are chosen among candidates, not fitted to a bound.
  const std::set<const ParamInfo*> discrete = {&param_of(&CostParams::gemm_tile_m), &param_of(&CostParams::gemm_tile_n),
                                               &param_of(&CostParams::attn_block)};
  for (const ParamInfo& info : cost_param_registry()) {
    if (!st.determined.count(&info)) continue;
    const auto it = st.stddev.find(&info);
    FittedParameter f = fitted_report(info, info.value(st.params), it != st.stddev.end() ? it->second : -1.0);
    if (discrete.count(&info)) f.at_bound = false;
    info.value(st.params) = f.value;
    result.fitted.push_back(f);
  }
  const CostParams& p = st.params;
  for (const KernelSample& s : samples)
    result.log_residuals.push_back(std::log(predicted_s(s.op, device, p) / s.measured_s));
  result.errors = kernel_errors(samples, device, p);
  result.params = st.params;
  result.params.compute_clock_ratio = start.compute_clock_ratio;
  result.report = st.report;
  return result;
}

}  // namespace tpsim
