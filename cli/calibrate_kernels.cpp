// tpsim calibrate kernels: time the kernels the simulator costs on a measurement backend (CPU,
// CUDA, HIP), fit the cost model's kernel-level parameters to them with Ceres, check the fit on
// held-out shapes, and write a profile whose fitted parameters say "kernel" with the backend, date
// and number of measurements; everything else keeps the base profile's value and provenance.
//
// The chain: make the backend -> measure the copy bandwidth -> the device's spec (datasheet, or
// measured for a CPU or a GPU without a datasheet) -> the measurement plan (kernel_plan.hpp) ->
// time it within the budget -> fit (kernel_fit.hpp) -> held-out errors -> write the profile.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>

#include "calibrate/kernel_device.hpp"
#include "calibrate/kernel_fit.hpp"
#include "calibrate/kernel_measure.hpp"
#include "calibrate/kernel_plan.hpp"
#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/profile_io.hpp"
#include "kernels/timing.hpp"
#include "model/cost.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"


namespace tpsim {
namespace {

struct CalibrateKernelsOptions {
  std::string backend;
  int device_index = 0;
  double budget_s = 0;  // 0: the backend's default
  std::string base;
  std::string out;
  std::vector<std::string> models;  // names, ranges, or a models YAML file
  std::string seq;                  // empty: the backend's default
  std::string micro_batches;
  int threads = 1;
  std::string clock;  // CPU: "cpu" (the thread's CPU clock) or "wall"; empty: cpu on one thread
};

// Default budgets: a minute on the CPU (the plan's grid is sized for it), ten on a GPU, whose
// catalogue sweep has far more shapes.
constexpr double kCpuBudgetS = 60;
constexpr double kGpuBudgetS = 600;
// The CPU's bandwidth probe: 256 MiB, most of which no cache holds (this development machine's
// L3 is reported as 300 MiB but is shared with other guests of its host).
constexpr double kCpuCopyBytes = 256.0 * (1 << 20);
constexpr double kGpuCopyBytes = 1024.0 * (1 << 20);

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Three significant digits: a standard deviation of 2e-8 s must not print as 0.000000.
std::string sig(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

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

// The GEMM formats the backend runs and (for a datasheet device) the device has.
std::vector<DType> measured_formats(Backend& backend, const std::optional<DeviceSpec>& datasheet) {
  std::vector<DType> out;
  for (DType t : {DType::kFp8, DType::kBf16, DType::kFp16, DType::kTf32, DType::kFp32}) {
    if (datasheet && !datasheet->supports(t)) continue;
    Op probe{};
    probe.name = "format probe";
    probe.kind = OpKind::kGemm;
    probe.category = OpCategory::kGemm;
    probe.dtype = t;
    probe.trans_b = true;
    probe.m = probe.n = probe.k = 256;
    probe.kernels = 1;
    probe.flops = 2.0 * 256 * 256 * 256;
    if (backend.unsupported(probe).empty()) out.push_back(t);
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

nlohmann::json timing_json(const TimingOptions& t) {
  return {{"warmup", t.warmup},           {"min_repetitions", t.min_repetitions},
          {"max_repetitions", t.max_repetitions}, {"min_seconds", t.min_seconds},
          {"max_seconds", t.max_seconds}, {"flush_cache", t.flush_cache}};
}

nlohmann::json noise_json(const NoiseVerdict& v, const NoiseOptions& o, const Op& reference, const TimingOptions& reference_timing,
                          const Timing& start, const Timing& end) {
  const auto timing = [](const Timing& t) {
    if (!t.supported) return nlohmann::json{{"unsupported", t.reason}};
    return nlohmann::json{{"median_s", t.median_s}, {"p10_s", t.p10_s}, {"p90_s", t.p90_s}, {"repetitions", t.repetitions}};
  };
  return {{"verdict", v.noisy ? "noisy" : "trusted"},
          {"noisy", v.noisy},
          {"reasons", v.reasons},
          {"shapes", v.shapes},
          {"median_spread", v.median_spread},
          {"p90_spread", v.p90_spread},
          {"max_median_spread", o.max_median_spread},
          {"spread", "(p90 - p10) / median of each shape's timed runs; the median over shapes"},
          {"reference",
           {{"shape", shape_text(reference)},
            {"dtype", std::string(to_string(reference.dtype))},
            {"timing", timing_json(reference_timing)},
            {"start", timing(start)},
            {"end", timing(end)},
            {"drift", v.reference_timed ? nlohmann::json(v.reference_drift) : nlohmann::json()}}},
          {"max_reference_drift", o.max_reference_drift}};
}

void run_calibrate_kernels(const CalibrateKernelsOptions& o, const std::string& command_line) {
  const double t0 = host_seconds();
  const auto kind = parse_backend(o.backend);
  if (!kind) throw Error("--backend '" + o.backend + "': expected cpu, cuda or hip");
  const bool gpu = *kind != BackendKind::kCpu;
  if (gpu && o.threads != 1) throw Error("--threads applies to the CPU backend only");
  if (gpu && !o.clock.empty()) throw Error("--clock applies to the CPU backend only (GPU backends time with events)");
  if (!o.clock.empty() && o.clock != "cpu" && o.clock != "wall")
    throw Error("--clock '" + o.clock + "': expected cpu (the thread's CPU time) or wall");
  // One thread is timed by its CPU clock unless asked otherwise: on a shared machine the time
  // other processes take from the core is not the kernel's.
  const bool thread_clock = !gpu && (o.clock.empty() ? o.threads == 1 : o.clock == "cpu");
  if (thread_clock && o.threads != 1)
    throw Error("--clock cpu: the thread CPU clock times one thread, not " + std::to_string(o.threads) +
                " (--threads 1, or --clock wall)");
  const double budget_s = o.budget_s > 0 ? o.budget_s : (gpu ? kGpuBudgetS : kCpuBudgetS);

  // The sweep's models: names and ranges from the catalogue, a YAML file's models added to it.
  CommonOptions common;
  const std::vector<std::string> specs = take_models_file(o.models, common);
  Context ctx(common);
  const std::vector<std::string> model_names = ctx.select_models(specs, gpu ? "125m..70b" : "tiny");

  KernelPlanOptions plan_options = default_kernel_plan_options(gpu);
  if (!o.seq.empty()) plan_options.seq_lens = parse_count_list("--seq", o.seq, kMaxSeqLen);
  if (!o.micro_batches.empty()) plan_options.micro_batches = parse_count_list("--micro-batch", o.micro_batches, 1 << 20);
  for (const auto& name : model_names) plan_options.models.push_back(ctx.catalog().get(name));
  // The base profile, read before anything is measured so that a bad file fails at once.
  std::optional<DeviceProfile> user_base;
  if (!o.base.empty()) user_base = load_profile(o.base);

  // The backend (a missing device is a one-line Error here), on the CPU with the thread count asked.
  if (!gpu) set_cpu_backend_threads(o.threads);
  const std::unique_ptr<Backend> backend = make_backend(*kind, o.device_index);
  const BackendInfo info = backend->info();
  std::cerr << "tpsim calibrate kernels: " << info.backend << ", " << info.device_name << " (" << info.library_versions
            << ")\n";

  // The device: a datasheet device keeps its spec; anything else gets one from measurements.
  const std::string datasheet_id = gpu ? matching_datasheet_device(info) : "";
  std::optional<DeviceSpec> datasheet;
  if (!datasheet_id.empty()) datasheet = load_device(datasheet_id);
  const std::string device_id = !datasheet_id.empty() ? datasheet_id : (gpu ? sanitized_device_id(info.device_name) : "cpu");

  const TimingOptions timing = timing_for(gpu, thread_clock);
  const CopyBandwidth copy = measure_copy_bandwidth(*backend, gpu ? kGpuCopyBytes : kCpuCopyBytes, timing);
  DeviceSpec spec = datasheet ? *datasheet : measured_device_spec(device_id, info, copy, gpu);

  DeviceProfile base;
  if (user_base) {
    base = *user_base;
    if (base.device != device_id)
      std::cerr << "tpsim: note: --base " << o.base << " is for device " << base.device << "; its values not measured here "
                << "carry over to " << device_id << "\n";
  } else {
    const std::filesystem::path defaults = data_dir() / "profiles" / "defaults" / (device_id + ".json");
    if (std::filesystem::exists(defaults)) base = load_default_profile(device_id);
    else if (!gpu) base = load_default_profile("cpu");
    else
      throw Error("--base: no default profile for device " + device_id + " (" + defaults.string() +
                  "); pass --base PROFILE for the values kernel runs do not measure");
  }

  plan_options.gemm_dtypes = measured_formats(*backend, datasheet);
  if (plan_options.gemm_dtypes.empty()) throw Error("--backend " + o.backend + ": the backend runs no GEMM format");
  if (gpu) {
    const auto has = [&](DType t) {
      return std::find(plan_options.gemm_dtypes.begin(), plan_options.gemm_dtypes.end(), t) !=
             plan_options.gemm_dtypes.end();
    };
    plan_options.precisions.clear();
    if (has(DType::kBf16)) plan_options.precisions.push_back(Precision::kAmpBf16);
    else if (has(DType::kFp16)) plan_options.precisions.push_back(Precision::kAmpFp16);
    else plan_options.precisions.push_back(Precision::kFp32);
    if (has(DType::kFp8) && has(DType::kBf16)) plan_options.precisions.push_back(Precision::kAmpFp8);
  }
  const std::vector<PlannedOp> plan = make_kernel_plan(plan_options);

  // Estimates for the budget: the cost model under the base profile, with any format the base
  // has no rate for at its fastest one.
  CostParams estimate_params = base.params;
  double fastest_rate = 0;
  for (int t = 0; t < kNumDTypes; ++t) fastest_rate = std::max(fastest_rate, estimate_params.gemm_flops_per_s(DType(t)));
  for (DType t : plan_options.gemm_dtypes) {
    double& r = estimate_params.gemm_flops_per_s(t);
    if (!(r > 0)) r = fastest_rate > 0 ? fastest_rate : 1e12;
  }
  const CostModel estimator(spec, estimate_params);

  // The reference GEMM, timed now and again after the measurements: the noise verdict's drift.
  const DType reference_dtype = std::find(plan_options.gemm_dtypes.begin(), plan_options.gemm_dtypes.end(), DType::kBf16) !=
                                        plan_options.gemm_dtypes.end()
                                    ? DType::kBf16
                                    : plan_options.gemm_dtypes.front();
  const Op reference = reference_gemm(reference_dtype, gpu ? kGpuReferenceGemm : kCpuReferenceGemm);
  const TimingOptions reference_timing = reference_timing_for(timing);
  const Timing reference_start = backend->time_op(reference, reference_timing);

  // What is left of the budget after start-up and the bandwidth probe, less the fit's share
  // (a few seconds: six tile candidates and four attention blocks, three starts each).
  MeasureOptions measure;
  measure.timing = timing;
  measure.progress = true;
  const double fit_reserve_s = std::max(3.0, 0.08 * budget_s);
  measure.budget_s = budget_s - (host_seconds() - t0) - fit_reserve_s;
  if (measure.budget_s <= 0)
    throw Error("--budget " + fmt(budget_s, 0) + ": no time is left for measurements after start-up and the fit");
  const MeasureReport measured =
      measure_plan(*backend, plan, measure, [&](const Op& op) { return estimator.op_seconds(op); });
  if (measured.measurements.empty()) throw Error("--budget " + fmt(budget_s, 0) + ": no shape could be measured");
  const Timing reference_end = backend->time_op(reference, reference_timing);
  std::vector<Timing> timings;
  for (const auto& m : measured.measurements) timings.push_back(m.timing);
  const NoiseOptions noise_options;
  const NoiseVerdict noise =
      judge_noise(timings, reference_start.supported ? &reference_start : nullptr,
                  reference_end.supported ? &reference_end : nullptr, noise_options);

  // A CPU's "peak" is what it was measured to reach: the fastest GEMM of each format.
  if (!datasheet) {
    for (DType t : plan_options.gemm_dtypes) {
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

  std::vector<KernelSample> samples;
  for (const auto& m : measured.measurements) samples.push_back({m.op, m.timing.median_s, m.held_out});
  const double fit_start_s = host_seconds();
  const KernelFitResult fit = fit_kernels(samples, spec, base.params, KernelFitOptions{});
  const double fit_s = host_seconds() - fit_start_s;

  // The profile: the base with the fitted values, each marked "kernel".
  DeviceProfile out = base;
  out.device = device_id;
  if (!datasheet) out.device_spec = spec;
  else out.device_spec.reset();
  out.params = fit.params;
  const std::string date = utc_timestamp();
  int64_t held_out = 0;
  for (const auto& s : samples) held_out += s.held_out ? 1 : 0;
  const std::string detail = "tpsim calibrate kernels --backend " + info.backend + " on " + info.device_name + ", " +
                             date + ", fitted to " + std::to_string(samples.size() - static_cast<size_t>(held_out)) +
                             " measurements (" + std::to_string(held_out) + " more held out)";
  for (const auto& f : fit.fitted) out.sources[std::string(f.param->name)] = {SourceKind::kKernel, detail, f.stddev};
  // Values the run did not measure stay the base's; a datasheet-less device has no formats but
  // those its backend runs (a format it runs whose GEMMs were too few to fit keeps the base's value).
  for (int t = 0; t < kNumDTypes; ++t) {
    const std::string name(gemm_rate_param(DType(t)).name);
    const bool runs = std::find(plan_options.gemm_dtypes.begin(), plan_options.gemm_dtypes.end(), DType(t)) !=
                      plan_options.gemm_dtypes.end();
    if (!datasheet && !runs) {
      out.params.gemm_flops_per_s(DType(t)) = 0;
      out.sources[name] = {SourceKind::kKernel, "the " + info.backend + " backend does not run " + std::string(kDTypeNames[t]) +
                                         " GEMMs (0: unsupported)", -1};
    }
  }

  // The record: backend, plan, every measurement with the fit's residual, the held-out errors.
  const CostModel fitted_model(spec, out.params);
  nlohmann::json jmeasurements = nlohmann::json::array();
  for (size_t i = 0; i < measured.measurements.size(); ++i) {
    const auto& m = measured.measurements[i];
    jmeasurements.push_back({{"op", m.op.name},
                             {"group", std::string(to_string(group_of(m.op)))},
                             {"shape", shape_text(m.op)},
                             {"dtype", std::string(to_string(m.op.dtype))},
                             {"source", m.source == PlanSource::kSweep ? "sweep" : "grid"},
                             {"held_out", m.held_out},
                             {"flops", m.op.flops},
                             {"bytes", m.op.bytes_read + m.op.bytes_written},
                             {"median_s", m.timing.median_s},
                             {"p10_s", m.timing.p10_s},
                             {"p90_s", m.timing.p90_s},
                             {"repetitions", m.timing.repetitions},
                             {"predicted_s", fitted_model.op_seconds(m.op)},
                             {"log_residual", fit.log_residuals[i]}});
  }
  nlohmann::json jerrors = nlohmann::json::object();
  for (const auto& e : fit.errors)
    jerrors[std::string(to_string(e.group))] = {{"fitted_shapes", e.fitted},
                                                {"fitted_median_abs_error", e.fitted_median},
                                                {"held_out_shapes", e.held_out},
                                                {"held_out_median_abs_error", e.held_out_median},
                                                {"held_out_p90_abs_error", e.held_out_p90}};
  nlohmann::json jparams = nlohmann::json::array();
  for (const auto& f : fit.fitted)
    jparams.push_back({{"name", std::string(f.param->name)},
                       {"value", f.value},
                       {"stddev", f.stddev < 0 ? nlohmann::json() : nlohmann::json(f.stddev)},
                       {"at_bound", f.at_bound}});
  std::vector<std::string> precisions;
  for (Precision p : plan_options.precisions) precisions.emplace_back(to_string(p));
  std::vector<std::string> formats;
  for (DType t : plan_options.gemm_dtypes) formats.emplace_back(to_string(t));
  const double wall_s = host_seconds() - t0;
  out.extra["kernel_calibration"] = {
      {"command", command_line},
      {"date", date},
      {"backend",
       {{"backend", info.backend},
        {"device_name", info.device_name},
        {"driver_version", info.driver_version},
        {"library_versions", info.library_versions},
        {"compute_units", info.compute_units},
        {"memory_bytes", info.memory_bytes}}},
      {"threads", gpu ? nlohmann::json() : nlohmann::json(o.threads)},
      {"clock", gpu ? "device events" : (thread_clock ? "thread_cpu" : "wall")},
      {"base_profile", o.base.empty() ? base.origin : o.base},
      {"budget_s", budget_s},
      {"wall_s", wall_s},
      {"measure_s", measured.seconds},
      {"fit_s", fit_s},
      {"timing", timing_json(timing)},
      {"copy_bandwidth",
       {{"method", copy.method},
        {"buffer_bytes", copy.buffer_bytes},
        {"bytes_per_s", copy.bytes_per_s},
        {"median_s", copy.timing.median_s},
        {"p10_s", copy.timing.p10_s},
        {"p90_s", copy.timing.p90_s},
        {"repetitions", copy.timing.repetitions}}},
      {"plan",
       {{"models", model_names},
        {"seq_lens", plan_options.seq_lens},
        {"micro_batches", plan_options.micro_batches},
        {"precisions", precisions},
        {"gemm_formats", formats},
        {"planned_shapes", plan.size()},
        {"measured_shapes", measured.measurements.size()},
        {"skipped_for_budget", measured.skipped_for_budget},
        {"unsupported", measured.unsupported}}},
      {"fit",
       {{"loss", "Huber on log(predicted / measured), scale " + fmt(KernelFitOptions{}.robust_scale, 2)},
        {"stages", fit.report},
        {"parameters", jparams}}},
      {"errors", jerrors},
      {"noise", noise_json(noise, noise_options, reference, reference_timing, reference_start, reference_end)},
      {"measurements", jmeasurements}};
  save_profile(o.out, out);

  // A brief report on stderr.
  std::cerr << "  device " << device_id << (datasheet ? " (datasheet data/devices/" + device_id + ".yaml)" : " (spec measured, embedded in the profile)")
            << (gpu ? "" : ", " + std::to_string(o.threads) + (o.threads == 1 ? " thread" : " threads") +
                               (thread_clock ? " timed by its CPU clock" : " timed by the wall clock"))
            << "; copy bandwidth "
            << fmt(copy.bytes_per_s / 1e9, 1) << " GB/s\n";
  std::cerr << "  measured " << measured.measurements.size() << " of " << plan.size() << " planned shapes in "
            << fmt(measured.seconds, 1) << " s (" << measured.skipped_for_budget << " left out for the budget, "
            << measured.unsupported.size() << " unsupported); fit in " << fmt(fit_s, 1) << " s\n";
  for (const auto& line : fit.report)
    if (line.rfind("  ", 0) != 0) std::cerr << "  " << line << "\n";
  for (const auto& f : fit.fitted)
    std::cerr << "    " << f.param->name << " = " << f.value
              << (f.stddev >= 0 ? " +- " + sig(f.stddev) : "") << (f.at_bound ? " (at its bound)" : "") << "\n";
  for (const auto& e : fit.errors)
    std::cerr << "  " << to_string(e.group) << ": median |error| " << fmt(100 * e.fitted_median, 1) << "% on "
              << e.fitted << " fitted shapes, " << fmt(100 * e.held_out_median, 1) << "% on " << e.held_out
              << " held-out shapes\n";
  std::cerr << "  noise: median (p90 - p10) / median " << fmt(noise.median_spread, 3) << " over " << noise.shapes
            << " shapes (at most " << fmt(noise_options.max_median_spread, 2) << ")";
  if (noise.reference_timed)
    std::cerr << ", reference GEMM " << shape_text(reference) << " " << sig(noise.reference_start_s) << " s -> "
              << sig(noise.reference_end_s) << " s (" << (noise.reference_drift >= 0 ? "+" : "")
              << fmt(100 * noise.reference_drift, 1) << "%, at most " << fmt(100 * noise_options.max_reference_drift, 0)
              << "%)";
  std::cerr << ": " << (noise.noisy ? "too noisy to trust" : "trusted") << "\n";
  std::cerr << "  " << fmt(host_seconds() - t0, 1) << " s in all; wrote " << o.out << "\n";
  if (noise.noisy) {
    std::string why;
    for (const auto& r : noise.reasons) why += (why.empty() ? "" : "; ") + r;
    std::cerr << "tpsim: warning: calibrate kernels: measurements too noisy to trust (" << why << "); " << o.out
              << " is written, marked so in kernel_calibration.noise: calibrate again on a quiet machine\n";
  }
}

}  // namespace

void register_calibrate_kernels(CLI::App& calibrate) {
  auto o = std::make_shared<CalibrateKernelsOptions>();
  auto* cmd = calibrate.add_subcommand("kernels", "time kernels on a backend and fit the kernel-level parameters to them");
  cmd->add_option("--backend", o->backend, "measurement backend: cpu, cuda or hip")->required();
  cmd->add_option("--device-index", o->device_index, "which GPU (cuda, hip); the CPU is device 0")->default_val(0);
  cmd->add_option("--budget", o->budget_s, "wall-clock seconds for the whole calibration (default: 60 on the CPU, 600 on a GPU)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--base", o->base,
                  "profile whose values kernel runs do not measure are kept (default: the device's reasoned default; "
                  "data/profiles/defaults/cpu.json on the CPU)");
  cmd->add_option("--out", o->out, "profile to write (atomically)")->required();
  cmd->add_option("--models", o->models,
                  "models whose shapes are measured: names, ranges (125m..1b) or a models YAML file (default: tiny on "
                  "the CPU, 125m..70b on a GPU)");
  cmd->add_option("--seq", o->seq, "sequence lengths of the sweep (default: 128,256,512 on the CPU, 512,2048,8192 on a GPU)");
  cmd->add_option("--micro-batch", o->micro_batches, "micro-batches of the sweep (default: 1,2,4 on the CPU, 1,4 on a GPU)");
  cmd->add_option("--threads", o->threads,
                  "CPU threads the kernels use (default 1: on a shared machine a descheduled second thread stalls "
                  "every parallel region); replay uses the profile's count")
      ->default_val(1);
  cmd->add_option("--clock", o->clock,
                  "CPU: cpu (the thread's CPU time; only with --threads 1, the default then) or wall (the "
                  "monotonic clock; the default with more threads)");
  cmd->callback([o] {
    std::string cmdline = "tpsim calibrate kernels --backend " + o->backend;
    if (o->device_index != 0) cmdline += " --device-index " + std::to_string(o->device_index);
    if (o->budget_s > 0) cmdline += " --budget " + fmt(o->budget_s, 0);
    if (!o->base.empty()) cmdline += " --base " + o->base;
    for (const auto& m : o->models) cmdline += " --models " + m;
    if (!o->seq.empty()) cmdline += " --seq " + o->seq;
    if (!o->micro_batches.empty()) cmdline += " --micro-batch " + o->micro_batches;
    if (o->threads != 1) cmdline += " --threads " + std::to_string(o->threads);
    if (!o->clock.empty()) cmdline += " --clock " + o->clock;
    cmdline += " --out " + o->out;
    run_calibrate_kernels(*o, cmdline);
  });
}

}  // namespace tpsim
