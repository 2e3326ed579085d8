#include "calibrate/table_fit.hpp"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

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

std::string_view range_source(const ParamInfo& param) {
  using P = CostParams;
  static const std::pair<CostParamMember, std::string_view> sources[] = {
      {&P::compute_clock_ratio,
       "1.25, with each format's GEMM rate capped at its datasheet peak: the kernel runs may have been "
       "throttled or not at the fastest shape (Milabench's A100 fp16 289 TFLOP/s is 0.93 of the 312 peak); "
       "0.5: below any datasheet base/boost ratio (A100 SXM 1095/1410 MHz = 0.78, NVIDIA A100 datasheet), "
       "the floor of a power-capped 8-GPU node"},
      {&P::recompute_fraction,
       "1: activation checkpointing reruns the whole block forward (Composer's checkpoint_wrapper); 0.2: a rerun "
       "of only the cheap part of a block, as selective recompute does (Korthikanti et al. 2022)"},
      {&P::attn_fwd_efficiency,
       "fraction of the bf16 GEMM rate: FlashAttention-2 forward reaches 50-73% of A100 peak, FlashAttention 25-40% "
       "(Dao 2023); on H100 FlashAttention-2 about 35% of peak (Shah et al. 2024): 0.05 is below any fused kernel, "
       "1 the GEMM rate itself"},
      {&P::attn_bwd_efficiency,
       "fraction of the bf16 GEMM rate: FlashAttention-2's backward runs at 0.7-0.85x its forward rate (Dao 2023, "
       "Fig. 4-6); 0.05 is below any fused kernel, 1 the GEMM rate itself"},
      {&P::attn_head_dim_half,
       "0: no head-size effect; FlashAttention-2 at head size 64 runs about 0.9x its head-size-128 rate (Dao 2023, "
       "Fig. 4-5), a half of 16; 1024: a rate proportional to the head size"},
      {&P::xent_efficiency,
       "fraction of the elementwise bandwidth: 1 streams the logits once like an elementwise kernel; 0.02 is a "
       "50-fold slower row-wise reduction, below any fused cross-entropy kernel"},
      {&P::intra_node_link_efficiency,
       "NCCL ring bus bandwidth over NVLink: nccl-tests report about 0.75-0.85 of the per-direction datasheet "
       "rate on DGX A100/H100 at large messages; 0.3 a ring far from saturating"},
      {&P::inter_node_link_efficiency,
       "NCCL ring bus bandwidth over RoCE/InfiniBand: nccl-tests report about 0.8-0.95 of line rate on tuned "
       "fabrics at large messages; 0.2 a congested or misconfigured RoCE fabric"},
      {&P::overlap_slowdown,
       "0: no contention; NCCL kernels hold some of the SMs and share HBM bandwidth with overlapped compute, "
       "which then slows (Rashidi et al. 2021, ISCA); 0.5: half speed, beyond what the SMs NCCL holds explain"},
      {&P::block_overhead_s,
       "0: the CPU runs ahead of the GPU; 10 ms per block and pass: more than FSDP's pre/post hooks and a "
       "limit_all_gathers wait take on any host"},
      {&P::microbatch_overhead_s, "0: the data loader and hooks run ahead of the GPU; 1 s: a stalled data loader"},
      {&P::step_overhead_s,
       "0: nothing outside kernels; 10 s: a checkpoint-free step's logging and clipping on any host"},
      {&P::host_kernel_issue_s,
       "eager PyTorch spends some 10-30 us of host time per op (Python, dispatcher, launch); 0 to 1 ms"},
      {&P::intra_node_latency_s,
       "NCCL ring step inside a node: a few microseconds (nccl-tests small messages); 0 to 1 ms"},
  };
  for (const auto& [member, text] : sources)
    if (param.member == member) return text;
  if (!param.member) return "a GEMM rate: above 0, at most the datasheet peak (data/devices)";
  return "";
}

double log_error(const FitRow& row, const CostParams& params) {
  const Prediction p = predict(*row.model, *row.device, params, row.cfg);
  return std::log(p.tokens_per_s / row.measured_tokens_per_s);
}

