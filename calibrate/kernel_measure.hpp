// Running a kernel plan (kernel_plan.hpp) on a measurement backend within a time budget, and the
// achieved memory bandwidth that memory-bound kernels are costed against.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "calibrate/kernel_plan.hpp"
#include "kernels/backend.hpp"

namespace tpsim {

struct KernelMeasurement {
  Op op;
  PlanSource source;
  bool held_out;
  Timing timing;  // median, p10, p90 and repetitions of the timed runs
};

struct MeasureOptions {
  double budget_s = 60;  // wall-clock seconds the measurements may take, warm-ups included
  TimingOptions timing;
  bool progress = false;  // redraw a progress line on stderr (io/progress.hpp: only on a terminal)
};

struct MeasureReport {
  std::vector<KernelMeasurement> measurements;
  std::vector<std::string> unsupported;  // "shape: why", for ops the backend cannot run
  int64_t skipped_for_budget = 0;        // planned ops left out because the budget would not hold them
  double seconds = 0;                    // wall-clock time spent
};

// How many consecutive plan ops one sequence times on a backend that times ops inside a sequence.
constexpr size_t kSequenceOps = 8;

// Times the plan's ops in order. Before each op its cost (warm-up and the least repetitions) is
// estimated from `estimate_s` (seconds per run, e.g. the cost model under the starting profile),
// scaled by how far the measurements of its group so far were from their estimates and by how far
// the wall-clock time of the last timings was from the cost of their runs as timed (a loaded host,
// a sequence's cache filling); an op whose estimated cost would overrun the budget is skipped, and
// measuring stops when the budget is spent.
// On a backend that times ops inside a sequence (Backend::times_in_sequence: the CPU), the ops are
// timed as a step runs them: kSequenceOps consecutive ones back to back, after the caches were
// filled with other data (TimingOptions::flush_cache), each op's median inside the sequence its
// measurement, so that its operands come from where a step's earlier ops left them, not from the
// caches its own previous run filled. GPU backends time each op alone after an L2 flush.
MeasureReport measure_plan(Backend& backend, const std::vector<PlannedOp>& plan, const MeasureOptions& options,
                           const std::function<double(const Op&)>& estimate_s);

struct CopyBandwidth {
  double bytes_per_s = 0;  // bytes read plus bytes written per second
  double buffer_bytes = 0;
  Timing timing;
  std::string method;  // what ran, for the profile's provenance
};

// The achieved bandwidth of a plain streaming kernel over a buffer well beyond the caches: on a
// GPU backend its copy probe (kernels/cuda/gpu_backend.hpp); on the CPU an in-place fp32 scale
// (x *= c, STREAM's "scale" without the second array) run by the backend like any memory-bound op.
CopyBandwidth measure_copy_bandwidth(Backend& backend, double buffer_bytes, const TimingOptions& options);

// Whether a calibration's timings were steady enough to fit: a busy machine (other processes on
// the cores, their caches and memory traffic) or a device changing speed during the run shows in
// them two ways.
//   spread  each shape is timed at least five times; (p90 - p10) / median measures how much its
//           runs disagree. The fit uses the medians: with n runs the median's relative standard
//           error is about 1.25 sigma / sqrt(n), and sigma ~ (p90 - p10) / 2.56, so about 0.22 x
//           the spread at five runs. A median spread over shapes above 0.2 leaves the typical
//           shape uncertain by more than ~5%, the fit's robust scale and the size of the shape
//           effects it fits (a wave of tiles, a ramp in K): the fit could not tell them from noise.
//           A quiet CPU core reads ~0.1 (a microsecond memory-bound kernel jitters by tens of
//           percent), a GPU ~0.01.
//   drift   one reference GEMM timed before the measurements and again after them: the same
//           kernel should take the same time. If it moved by more than 10%, shapes timed early and
//           late disagree by as much, and the profile's predictions cannot be trusted to 10%.
struct NoiseOptions {
  double max_median_spread = 0.2;
  double max_reference_drift = 0.1;
};

struct NoiseVerdict {
  bool noisy = false;
  int64_t shapes = 0;        // timings the spread is taken over
  double median_spread = 0;  // median over shapes of (p90 - p10) / median
  double p90_spread = 0;     // the 90th percentile of the same
  bool reference_timed = false;
  double reference_start_s = 0, reference_end_s = 0;  // the reference GEMM's medians
  double reference_drift = 0;                         // reference_end_s / reference_start_s - 1
  std::vector<std::string> reasons;                   // why noisy, one line each; empty when trusted
};

// The verdict on `timings` (one per measured shape) and, when both are given, the reference
// GEMM's timings at the start and the end of the run. Timings with a median that is not positive
// are left out.
NoiseVerdict judge_noise(const std::vector<Timing>& timings, const Timing* reference_start, const Timing* reference_end,
                         const NoiseOptions& options = {});

// The reference GEMM: size x size x size (A x B^T) in `dtype`.
Op reference_gemm(DType dtype, int64_t size);

// The CPU backend takes its thread count from OpenMP's default when it is made (make_backend):
// this sets that default for the calling thread, so that the next CPU backend uses `threads`.
void set_cpu_backend_threads(int threads);

}  // namespace tpsim
