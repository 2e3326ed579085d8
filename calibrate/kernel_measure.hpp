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
  bool progress = false;  // redraw a progress line on stderr (only when it is a terminal)
};

struct MeasureReport {
  std::vector<KernelMeasurement> measurements;
  std::vector<std::string> unsupported;  // "shape: why", for ops the backend cannot run
  int64_t skipped_for_budget = 0;        // planned ops left out because the budget would not hold them
  double seconds = 0;                    // wall-clock time spent
};

// Times the plan's ops in order. Before each op its cost (warm-up and the least repetitions) is
// estimated from `estimate_s` (seconds per run, e.g. the cost model under the starting profile),
// scaled by how far the measurements of its group so far were from their estimates; an op whose
// estimated cost would overrun the budget is skipped, and measuring stops when the budget is spent.
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

// The CPU backend takes its thread count from OpenMP's default when it is made (make_backend):
// this sets that default for the calling thread, so that the next CPU backend uses `threads`.
void set_cpu_backend_threads(int threads);

// One progress line on stderr, redrawn in place, only when stderr is a terminal.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled);
  ~ProgressLine();
  void draw(const std::string& text);  // at most a few times a second
  void clear();

 private:
  bool enabled_;
  bool drawn_ = false;
  double last_s_ = -1;
};

}  // namespace tpsim
