// Replay (`tpsim replay`): run the op sequence of one training step of a configuration on one
// device with a measurement backend, and set the measured time beside what the cost model predicts
// for the same ops from the device's profile, op by op and in total.
//
// The chain: the model and step options -> the step's ops (step_ops.hpp) -> Backend::time_sequence
// -> CostModel::op_seconds per op -> the step's totals. With layers K < n_layers the blocks' ops
// run K times and their part of the step is scaled by n_layers / K, in the measurement and the
// prediction alike. The tables are written from the result by io/calibration_report.hpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "calibrate/kernel_device.hpp"
#include "calibrate/step_ops.hpp"
#include "kernels/backend.hpp"
#include "model/device.hpp"
#include "model/profile.hpp"

namespace tpsim {

struct ReplayOptions {
  ModelConfig model;
  StepOptions step;  // layers 1..model.n_layers (0: all of them)
  // How the CPU backend was made and times: the threads and clock the profile's kernels were
  // measured with (kernel_device.hpp); a GPU backend times with events.
  bool gpu = false;
  int threads = 1;
  bool thread_clock = false;
  // The profile's reference GEMM (kernel_device.hpp): timed again before the step, so that the
  // output says how much faster or slower the device runs now than when it was calibrated.
  std::optional<CalibratedReference> reference;

  // "" when the options are consistent, else one line naming the broken constraint.
  std::string check() const;
};

struct Replay {
  std::vector<StepOp> ops;
  std::vector<double> measured_s;  // each op timed alone (median; operands cold, TimingOptions::flush_cache)
  std::vector<double>
      in_step_s;  // each op inside the sequence's runs (median); empty when the backend does not time it
  std::vector<double> predicted_s;  // CostModel::op_seconds of each op
  double sequence_s = 0;            // the sequence run end to end (median)
  double block_scale = 1;           // n_layers / layers
  // The sequence ran K blocks back to back; the other n_layers - K blocks are taken to cost what
  // the K did, op by op (each op in the step, or timed alone where the backend does not time ops
  // inside the sequence).
  double measured_step_s = 0, predicted_step_s = 0;
  double alone_step_s = 0;  // the same step from the ops timed alone
  // The reference GEMM now and at the calibration (medians); 0 without ReplayOptions::reference.
  double reference_now_s = 0, reference_calibrated_s = 0;
};

// The whole step and each op are timed: a warm-up, then at least five runs, until 0.2 s are
// measured or 3 s spent (a whole step of a small model takes a fraction of a second on one core).
TimingOptions replay_timing(bool thread_cpu_clock);

// The step's ops (training_step_ops) with `layers` resolved; Error naming --layers when it does
// not fit the model.
std::vector<StepOp> replay_ops(const ReplayOptions& options);

// Times `ops` (replay_ops) on `backend` and costs them on `device` under `params` at the kernel
// runs' clock (model/cost.hpp at_kernel_run_clock: one step is a short run, not a long training
// run's sustained clock). Error when the sequence cannot be timed or the step's time is not positive.
Replay replay_step(const ReplayOptions& options, const std::vector<StepOp>& ops, Backend& backend,
                   const DeviceSpec& device, const CostParams& params);

}  // namespace tpsim
