// Kernel calibration (calibrate/kernel_plan, kernel_fit; tpsim calibrate kernels): the measurement
// plan covers the simulator's shapes once each, the fit recovers known parameters from timings the
// cost model itself makes (with noise), and a short real calibration on this machine's CPU writes a
// profile that loads.
#define BOOST_TEST_MODULE kernel_fit
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <unistd.h>

#include "calibrate/kernel_fit.hpp"
#include "calibrate/kernel_measure.hpp"
#include "calibrate/kernel_plan.hpp"
#include "calibrate/step_ops.hpp"
#include "io/catalog.hpp"
#include "io/devices.hpp"
#include "io/profile_io.hpp"
#include "model/cost.hpp"
#include "tests/run_tpsim.hpp"

using namespace tpsim;
namespace tt = boost::test_tools;
namespace fs = std::filesystem;

namespace {

// Synthetic timings get lognormal noise of this relative size: what repeated kernel runs on a
// quiet machine scatter by.
constexpr double kNoise = 0.03;
// Recovery tolerances, relative: rates and efficiencies are set by many shapes and come back
// within about the noise; the shape terms (a half-rate K, a tile intensity, a head size) only by
// the few shapes where they matter.
constexpr double kRateRelTol = 0.03;
constexpr double kEfficiencyRelTol = 0.05;
constexpr double kShapeTermRelTol = 0.35;
// With noise of kNoise, the fitted model must predict held-out shapes about as well.
constexpr double kHeldOutMedianMax = 2.0 * kNoise;

KernelPlanOptions small_gpu_plan() {
  const ModelCatalog catalog = ModelCatalog::load_default();
  KernelPlanOptions o = default_kernel_plan_options(/*gpu=*/true);
  o.models = {catalog.get("125m"), catalog.get("1b"), catalog.get("7b")};
  o.seq_lens = {512, 2048};
  o.micro_batches = {1, 4};
  o.grid_gemm_max = 4096;
  o.grid_attention_seq_max = 8192;
  return o;
}

using namespace tpsim::testing;

}  // namespace

BOOST_AUTO_TEST_CASE(the_plan_holds_every_shape_the_simulator_costs_once) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  KernelPlanOptions o = default_kernel_plan_options(/*gpu=*/false);
  o.models = {catalog.get("tiny")};
  const std::vector<PlannedOp> plan = make_kernel_plan(o);

  std::set<std::string> keys;
  std::map<ShapeGroup, int> sweep, grid, held;
  for (const PlannedOp& p : plan) {
    BOOST_TEST(keys.insert(shape_key(p.op)).second, "twice in the plan: " << shape_key(p.op));
    (p.source == PlanSource::kSweep ? sweep : grid)[group_of(p.op)]++;
    if (p.held_out) held[group_of(p.op)]++;
  }
  // Every op of every configuration of the sweep, checkpointed or not, is in the plan.
  for (int64_t seq : o.seq_lens)
    for (int64_t mb : o.micro_batches)
      for (bool ckpt : {false, true}) {
        StepOptions s;
        s.seq_len = seq;
        s.micro_batch = mb;
        s.checkpointing = ckpt ? Checkpointing::kFull : Checkpointing::kNone;
        for (const StepOp& op : training_step_ops(catalog.get("tiny"), s))
          BOOST_TEST(keys.count(shape_key(op.op)) == 1u, "missing: " << shape_key(op.op));
      }
  // A grid around them in every group, and a fifth of each group held out.
  for (ShapeGroup g : {ShapeGroup::kGemm, ShapeGroup::kAttention, ShapeGroup::kMemoryBound}) {
    BOOST_TEST_CONTEXT(to_string(g)) {
      BOOST_TEST(sweep[g] > 0);
      BOOST_TEST(grid[g] > 0);
      const double share = static_cast<double>(held[g]) / (sweep[g] + grid[g]);
      BOOST_TEST(share == 0.2, tt::tolerance(0.25));
    }
  }
  // The grid spans GEMM sizes beyond the sweep's and both head sizes.
  std::set<int64_t> head_dims;
  int64_t largest_m = 0;
  for (const PlannedOp& p : plan) {
    if (group_of(p.op) == ShapeGroup::kAttention) head_dims.insert(p.op.head_dim);
    if (p.op.kind == OpKind::kGemm) largest_m = std::max(largest_m, p.op.m);
  }
  BOOST_TEST(head_dims.count(64) == 1u);
  BOOST_TEST(head_dims.count(128) == 1u);
  BOOST_TEST(largest_m >= 2048);
  // The same options give the same plan and the same held-out shapes.
  const std::vector<PlannedOp> again = make_kernel_plan(o);
  BOOST_TEST_REQUIRE(again.size() == plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    BOOST_TEST(shape_key(again[i].op) == shape_key(plan[i].op));
    BOOST_TEST(again[i].held_out == plan[i].held_out);
  }
}

