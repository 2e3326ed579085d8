// Kernel calibration (`tpsim calibrate kernels`): time the kernels the simulator costs on a
// measurement backend (CPU, CUDA, HIP), fit the cost model's kernel-level parameters to them with
// Ceres, check the fit on held-out shapes, and return the profile whose fitted parameters say
// "kernel" with the backend, date and number of measurements; everything else keeps the base
// profile's value and provenance.
//
// The chain: measure the copy bandwidth -> the device's spec (datasheet, or measured for a CPU or a
// GPU without a datasheet) -> the base profile -> the measurement plan (kernel_plan.hpp) -> time it
// within the budget -> the noise verdict -> fit (kernel_fit.hpp) -> held-out errors -> the profile.
// The record of the run (what goes into the profile's extra.kernel_calibration) is written from the
// result by io/calibration_report.hpp.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "calibrate/kernel_fit.hpp"
#include "calibrate/kernel_measure.hpp"
#include "calibrate/kernel_plan.hpp"
#include "io/profile_io.hpp"
#include "kernels/backend.hpp"
#include "model/device.hpp"

namespace tpsim {

// Default budgets: a minute on the CPU (the plan's grid is sized for it), ten on a GPU, whose
// catalogue sweep has far more shapes.
constexpr double kCpuKernelBudgetS = 60;
constexpr double kGpuKernelBudgetS = 600;

struct KernelCalibrationOptions {
  BackendKind backend = BackendKind::kCpu;
  int device_index = 0;  // which GPU (cuda, hip); the CPU is device 0
  // CPU threads the kernels use. 1 by default: on a shared machine a descheduled second thread
  // stalls every parallel region. GPU backends: must be 1.
  int threads = 1;
  // CPU: "cpu" (the thread's CPU clock; one thread only) or "wall" (the monotonic clock). "": cpu
  // on one thread, wall on more. GPU backends time with events: must be "".
  std::string clock;
  double budget_s = 0;  // wall-clock seconds for the whole calibration; 0: kCpuKernelBudgetS or kGpuKernelBudgetS
  // host_seconds() when the run began: the budget counts the caller's start-up from it. < 0: from
  // the call of calibrate_kernels.
  double started_s = -1;
  // The sweep whose shapes are measured (kernel_plan.hpp); empty seq_lens or micro_batches: the
  // backend's defaults (default_kernel_plan_options).
  std::vector<ModelConfig> models;
  std::vector<int64_t> seq_lens;
  std::vector<int64_t> micro_batches;
  // The profile whose values kernel runs do not measure are kept, read by the caller before
  // anything is measured; none: the device's reasoned default (data/profiles/defaults/<id>.json),
  // on a device without one cpu.json for the CPU and an Error for a GPU.
  std::optional<DeviceProfile> base;
  std::string base_path;        // where `base` was read from, for the note and the record
  std::ostream* log = nullptr;  // notes as the run goes (a --base of another device); nullptr: none
  bool progress = false;        // a progress line on stderr while measuring (on a terminal only)

  // "" when the options are consistent, else one line naming the broken constraint.
  std::string check() const;
  bool gpu() const { return backend != BackendKind::kCpu; }
  // Whether the CPU kernels are timed by the thread's CPU clock: on a shared machine the time other
  // processes take from the core is not the kernel's.
  bool thread_clock() const { return !gpu() && (clock.empty() ? threads == 1 : clock == "cpu"); }
  double budget_or_default_s() const {
    return budget_s > 0 ? budget_s : (gpu() ? kGpuKernelBudgetS : kCpuKernelBudgetS);
  }
};

struct KernelCalibration {
  BackendKind backend = BackendKind::kCpu;
  int threads = 1;  // CPU threads the kernels ran on (timing.thread_cpu_clock: timed by the thread's clock)
  BackendInfo info;
  std::string device_id;
  bool datasheet = false;    // the device has a datasheet file; else `spec` is measured and embedded
  DeviceSpec spec;           // the datasheet's, or the measured one (peaks: fitted large-GEMM rates)
  std::string base_profile;  // the --base file, or the default profile's origin
  double budget_s = 0;
  KernelPlanOptions plan_options;  // as planned: the formats the backend runs, the precisions
  size_t planned_shapes = 0;
  TimingOptions timing;
  CopyBandwidth copy;
  MeasureReport measured;
  std::vector<double> predicted_s;  // per measurement, under the fitted profile
  KernelFitOptions fit_options;
  KernelFitResult fit;
  double fit_s = 0;
  // The reference GEMM timed before and after the measurements, and the verdict on the noise.
  Op reference{};
  TimingOptions reference_timing;
  Timing reference_start, reference_end;
  NoiseOptions noise_options;
  NoiseVerdict noise;
  std::string date;       // utc_timestamp() of the fit
  double wall_s = 0;      // from options.started_s to the end of the fit
  DeviceProfile profile;  // the base with the fitted values, each marked "kernel"; extra as the base's
};

// The measurement backend the options ask for: on the CPU with their thread count. A missing
// device (or a backend this build lacks) is a one-line Error.
std::unique_ptr<Backend> make_calibration_backend(const KernelCalibrationOptions& options);

// Runs the calibration on `backend` (made by make_calibration_backend). Error when the options do
// not check, when the budget leaves no time to measure, or when nothing could be measured.
KernelCalibration calibrate_kernels(const KernelCalibrationOptions& options, Backend& backend);

}  // namespace tpsim