std::vector<double> parameter_sensitivities(const std::vector<FitRow>& rows,
                                            const std::vector<const ParamInfo*>& params) {
  std::vector<double> out(params.size(), 0.0);
  for (const FitRow& row : rows) {
    const double at = std::log(predict(*row.model, *row.device, *row.base, row.cfg).tokens_per_s);
    for (size_t i = 0; i < params.size(); ++i) {
      CostParams moved = *row.base;
      double& v = params[i]->value(moved);
      if (!(v > 0)) continue;  // an unused (zero) rate or time: nothing to move
      v *= 1.01;
      const double next = std::log(predict(*row.model, *row.device, moved, row.cfg).tokens_per_s);
      if (std::isfinite(next) && std::isfinite(at)) out[i] += std::fabs(next - at) / std::log(1.01);
    }
  }
  for (double& s : out) s /= static_cast<double>(std::max<size_t>(rows.size(), 1));
  return out;
}

std::vector<const ParamInfo*> determinable_parameters(const std::vector<FitRow>& rows,
                                                      const std::vector<const ParamInfo*>& params) {
  const size_t most = std::max<size_t>(1, rows.size() / kRowsPerParameter);
  if (params.size() <= most) return params;
  const std::vector<double> sensitivity = parameter_sensitivities(rows, params);
  std::vector<size_t> used(params.size());
  for (size_t i = 0; i < used.size(); ++i) used[i] = i;
  std::stable_sort(used.begin(), used.end(), [&](size_t a, size_t b) { return sensitivity[a] > sensitivity[b]; });
  used.resize(most);
  std::sort(used.begin(), used.end());
  std::vector<const ParamInfo*> out;
  for (size_t i : used) out.push_back(params[i]);
  return out;
}

double sm_clock_scale(const DeviceSpec& from, const CostParams& from_params, const DeviceSpec& to,
                      const CostParams& to_params) {
  const double from_rate = from_params.gemm_flops_per_s(DType::kBf16),
               to_rate = to_params.gemm_flops_per_s(DType::kBf16);
  if (!(from.boost_clock_hz > 0 && to.boost_clock_hz > 0 && from_rate > 0 && to_rate > 0)) return 1.0;
  const double from_sm_clock = from.compute_units * from.boost_clock_hz,
               to_sm_clock = to.compute_units * to.boost_clock_hz;
  return (from_rate / to_rate) * (to_sm_clock / from_sm_clock);
}

bool scales_by_sm_clock(const ParamInfo& param) {
  return param.member == &CostParams::attn_fwd_efficiency || param.member == &CostParams::attn_bwd_efficiency;
}

CostParams on_device(const CostParams& shared, const std::vector<const ParamInfo*>& params, double scale) {
  CostParams p = shared;
  if (scale == 1.0) return p;
  for (const ParamInfo* info : params)
    if (scales_by_sm_clock(*info)) info->value(p) = std::min(info->upper, info->value(shared) * scale);
  return p;
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
  // Each row sees the shared values in its own device's terms (sm_clock_scale from the first row's).
  std::vector<double> scale;
  for (const FitRow& row : rows)
    scale.push_back(sm_clock_scale(*rows.front().device, *rows.front().base, *row.device, *row.base));
  for (size_t j = 0; j < rows.size(); ++j) {
    const FitRow& row = rows[j];
    const double s = scale[j];
    const std::vector<const ParamInfo*>& params = options.parameters;
    fit.add_log_error(*row.base,
                      [&row, &params, s](const CostParams& p) { return log_error(row, on_device(p, params, s)); });
  }
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
  static_cast<SolveReport&>(r) = solve_report(summary);
  const std::vector<double> stddev =
      options.covariance ? fit.stddevs(summary.final_cost) : std::vector<double>(n, -1.0);
  for (size_t i = 0; i < n; ++i) {
    const ParamInfo* info = fit.params()[i];
    // An undetermined parameter keeps its starting value (and, in a profile, its provenance).
    const FittedParameter f = determined[i] ? fitted_report(*info, fit.value(i), stddev[i])
                                            : FittedParameter{info, info->value(start), -1.0, false, false};
    info->value(r.params) = f.value;
    r.fitted.push_back(f);
    if (f.determined && f.at_bound) r.fitted.back().pushed_by = fit.pushing(i, 5);  // rows, as added
    r.fitted.back().range_source = range_source(*info);
  }
  for (size_t j = 0; j < rows.size(); ++j) {
    const FitRow& row = rows[j];
    const double e =
        log_error(row, on_device(with_fitted(*row.base, r.params, options.parameters), options.parameters, scale[j]));
    r.residuals.push_back(e);
    r.outliers.push_back(std::fabs(e) > options.outlier_threshold);
  }
  return r;
}

}  // namespace tpsim
