#include "calibrate/kernel_measure.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "io/error.hpp"
#include "io/progress.hpp"
#include "kernels/cuda/gpu_backend.hpp"
#include "kernels/timing.hpp"

namespace tpsim {

namespace {

// The median of the last `window` ratios measured / estimated (1 before any).
class RecentRatio {
 public:
  explicit RecentRatio(size_t window) : window_(window) {}
  double factor() const {
    if (ratios_.empty()) return 1.0;
    const auto first = ratios_.end() - static_cast<std::ptrdiff_t>(std::min(window_, ratios_.size()));
    std::vector<double> v(first, ratios_.end());
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
  void add(double measured_s, double estimate_s) {
    if (estimate_s > 0 && std::isfinite(measured_s / estimate_s)) ratios_.push_back(measured_s / estimate_s);
  }

 private:
  size_t window_;
  std::vector<double> ratios_;
};

// Measured / estimated seconds per run so far, per group: the estimate's correction. Every ratio
// counts: the group's ops keep their cost-model error for the whole plan.
class EstimateCorrection {
 public:
  double factor(ShapeGroup g) const { return ratios_[static_cast<size_t>(g)].factor(); }
  void add(ShapeGroup g, double measured_s, double estimate_s) {
    ratios_[static_cast<size_t>(g)].add(measured_s, estimate_s);
  }