BOOST_AUTO_TEST_CASE(a_fit_recovers_known_kernel_parameters_from_timings_with_noise) {
  const DeviceSpec device = load_device("h100_80gb");
  const CostParams start = load_profile(std::string(TPSIM_DATA) + "/profiles/defaults/h100_80gb.json").params;
  // A truth away from the start in every fitted parameter, and in the discrete ones.
  CostParams truth = start;
  truth.gemm_flops_per_s(DType::kBf16) = 6.1e14;
  truth.gemm_tile_m = 128;
  truth.gemm_tile_n = 128;
  truth.gemm_k_half = 400;
  truth.gemm_tile_intensity_half = 30;
  truth.gemm_overhead_s = 7e-6;
  truth.attn_fwd_efficiency = 0.31;
  truth.attn_bwd_efficiency = 0.22;
  truth.attn_head_dim_half = 60;
  truth.attn_block = 64;
  truth.membound_efficiency = 0.7;
  truth.xent_efficiency = 0.3;
  truth.kernel_overhead_s = 3e-6;

  // Kernel runs, timed at their own clock: the start's sustained clock ratio (0.9, a training
  // run's) must not leak into the fitted rates (it once did: rates 1/0.9 too fast), and stays.
  BOOST_TEST_REQUIRE(start.compute_clock_ratio == 0.9);
  const CostParams truth_at_run_clock = at_kernel_run_clock(truth);
  const CostModel cost(device, truth_at_run_clock);
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, kNoise);
  std::vector<KernelSample> samples;
  for (const PlannedOp& p : make_kernel_plan(small_gpu_plan()))
    samples.push_back({p.op, cost.op_seconds(p.op) * std::exp(noise(rng)), p.held_out});

  const KernelFitResult fit = fit_kernels(samples, device, start, KernelFitOptions{});
  const auto fitted = [&](const char* name) { return find_param(name)->value(fit.params); };
  BOOST_TEST(fitted("gemm_bf16_flops_per_s") == truth.gemm_flops_per_s(DType::kBf16), tt::tolerance(kRateRelTol));
  BOOST_TEST(fitted("gemm_tile_m") * fitted("gemm_tile_n") == truth.gemm_tile_m * truth.gemm_tile_n);
  BOOST_TEST(fitted("gemm_k_half") == truth.gemm_k_half, tt::tolerance(kShapeTermRelTol));
  BOOST_TEST(fitted("gemm_tile_intensity_half") == truth.gemm_tile_intensity_half, tt::tolerance(kShapeTermRelTol));
  BOOST_TEST(fitted("gemm_overhead_s") == truth.gemm_overhead_s, tt::tolerance(kShapeTermRelTol));
  BOOST_TEST(fitted("attn_fwd_efficiency") == truth.attn_fwd_efficiency, tt::tolerance(kEfficiencyRelTol));
  BOOST_TEST(fitted("attn_bwd_efficiency") == truth.attn_bwd_efficiency, tt::tolerance(kEfficiencyRelTol));
  BOOST_TEST(fitted("attn_head_dim_half") == truth.attn_head_dim_half, tt::tolerance(kShapeTermRelTol));
  BOOST_TEST(fitted("attn_block") == truth.attn_block);
  BOOST_TEST(fitted("membound_efficiency") == truth.membound_efficiency, tt::tolerance(kEfficiencyRelTol));
  BOOST_TEST(fitted("xent_efficiency") == truth.xent_efficiency, tt::tolerance(kEfficiencyRelTol));
  BOOST_TEST(fitted("kernel_overhead_s") == truth.kernel_overhead_s, tt::tolerance(kShapeTermRelTol));
  // Formats without GEMMs and system-level parameters are not touched.
  BOOST_TEST(fitted("gemm_fp8_flops_per_s") == start.gemm_flops_per_s(DType::kFp8));
  BOOST_TEST(fitted("compute_clock_ratio") == start.compute_clock_ratio);
  for (const auto& f : fit.fitted) BOOST_TEST_CONTEXT(f.param->name) {
      BOOST_TEST((f.param->level == ParamLevel::kKernel));
    }

  // Held out: the fit predicts shapes it did not see within about the noise.
  BOOST_TEST_REQUIRE(fit.errors.size() == 3u);
  for (const GroupErrors& e : fit.errors) BOOST_TEST_CONTEXT(to_string(e.group)) {
      BOOST_TEST(e.held_out > 0);
      BOOST_TEST(e.held_out_median < kHeldOutMedianMax);
    }
  BOOST_TEST(fit.log_residuals.size() == samples.size());
}

