#include "calibrate/kernel_calibration.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "calibrate/kernel_device.hpp"
#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/text_format.hpp"
#include "kernels/timing.hpp"
#include "model/cost.hpp"
#include "model/ops.hpp"

namespace tpsim {
namespace {

// The CPU's bandwidth probe: 256 MiB, most of which no cache holds (this development machine's
// L3 is reported as 300 MiB but is shared with other guests of its host).
constexpr double kCpuCopyBytes = 256.0 * (1 << 20);
constexpr double kGpuCopyBytes = 1024.0 * (1 << 20);

// How each op is timed: a warm-up, then repetitions until the median is stable enough (at least
// five, at least 10 ms measured on the CPU) without letting a slow op repeat for long.
TimingOptions timing_for(bool gpu, bool thread_cpu_clock) {
  TimingOptions t;
  t.warmup = 1;
  t.min_repetitions = 5;
  t.max_repetitions = gpu ? 100 : 50;
  t.min_seconds = gpu ? 0.02 : 0.01;
  t.max_seconds = gpu ? 0.5 : 0.25;
  t.flush_cache = true;
  t.thread_cpu_clock = thread_cpu_clock;
  return t;
}

// The GEMM formats the backend runs and (for a datasheet device) the device has. A format passes
// when a 256^3 GEMM in it runs once: a library can accept a format when the GEMM is planned and
// refuse it when it runs (cuBLASLt 13.1 with fp8 on H100 and H200, data/kernel-runs/README.md), and
// a format planned but not run would leave its casts in the memory-bound fit (amp_fp8's
// cast-transposes were 254 of its 650 shapes) with no GEMM of its own. Each format left out is
// named on `log`.
std::vector<DType> measured_formats(Backend& backend, const std::optional<DeviceSpec>& datasheet, std::ostream* log) {
  TimingOptions once;
  once.warmup = 0;
  once.min_repetitions = once.max_repetitions = 1;
  once.min_seconds = 0;
  once.flush_cache = false;
  std::vector<DType> out;
  for (DType t : {DType::kFp8, DType::kBf16, DType::kFp16, DType::kTf32, DType::kFp32}) {
    if (datasheet && !datasheet->supports(t)) continue;
    const Op probe =
        gemm_op("format probe", 256, 256, 256, t, gemm_operand_bytes(t), gemm_output_bytes(t), false, true);
    if (!backend.unsupported(probe).empty()) continue;
    const Timing run = backend.time_op(probe, once);
    if (run.supported) {
      out.push_back(t);
    } else if (log) {
      *log << "  " << to_string(t) << " GEMMs not measured: the format probe did not run (" << run.reason << ")\n";
    }
  }
  return out;
}

// The reference GEMM of the noise verdict: a shape the backend runs in about a millisecond (CPU) or
// a quarter of one (GPU), timed with more repetitions than the plan's ops (30 ms of runs, at least
// ten), so that its median moves by well under the drift threshold on a quiet machine: on this
// development machine's CPU its runs spread by ~10% (p10 to p90) and its median over ~25 runs is
// good to ~1%. The two timings take ~0.1 s of the budget.
constexpr int64_t kCpuReferenceGemm = 384;
constexpr int64_t kGpuReferenceGemm = 4096;

TimingOptions reference_timing_for(TimingOptions t) {
  t.min_repetitions = 10;
  t.max_repetitions = std::max(t.max_repetitions, 100);
  t.min_seconds = 0.03;
  t.max_seconds = 0.5;
  return t;
}

bool has_format(const KernelPlanOptions& plan, DType t) {
  return std::find(plan.gemm_dtypes.begin(), plan.gemm_dtypes.end(), t) != plan.gemm_dtypes.end();
}

// The profile whose values kernel runs do not measure are kept: --base, else the device's default.
DeviceProfile base_profile(const KernelCalibrationOptions& o, const std::string& device_id) {
  if (o.base) {
    if (o.base->device != device_id && o.log)
      *o.log << "tpsim: note: --base " << o.base_path << " is for device " << o.base->device
             << "; its values not measured here carry over to " << device_id << "\n";
    return *o.base;
  }
  const std::filesystem::path defaults = data_dir() / "profiles" / "defaults" / (device_id + ".json");
  if (std::filesystem::exists(defaults)) return load_default_profile(device_id);
  if (!o.gpu()) return load_default_profile("cpu");
  throw Error("--base: no default profile for device " + device_id + " (" + defaults.string() +
              "); pass --base PROFILE for the values kernel runs do not measure");
}

// The sweep and the formats to plan: the backend's defaults with the options' sweep, the formats
// the backend runs, and on a GPU the mixed precisions those formats allow.
KernelPlanOptions plan_options_for(const KernelCalibrationOptions& o, Backend& backend,
                                   const std::optional<DeviceSpec>& datasheet) {
  KernelPlanOptions plan = default_kernel_plan_options(o.gpu());
  if (!o.seq_lens.empty()) plan.seq_lens = o.seq_lens;
  if (!o.micro_batches.empty()) plan.micro_batches = o.micro_batches;
  plan.models = o.models;
  plan.gemm_dtypes = measured_formats(backend, datasheet, o.log);
  if (plan.gemm_dtypes.empty())
    throw Error("--backend " + std::string(to_string(o.backend)) + ": the backend runs no GEMM format");
  if (o.gpu()) {
    plan.precisions.clear();
    if (has_format(plan, DType::kBf16)) plan.precisions.push_back(Precision::kAmpBf16);
    else if (has_format(plan, DType::kFp16)) plan.precisions.push_back(Precision::kAmpFp16);
    else plan.precisions.push_back(Precision::kFp32);
    if (has_format(plan, DType::kFp8) && has_format(plan, DType::kBf16)) plan.precisions.push_back(Precision::kAmpFp8);
  }
  return plan;
}

// Estimates for the budget: the cost model's parameters under the base profile, with any format
// the base has no rate for at its fastest one.
CostParams estimate_params(const CostParams& base, const std::vector<DType>& formats) {
  CostParams p = base;
  double fastest_rate = 0;
  for (int t = 0; t < kNumDTypes; ++t) fastest_rate = std::max(fastest_rate, p.gemm_flops_per_s(DType(t)));
  for (DType t : formats) {
    double& r = p.gemm_flops_per_s(t);
    if (!(r > 0)) r = fastest_rate > 0 ? fastest_rate : 1e12;
  }
  return p;
}

// A CPU's "peak" is first what it was measured to reach: the fastest GEMM of each format.
void set_measured_peaks(DeviceSpec& spec, const MeasureReport& measured, const std::vector<DType>& formats,
                        const BackendInfo& info) {
  for (DType t : formats) {
    double best = 0;
    std::string where;
    for (const auto& m : measured.measurements)
      if (m.op.kind == OpKind::kGemm && m.op.dtype == t && m.op.flops / m.timing.median_s > best) {
        best = m.op.flops / m.timing.median_s;
        where = shape_text(m.op);
      }
    if (best > 0) {
      spec.peak_flops_per_s[static_cast<int>(t)] = best;
      spec.sources["peak_dense_tflops." + std::string(to_string(t))] =
          "kernel run: the fastest " + std::string(to_string(t)) + " GEMM measured by tpsim calibrate kernels (" +
          where + ", " + info.device_name + ", " + utc_timestamp().substr(0, 10) +
          "); measured, not a datasheet peak (there is none)";
    }
  }
  bool any = false;
  for (int t = 0; t < kNumDTypes; ++t) any = any || spec.peak_flops_per_s[t] > 0;
  if (!any) throw Error("calibrate kernels: no GEMM was measured, so the device has no measured peak");
}

// After the fit: a measured device's peak is the large-GEMM rate fitted for the format where that
// is above the fastest GEMM measured (no GEMM the profile predicts is then capped below it).
void raise_measured_peaks(DeviceSpec& spec, const KernelFitResult& fit, const BackendInfo& info) {
  for (const FittedParameter& f : fit.fitted)
    for (int t = 0; t < kNumDTypes; ++t) {
      double& peak = spec.peak_flops_per_s[t];
      if (f.param != &gemm_rate_param(DType(t)) || !(f.value > peak) || !(peak > 0)) continue;
      char line[320];
      std::snprintf(line, sizeof line,
                    "kernel fit: the large-GEMM %s rate tpsim calibrate kernels fitted (%s, %s), %.3g FLOP/s; the "
                    "fastest GEMM measured ran at %.3g (%.0f%% of it); measured, not a datasheet peak (there is none)",
                    std::string(to_string(DType(t))).c_str(), info.device_name.c_str(),
                    utc_timestamp().substr(0, 10).c_str(), f.value, peak, 100.0 * peak / f.value);
      spec.sources["peak_dense_tflops." + std::string(to_string(DType(t)))] = line;
      peak = f.value;
    }
}

// Times the reference GEMM, the plan within what is left of the budget, and the reference again;
// fills the calibration's measurements and noise verdict.
void measure(KernelCalibration& c, Backend& backend, const std::vector<PlannedOp>& plan, const CostModel& estimator,
             double started_s, const KernelCalibrationOptions& o) {
  const DType reference_dtype =
      has_format(c.plan_options, DType::kBf16) ? DType::kBf16 : c.plan_options.gemm_dtypes.front();
  c.reference = reference_gemm(reference_dtype, o.gpu() ? kGpuReferenceGemm : kCpuReferenceGemm);
  c.reference_timing = reference_timing_for(c.timing);
  c.reference_start = backend.time_op(c.reference, c.reference_timing);

  // What is left of the budget after start-up and the bandwidth probe, less the fit's share
  // (a few seconds: six tile candidates and four attention blocks, three starts each).
  MeasureOptions measure;
  measure.timing = c.timing;
  measure.progress = o.progress;
  const double fit_reserve_s = std::max(3.0, 0.08 * c.budget_s);
  measure.budget_s = c.budget_s - (host_seconds() - started_s) - fit_reserve_s;
  if (measure.budget_s <= 0)
    throw Error("--budget " + fixed(c.budget_s, 0) + ": no time is left for measurements after start-up and the fit");
  c.measured = measure_plan(backend, plan, measure, [&](const Op& op) { return estimator.op_seconds(op); });
  if (c.measured.measurements.empty()) throw Error("--budget " + fixed(c.budget_s, 0) + ": no shape could be measured");
  c.reference_end = backend.time_op(c.reference, c.reference_timing);
  std::vector<Timing> timings;
  for (const auto& m : c.measured.measurements) timings.push_back(m.timing);
  c.noise = judge_noise(timings, c.reference_start.supported ? &c.reference_start : nullptr,
                        c.reference_end.supported ? &c.reference_end : nullptr, c.noise_options);
}

// The profile: the base with the fitted values, each marked "kernel". Values the run did not
// measure stay the base's; a datasheet-less device has no formats but those its backend runs (a
// format it runs whose GEMMs were too few to fit keeps the base's value).
DeviceProfile fitted_profile(const KernelCalibration& c, const DeviceProfile& base, int64_t samples, int64_t held_out) {
  DeviceProfile out = base;
  out.device = c.device_id;
  if (!c.datasheet) out.device_spec = c.spec;
  else out.device_spec.reset();
  out.params = c.fit.params;
  const std::string detail = "tpsim calibrate kernels --backend " + c.info.backend + " on " + c.info.device_name +
                             ", " + c.date + ", fitted to " + std::to_string(samples - held_out) + " measurements (" +
                             std::to_string(held_out) + " more held out)";
  for (const auto& f : c.fit.fitted) out.sources[std::string(f.param->name)] = {SourceKind::kKernel, detail, f.stddev};
  for (int t = 0; t < kNumDTypes; ++t) {
    const std::string name(gemm_rate_param(DType(t)).name);
    if (!c.datasheet && !has_format(c.plan_options, DType(t))) {
      out.params.gemm_flops_per_s(DType(t)) = 0;
      out.sources[name] = {
          SourceKind::kKernel,
          "the " + c.info.backend + " backend does not run " + std::string(kDTypeNames[t]) + " GEMMs (0: unsupported)",
          -1};
    }
  }
  return out;
}

}  // namespace

std::string KernelCalibrationOptions::check() const {
  if (gpu() && threads != 1) return "--threads applies to the CPU backend only";
  if (gpu() && !clock.empty()) return "--clock applies to the CPU backend only (GPU backends time with events)";
  if (!clock.empty() && clock != "cpu" && clock != "wall")
    return "--clock '" + clock + "': expected cpu (the thread's CPU time) or wall";
  if (thread_clock() && threads != 1)
    return "--clock cpu: the thread CPU clock times one thread, not " + std::to_string(threads) +
           " (--threads 1, or --clock wall)";
  if (threads < 1) return "--threads " + std::to_string(threads) + " must be at least 1";
  return "";
}

std::unique_ptr<Backend> make_calibration_backend(const KernelCalibrationOptions& options) {
  if (!options.gpu()) set_cpu_backend_threads(options.threads);
  return make_backend(options.backend, options.device_index);
}

KernelCalibration calibrate_kernels(const KernelCalibrationOptions& o, Backend& backend) {
  const double started_s = o.started_s >= 0 ? o.started_s : host_seconds();
  if (const std::string why = o.check(); !why.empty()) throw Error(why);
  KernelCalibration c;
  c.backend = o.backend;
  c.threads = o.threads;
  c.info = backend.info();
  c.budget_s = o.budget_or_default_s();

  // The device: a datasheet device keeps its spec; anything else gets one from measurements.
  const std::string datasheet_id = o.gpu() ? matching_datasheet_device(c.info) : "";
  std::optional<DeviceSpec> datasheet;
  if (!datasheet_id.empty()) datasheet = load_device(datasheet_id);
  c.datasheet = datasheet.has_value();
  c.device_id = !datasheet_id.empty() ? datasheet_id : (o.gpu() ? sanitized_device_id(c.info.device_name) : "cpu");
  c.timing = timing_for(o.gpu(), o.thread_clock());
  c.copy = measure_copy_bandwidth(backend, o.gpu() ? kGpuCopyBytes : kCpuCopyBytes, c.timing);
  c.spec = datasheet ? *datasheet : measured_device_spec(c.device_id, c.info, c.copy, o.gpu());
  const DeviceProfile base = base_profile(o, c.device_id);
  c.base_profile = o.base ? o.base_path : base.origin;

  c.plan_options = plan_options_for(o, backend, datasheet);
  const std::vector<PlannedOp> plan = make_kernel_plan(c.plan_options);
  c.planned_shapes = plan.size();
  // CostModel keeps references to its spec and parameters: both must outlive it.
  const CostParams estimate = at_kernel_run_clock(estimate_params(base.params, c.plan_options.gemm_dtypes));
  const CostModel estimator(c.spec, estimate);
  measure(c, backend, plan, estimator, started_s, o);
  if (!datasheet) set_measured_peaks(c.spec, c.measured, c.plan_options.gemm_dtypes, c.info);

  std::vector<KernelSample> samples;
  int64_t held_out = 0;
  for (const auto& m : c.measured.measurements) {
    samples.push_back({m.op, m.timing.median_s, m.held_out});
    held_out += m.held_out ? 1 : 0;
  }
  const double fit_start_s = host_seconds();
  // A measured device's fit sees no peak: its fastest GEMM ran at a shape the fit's terms slow below
  // the large-GEMM rate, and a cap at that GEMM would hold the rate where no residual moves it (it
  // kept its start, 1.1x the fastest, with a standard deviation of 0). The peak is raised after.
  DeviceSpec fit_spec = c.spec;
  if (!datasheet)
    for (DType t : c.plan_options.gemm_dtypes) fit_spec.peak_flops_per_s[static_cast<int>(t)] = 0;
  c.fit = fit_kernels(samples, fit_spec, base.params, c.fit_options);
  if (!datasheet) raise_measured_peaks(c.spec, c.fit, c.info);
  c.fit_s = host_seconds() - fit_start_s;
  c.date = utc_timestamp();
  c.profile = fitted_profile(c, base, static_cast<int64_t>(samples.size()), held_out);
  const CostParams at_run_clock = at_kernel_run_clock(c.profile.params);
  const CostModel fitted_model(c.spec, at_run_clock);
  for (const auto& m : c.measured.measurements) c.predicted_s.push_back(fitted_model.op_seconds(m.op));
  c.wall_s = host_seconds() - started_s;
  return c;
}

}  // namespace tpsim
