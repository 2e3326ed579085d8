// Fitting the kernel-level parameters of the cost model to timed kernels (`tpsim calibrate kernels`).
//
// Each measured op contributes r = log(predicted / measured median), the prediction being
// CostModel::op_seconds itself (model/cost.hpp), so that fitted values mean exactly what the
// simulator does with them. The fit is calibrate/fit_core's: parameters in log space within the
// registry's physical bounds, a Huber loss on the log errors (an odd shape counts linearly), Ceres
// Solver from the starting values and seeded perturbations of them, and standard deviations from
// ceres::Covariance scaled by the residual variance.
//
// The groups are fitted in the order their costs depend on each other:
//   1. memory-bound kernels: membound_efficiency, xent_efficiency, kernel_overhead_s (against the
//      device's memory bandwidth, which the calibration measures first);
//   2. GEMMs: the achieved rate of every format measured, gemm_k_half, gemm_tile_intensity_half,
//      gemm_overhead_s, for each candidate tile (gemm_tile_m x gemm_tile_n); the tile whose fit has
//      the lowest cost is kept (tile sizes are discrete: Ceres cannot step through them);
//   3. attention: attn_fwd_efficiency, attn_bwd_efficiency, attn_head_dim_half (when two head sizes
//      were measured), for each candidate attn_block, at the GEMM rate and overhead of step 2.
// Held-out measurements take no part in the fit; the result reports the errors on them.
#pragma once

#include <string>
#include <vector>

#include "calibrate/kernel_plan.hpp"
#include "calibrate/fit_core.hpp"
#include "model/device.hpp"
#include "model/profile.hpp"

namespace tpsim {

struct KernelSample {
  Op op;
  double measured_s = 0;  // median of the timed runs
  bool held_out = false;
};

struct KernelFitOptions {
  // Huber loss scale on log errors: shapes off by more than ~this fraction count linearly.
  double robust_scale = 0.05;
  // (gemm_tile_m, gemm_tile_n) candidates; the cost model tries both orientations of the largest
  // tile, so (64, 128) and (128, 64) are the same candidate.
  std::vector<std::pair<double, double>> tile_candidates = {{64, 64},   {64, 128},  {64, 256},
                                                            {128, 128}, {128, 256}, {256, 256}};
  std::vector<double> attn_block_candidates = {32, 64, 128, 256};
  // Starts: the given values, then starts-1 seeded perturbations (log-space sd start_spread).
  int starts = 3;
  double start_spread = 0.5;
  int max_iterations = 100;
  bool covariance = true;
};

// Median of |predicted / measured - 1| over a group's fitted and held-out shapes.
struct GroupErrors {
  ShapeGroup group;
  int64_t fitted = 0, held_out = 0;
  double fitted_median = 0, held_out_median = 0;  // fractions; 0 when the count is 0
  double held_out_p90 = 0;
};

struct KernelFitResult {
  CostParams params;                    // the start with every fitted value (its clock ratio kept)
  std::vector<FittedParameter> fitted;  // in registry order; determined = measured here
  std::vector<double> log_residuals;    // per sample, log(predicted / measured), held out or not
  std::vector<GroupErrors> errors;      // GEMM, attention, memory-bound
  std::vector<std::string> report;      // a line per stage: what was fitted, Ceres' brief report
};

// Fits at the kernel runs' own clock (model/cost.hpp at_kernel_run_clock): the rates are those the
// runs reached, and the result keeps the start's compute_clock_ratio for training.
// Error when `samples` is empty or a measurement is not positive.
KernelFitResult fit_kernels(const std::vector<KernelSample>& samples, const DeviceSpec& device, const CostParams& start,
                            const KernelFitOptions& options);

// |predicted / measured - 1| medians of `samples` under `params` at the kernel runs' clock, per group.
std::vector<GroupErrors> kernel_errors(const std::vector<KernelSample>& samples, const DeviceSpec& device,
                                       const CostParams& params);

}  // namespace tpsim