BOOST_AUTO_TEST_CASE(a_short_cpu_calibration_writes_a_profile_that_loads) {
  const fs::path out = fs::temp_directory_path() / ("tpsim_kernels_" + std::to_string(::getpid()) + ".json");
  // Under the sanitizers the instrumented GEMMs run ~10x slower than the base profile estimates,
  // and beside other suites on a loaded host 10 s sometimes leaves too few of them to fit the fp32
  // rate (CI at a102b4f); twice that there. (CI at 2986a26 failed at 20 s too, for a measurement
  // bug: test_calibration a_cost_model_ten_times_optimistic_still_fills_the_budget.)
  const std::string budget = TPSIM_TEST_SANITIZED ? "20" : TPSIM_TEST_BUDGET_S;
  const Run r = run("calibrate kernels --backend cpu --budget " + budget + " --out " + out.string());
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  BOOST_TEST(r.out.empty());
  const DeviceProfile p = load_profile(out);
  BOOST_TEST(p.device == "cpu");
  BOOST_TEST_REQUIRE(p.device_spec.has_value());
  BOOST_TEST(p.device_spec->id == "cpu");
  BOOST_TEST(p.device_spec->compute_units == 1);
  BOOST_TEST(p.device_spec->hbm_bytes_per_s > 0);
  BOOST_TEST(p.device_spec->peak(DType::kFp32) > 0);
  BOOST_TEST(p.device_spec->sources.at("hbm_gb_per_s").rfind("kernel run:", 0) == 0u);
  BOOST_TEST((p.sources.at("gemm_fp32_flops_per_s").kind == SourceKind::kKernel));
  // Fitted, not held flat above a cap at the fastest GEMM (its standard deviation then read 0 and
  // its value 3x what the cost model used): a measured device's peak is at least its fitted rate.
  BOOST_TEST(p.sources.at("gemm_fp32_flops_per_s").stddev > 0);
  BOOST_TEST(p.device_spec->peak(DType::kFp32) >= p.params.gemm_flops_per_s(DType::kFp32) * (1 - 1e-9));
  BOOST_TEST(p.params.gemm_flops_per_s(DType::kBf16) == 0.0);
  // System-level values are the CPU base's.
  BOOST_TEST((p.sources.at("overlap_slowdown").kind == SourceKind::kAssumed));

  const auto& k = p.extra.at("kernel_calibration");
  BOOST_TEST(k.at("threads").get<int>() == 1);
  BOOST_TEST(k.at("clock").get<std::string>() == "thread_cpu");
  BOOST_TEST(k.at("backend").at("device_name").get<std::string>().size() > 0u);
  BOOST_TEST(k.at("wall_s").get<double>() < std::stod(budget) + 2.0);
  const auto& ms = k.at("measurements");
  BOOST_TEST_REQUIRE(ms.size() > 10u);
  for (const auto& m : ms) {
    BOOST_TEST(m.at("median_s").get<double>() > 0);
    BOOST_TEST(m.at("p10_s").get<double>() <= m.at("p90_s").get<double>());
    BOOST_TEST(m.at("repetitions").get<int>() >= 5);
    BOOST_TEST(m.contains("shape"));
    BOOST_TEST(m.contains("dtype"));
    BOOST_TEST(std::isfinite(m.at("log_residual").get<double>()));
  }
  BOOST_TEST(k.at("errors").contains("gemm"));
  // Written by save_profile: loading and writing again gives the same text.
  BOOST_TEST(profile_to_json(p) == slurp(out));
  fs::remove(out);
}

BOOST_AUTO_TEST_CASE(bad_calibration_input_is_a_one_line_error) {
  const fs::path out = fs::temp_directory_path() / ("tpsim_kernels_bad_" + std::to_string(::getpid()) + ".json");
  for (const std::string args : {"--backend tpu", "--backend cpu --threads 2 --clock cpu", "--backend cpu --clock sun",
                                 "--backend cpu --models nope", "--backend cpu --budget -1"})
    BOOST_TEST_CONTEXT(args) {
      const Run r = run("calibrate kernels " + args + " --out " + out.string());
      BOOST_TEST(r.status != 0);
      BOOST_TEST(r.err.rfind("tpsim: error: ", 0) == 0u);
      BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      BOOST_TEST(!fs::exists(out));
    }
}