 private:
  std::array<RecentRatio, 3> ratios_{RecentRatio(SIZE_MAX), RecentRatio(SIZE_MAX), RecentRatio(SIZE_MAX)};
};

// The wall-clock seconds a timing took over its estimated cost: what the per-run correction does not
// see. The CPU backend times with the thread's CPU clock, so a loaded host (CI runs suites side by
// side) stretches the wall time a batch takes beyond its timed runs, and a sequence's runs each
// first fill the caches. The recent batches only: the load changes while the plan runs.
constexpr size_t kWallWindow = 8;

// The ops of one timing: one op, or on a backend that times inside a sequence up to
// kSequenceOps consecutive ones.
struct Batch {
  std::vector<size_t> index;  // into the plan
  std::vector<double> estimate_s;
};

// Whether the backend ran the op and timed it at a positive, finite time.
bool timed(const Timing& t) { return t.supported && t.median_s > 0 && std::isfinite(t.median_s); }

// Records `timing` of plan[i] (or why it could not be timed).
void record(MeasureReport& report, const PlannedOp& p, const Timing& timing) {
  if (!timing.supported) {
    report.unsupported.push_back(shape_key(p.op) + ": " + timing.reason);
  } else if (!timed(timing)) {
    report.unsupported.push_back(shape_key(p.op) + ": timed at " + std::to_string(timing.median_s) +
                                 " s, below what the clock resolves");
  } else {
    report.measurements.push_back({p.op, p.source, p.held_out, timing});
  }
}

// Times a batch: alone, or inside the sequence of the batch's ops (each op's runs in the sequence).
// Returns the seconds one run of the batch took as timed (an op that was not timed at its estimate).
double time_batch(Backend& backend, const std::vector<PlannedOp>& plan, const Batch& b, const TimingOptions& t,
                  MeasureReport& report, EstimateCorrection& correction) {
  if (b.index.size() == 1 && !backend.times_in_sequence()) {
    const PlannedOp& p = plan[b.index[0]];
    const Timing timing = backend.time_op(p.op, t);
    if (timed(timing)) correction.add(group_of(p.op), timing.median_s, b.estimate_s[0]);
    record(report, p, timing);
    return timed(timing) ? timing.median_s : b.estimate_s[0];
  }
  std::vector<Op> ops;
  for (size_t i : b.index) ops.push_back(plan[i].op);
  // Each run of a sequence first fills the caches with other data (~2 ms on the CPU): at most 20
  // runs, whose median is good to a few percent, not the 50 a microsecond op alone may take.
  TimingOptions in_sequence = t;
  in_sequence.sequence_ops_alone = false;
  in_sequence.max_repetitions = std::max(in_sequence.min_repetitions, std::min(in_sequence.max_repetitions, 20));
  const SequenceTiming s = backend.time_sequence(ops, in_sequence);
  double run_s = 0;
  for (size_t j = 0; j < b.index.size(); ++j) {
    const PlannedOp& p = plan[b.index[j]];
    Timing timing;
    if (!s.supported || s.in_sequence.size() != ops.size()) {
      timing.supported = false;
      timing.reason = s.supported ? "the backend did not time the op inside the sequence" : s.reason;
    } else {
      timing = s.in_sequence[j];
      correction.add(group_of(p.op), timing.median_s, b.estimate_s[j]);
    }
    run_s += timed(timing) ? timing.median_s : b.estimate_s[j];
    record(report, p, timing);
  }
  return run_s;
}

}  // namespace

MeasureReport measure_plan(Backend& backend, const std::vector<PlannedOp>& plan, const MeasureOptions& options,
                           const std::function<double(const Op&)>& estimate_s) {
  validate(options.timing);
  MeasureReport report;
  const double start_s = host_seconds();
  EstimateCorrection correction;
  RecentRatio wall(kWallWindow);
  // A run's cost: the warm-up runs and the least repetitions, or as long as the repetitions may
  // go on when they are short.
  const TimingOptions& t = options.timing;
  const auto cost_s = [&](double run_s) {
    const double least = run_s * (t.warmup + t.min_repetitions);
    return std::max(least, std::min(t.min_seconds, t.max_seconds) + run_s * t.warmup);
  };
  const size_t batch_ops = backend.times_in_sequence() ? kSequenceOps : 1;

  Progress progress("calibrate kernels", static_cast<int64_t>(plan.size()), options.progress);
  size_t i = 0;
  while (i < plan.size()) {
    const double elapsed = host_seconds() - start_s;
    if (elapsed >= options.budget_s) {
      report.skipped_for_budget += static_cast<int64_t>(plan.size() - i);
      break;
    }
    char line[160];
    std::snprintf(line, sizeof line, "calibrate kernels: %zu/%zu shapes, %.0f of %.0f s", i, plan.size(), elapsed,
                  options.budget_s);
    progress.show(line);
    // The next ops the backend runs and the budget holds, up to batch_ops of them.
    Batch b;
    double batch_run_s = 0;
    for (; i < plan.size() && b.index.size() < batch_ops; ++i) {
      const PlannedOp& p = plan[i];
      if (std::string why = backend.unsupported(p.op); !why.empty()) {
        report.unsupported.push_back(shape_key(p.op) + ": " + why);
        continue;
      }
      const double estimate = estimate_s(p.op);
      const double cost = cost_s(batch_run_s + estimate * correction.factor(group_of(p.op))) * wall.factor();
      if (elapsed + cost > options.budget_s) {
        ++report.skipped_for_budget;
        continue;
      }
      batch_run_s += estimate * correction.factor(group_of(p.op));
      b.index.push_back(i);
      b.estimate_s.push_back(estimate);
    }
    if (b.index.empty()) continue;
    // The wall ratio is taken over the cost of the runs as timed: over the estimate it would also
    // hold the per-run correction this batch taught, and count it twice in the batches after.
    const double batch_start_s = host_seconds();
    const double timed_run_s = time_batch(backend, plan, b, t, report, correction);
    wall.add(host_seconds() - batch_start_s, cost_s(timed_run_s));
  }
  progress.finish();
  report.seconds = host_seconds() - start_s;
  return report;
}

CopyBandwidth measure_copy_bandwidth(Backend& backend, double buffer_bytes, const TimingOptions& options) {
  CopyBandwidth c;
  c.buffer_bytes = buffer_bytes;
  if (auto* probe = dynamic_cast<GpuCopyProbe*>(&backend)) {
    c.timing = probe->time_copy(buffer_bytes, options);
    if (!c.timing.supported) throw Error("copy bandwidth: " + c.timing.reason);
    c.bytes_per_s = 2.0 * buffer_bytes / c.timing.median_s;
    c.method = "device-to-device copy kernel over " + std::to_string(static_cast<int64_t>(buffer_bytes / (1 << 20))) +
               " MiB (reads and writes counted)";
    return c;
  }
  // x *= c over fp32 elements: each byte read once and written once, as a copy moves them.
  const auto elements = static_cast<int64_t>(buffer_bytes / 4.0);
  const Op op = membound_op("copy_bandwidth.scale", MemKind::kScale, elements, 1, DType::kFp32,
                            4.0 * static_cast<double>(elements), 4.0 * static_cast<double>(elements));
  c.timing = backend.time_op(op, options);
  if (!c.timing.supported) throw Error("copy bandwidth: " + c.timing.reason);
  c.bytes_per_s = (op.bytes_read + op.bytes_written) / c.timing.median_s;
  c.method = "in-place fp32 scale (x *= c) over " + std::to_string(static_cast<int64_t>(buffer_bytes / (1 << 20))) +
             " MiB (reads and writes counted)";
  return c;
}

NoiseVerdict judge_noise(const std::vector<Timing>& timings, const Timing* reference_start, const Timing* reference_end,
                         const NoiseOptions& options) {
  NoiseVerdict v;
  std::vector<double> spreads;
  for (const Timing& t : timings)
    if (t.supported && t.median_s > 0 && std::isfinite(t.median_s) && std::isfinite(t.p10_s) && std::isfinite(t.p90_s))
      spreads.push_back(std::max(0.0, t.p90_s - t.p10_s) / t.median_s);
  v.shapes = static_cast<int64_t>(spreads.size());
  char line[200];
  if (!spreads.empty()) {
    v.median_spread = median(spreads);
    v.p90_spread = percentile(spreads, 0.9);
    if (v.median_spread > options.max_median_spread) {
      std::snprintf(line, sizeof line,
                    "the runs of a shape disagree: median (p90 - p10) / median %.2f over %lld shapes, above %.2f",
                    v.median_spread, static_cast<long long>(v.shapes), options.max_median_spread);
      v.reasons.emplace_back(line);
    }
  }
  if (reference_start && reference_end && reference_start->median_s > 0 && reference_end->median_s > 0) {
    v.reference_timed = true;
    v.reference_start_s = reference_start->median_s;
    v.reference_end_s = reference_end->median_s;
    v.reference_drift = v.reference_end_s / v.reference_start_s - 1.0;
    if (std::abs(v.reference_drift) > options.max_reference_drift) {
      std::snprintf(line, sizeof line,
                    "the reference GEMM took %.3g s at the start and %.3g s at the end (%+.1f%%, beyond %.0f%%)",
                    v.reference_start_s, v.reference_end_s, 100 * v.reference_drift, 100 * options.max_reference_drift);
      v.reasons.emplace_back(line);
    }
  }
  v.noisy = !v.reasons.empty();
  return v;
}

Op reference_gemm(DType dtype, int64_t size) {
  // Bytes as the plan's GEMMs count them (kernel_plan.cpp): fp8 reads one byte and writes bf16.
  return gemm_op("reference_gemm", size, size, size, dtype, gemm_operand_bytes(dtype), gemm_output_bytes(dtype), false,
                 true);
}

void set_cpu_backend_threads(int threads) {
  if (threads < 1) throw Error("--threads " + std::to_string(threads) + " must be at least 1");
  omp_set_num_threads(threads);
}

}  // namespace tpsim