// Busy machine (issue 6): the noise verdict on synthetic timings. Quiet runs agree within a few
// percent and a reference GEMM keeps its time; runs spread by tens of percent, or a reference
// that slowed by a fifth during the run, are too noisy to trust.
BOOST_AUTO_TEST_CASE(the_noise_verdict_trusts_steady_timings_and_not_spread_or_drifting_ones) {
  const auto timings = [](double spread, int n) {
    std::vector<Timing> t;
    for (int i = 0; i < n; ++i) {
      const double median = 1e-4 * (1 + i);
      Timing x;
      x.median_s = median;
      x.p10_s = median * (1 - spread / 2);
      x.p90_s = median * (1 + spread / 2);
      x.repetitions = 5;
      t.push_back(x);
    }
    return t;
  };
  const auto ref = [](double median) {
    Timing x;
    x.median_s = median;
    x.p10_s = 0.98 * median;
    x.p90_s = 1.02 * median;
    x.repetitions = 10;
    return x;
  };
  const Timing start = ref(1e-3), steady = ref(1.02e-3), slowed = ref(1.2e-3), sped = ref(0.85e-3);

  const NoiseVerdict quiet = judge_noise(timings(0.05, 40), &start, &steady);
  BOOST_TEST(!quiet.noisy);
  BOOST_TEST(quiet.reasons.empty());
  BOOST_TEST(quiet.shapes == 40);
  BOOST_TEST(quiet.median_spread == 0.05, tt::tolerance(1e-9));
  BOOST_TEST(quiet.reference_timed);
  BOOST_TEST(quiet.reference_drift == 0.02, tt::tolerance(1e-9));
  // A quiet CPU core's typical spread (~0.1) is trusted; without a reference, spread alone decides.
  BOOST_TEST(!judge_noise(timings(0.12, 40), nullptr, nullptr).noisy);
  BOOST_TEST(!judge_noise(timings(0.12, 40), nullptr, nullptr).reference_timed);

  const NoiseVerdict spread = judge_noise(timings(0.4, 40), &start, &steady);
  BOOST_TEST(spread.noisy);
  BOOST_TEST(spread.reasons.size() == 1u);
  BOOST_TEST(spread.median_spread == 0.4, tt::tolerance(1e-9));
  // The median over shapes: a few noisy shapes among steady ones do not make the run noisy.
  std::vector<Timing> mixed = timings(0.05, 30);
  for (const Timing& t : timings(1.0, 10)) mixed.push_back(t);
  BOOST_TEST(!judge_noise(mixed, &start, &steady).noisy);

  const NoiseVerdict drift = judge_noise(timings(0.05, 40), &start, &slowed);
  BOOST_TEST(drift.noisy);
  BOOST_TEST(drift.reference_drift == 0.2, tt::tolerance(1e-9));
  BOOST_TEST(judge_noise(timings(0.05, 40), &start, &sped).noisy);
  BOOST_TEST(judge_noise(timings(0.4, 40), &start, &slowed).reasons.size() == 2u);

  // Thresholds are options; timings that are not positive are left out.
  NoiseOptions strict;
  strict.max_median_spread = 0.04;
  BOOST_TEST(judge_noise(timings(0.05, 40), &start, &steady, strict).noisy);
  std::vector<Timing> with_zero = timings(0.05, 3);
  with_zero.push_back(Timing{});
  BOOST_TEST(judge_noise(with_zero, nullptr, nullptr).shapes == 3);
  BOOST_TEST(judge_noise({}, nullptr, nullptr).noisy == false);
}

BOOST_AUTO_TEST_CASE(a_cpu_calibration_records_its_noise_verdict) {
  const fs::path out = fs::temp_directory_path() / ("tpsim_kernels_noise_" + std::to_string(::getpid()) + ".json");
  const Run r =
      run(std::string("calibrate kernels --backend cpu --budget ") + TPSIM_TEST_BUDGET_S + " --out " + out.string());
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  const DeviceProfile p = load_profile(out);
  const auto& noise = p.extra.at("kernel_calibration").at("noise");
  const bool noisy = noise.at("noisy").get<bool>();
  BOOST_TEST(noise.at("verdict").get<std::string>() == (noisy ? "noisy" : "trusted"));
  BOOST_TEST(noise.at("shapes").get<int>() > 0);
  BOOST_TEST(noise.at("median_spread").get<double>() >= 0);
  BOOST_TEST(noise.at("max_median_spread").get<double>() == 0.2);
  BOOST_TEST(noise.at("reference").at("start").at("median_s").get<double>() > 0);
  BOOST_TEST(noise.at("reference").at("end").at("median_s").get<double>() > 0);
  BOOST_TEST(std::isfinite(noise.at("reference").at("drift").get<double>()));
  // A warning line on stderr exactly when the verdict is noisy.
  BOOST_TEST((r.err.find("tpsim: warning: calibrate kernels: measurements too noisy to trust") != std::string::npos) ==
             noisy);
  BOOST_TEST(r.err.find(noisy ? ": too noisy to trust\n" : ": trusted\n") != std::string::npos);
  // The format the CPU backend runs has a rate: fitted, or the base's when too few of its GEMMs fit in
  // the budget (it was once set to 0, "unsupported", and replay then predicted non-finite times).
  BOOST_TEST(p.params.gemm_flops_per_s(DType::kFp32) > 0);
  fs::remove(out);
}
