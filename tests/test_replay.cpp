// tpsim replay: the op sequence of a training step (calibrate/step_ops), and the command run as a
// user runs it on this machine's CPU with a profile from a short kernel calibration.
#define BOOST_TEST_MODULE replay
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "calibrate/replay.hpp"
#include "calibrate/step_ops.hpp"
#include "io/catalog.hpp"
#include "io/error.hpp"
#include "io/profile_io.hpp"
#include "kernels/backend.hpp"
#include "tests/run_tpsim.hpp"

using namespace tpsim;
namespace fs = std::filesystem;

namespace {

using namespace tpsim::testing;

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> v;
  std::stringstream ss(line);
  std::string item;
  while (std::getline(ss, item, sep)) v.push_back(item);
  return v;
}

// A CPU profile from a short calibration, made once for the suite.
const fs::path& cpu_profile() {
  static const fs::path p = [] {
    const fs::path f = scratch_dir() / "cpu.json";
    const Run r =
        run(std::string("calibrate kernels --backend cpu --budget ") + TPSIM_TEST_BUDGET_S + " --out " + f.string());
    if (r.status != 0) throw std::runtime_error("calibration failed: " + r.err);
    return f;
  }();
  return p;
}

int count_part(const std::vector<StepOp>& ops, StepPart part) {
  int n = 0;
  for (const auto& s : ops) n += s.part == part;
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_step_runs_forward_head_backward_embedding_and_optimizer_in_order) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const ModelConfig& tiny = catalog.get("tiny");
  StepOptions o;
  o.seq_len = 128;
  o.micro_batch = 2;
  const std::vector<StepOp> plain = training_step_ops(tiny, o);
  OpVector fwd, bwd;
  block_forward_ops(block_shape(tiny, 2, 128, Precision::kFp32), fwd);
  block_backward_ops(block_shape(tiny, 2, 128, Precision::kFp32), bwd);
  BOOST_TEST(count_part(plain, StepPart::kBlockForward) == 4 * static_cast<int>(fwd.ops.size()));
  BOOST_TEST(count_part(plain, StepPart::kBlockBackward) == 4 * static_cast<int>(bwd.ops.size()));
  BOOST_TEST(count_part(plain, StepPart::kBlockRecompute) == 0);
  BOOST_TEST((plain.front().part == StepPart::kEmbeddingForward));
  BOOST_TEST((plain.back().part == StepPart::kOptimizer));
  BOOST_TEST((plain.back().op.mem == MemKind::kAdamW));
  // AdamW over every parameter of the model, even when fewer blocks run.
  BOOST_TEST(plain.back().op.m == parameter_count(tiny, 128));
  // Backward runs the blocks in reverse; every op is fp32 here.
  int64_t last_layer = tiny.n_layers;
  for (const auto& s : plain) {
    if (s.part == StepPart::kBlockBackward) {
      BOOST_TEST(s.layer <= last_layer);
      last_layer = s.layer;
    }
    if (s.op.kind != OpKind::kMemoryBound || s.op.mem == MemKind::kAdamW) BOOST_TEST((s.op.dtype == DType::kFp32));
  }

  o.checkpointing = Checkpointing::kFull;
  o.layers = 2;
  const std::vector<StepOp> ckpt = training_step_ops(tiny, o);
  BOOST_TEST(count_part(ckpt, StepPart::kBlockForward) == 2 * static_cast<int>(fwd.ops.size()));
  BOOST_TEST(count_part(ckpt, StepPart::kBlockRecompute) == 2 * static_cast<int>(fwd.ops.size()));
  BOOST_TEST(ckpt.back().op.m == parameter_count(tiny, 128));
  // The recompute of block i comes just before its backward.
  for (size_t i = 1; i < ckpt.size(); ++i)
    if (ckpt[i].part == StepPart::kBlockBackward && ckpt[i - 1].part != StepPart::kBlockBackward)
      BOOST_TEST((ckpt[i - 1].part == StepPart::kBlockRecompute && ckpt[i - 1].layer == ckpt[i].layer));

  o.layers = 5;
  BOOST_CHECK_THROW(training_step_ops(tiny, o), Error);
}

// replay's CSV: a header and the one step row, as column -> cell.
std::map<std::string, std::string> step_row(const std::string& out) {
  const std::vector<std::string> lines = split(out, '\n');
  BOOST_TEST_REQUIRE(lines.size() == 2u);
  const std::vector<std::string> header = split(lines[0], ','), row = split(lines[1], ',');
  BOOST_TEST_REQUIRE(header.size() == row.size());
  std::map<std::string, std::string> cell;
  for (size_t i = 0; i < header.size(); ++i) cell[header[i]] = row[i];
  return cell;
}

BOOST_AUTO_TEST_CASE(replay_of_the_tiny_model_measures_and_predicts_a_positive_step) {
  const Run r = run("replay --backend cpu --model tiny --seq 64 --micro-batch 1 --format csv --profile " +
                    cpu_profile().string());
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  std::map<std::string, std::string> cell = step_row(r.out);
  for (const char* c : {"Measured Step Time (s)", "Predicted Step Time (s)", "Error (%)"})
    BOOST_TEST_REQUIRE(cell.count(c) == 1u, c);
  const double measured = std::stod(cell["Measured Step Time (s)"]);
  const double predicted = std::stod(cell["Predicted Step Time (s)"]);
  BOOST_TEST((std::isfinite(measured) && measured > 0));
  BOOST_TEST((std::isfinite(predicted) && predicted > 0));
  // Error (%) is printed to one decimal and the step times to six: the printed error is within half
  // its last digit of the one the printed times give, plus what their rounding (5e-7 s each) moves
  // that. A relative tolerance failed when the error was near zero (0.3 printed for 0.2797).
  const double rounding = 0.05 + 100.0 * 5e-7 * (1.0 / measured + predicted / (measured * measured)) + 1e-9;
  BOOST_TEST(std::abs(std::stod(cell["Error (%)"]) - 100.0 * (predicted / measured - 1.0)) <= rounding);
  BOOST_TEST(cell["Threads"] == "1");

  // md: the ops one by one, and the scaling stated when fewer blocks run.
  const Run md = run("replay --backend cpu --model tiny --seq 64 --micro-batch 1 --layers 2 --ckpt --profile " +
                     cpu_profile().string());
  BOOST_TEST_REQUIRE(md.status == 0, md.err);
  BOOST_TEST(md.out.find("## Ops") != std::string::npos);
  BOOST_TEST(md.out.find("In Step (s)") != std::string::npos);
  BOOST_TEST(md.out.find("block recompute") != std::string::npos);
  BOOST_TEST(md.out.find("scaled by 4/2") != std::string::npos);
}

// A backend that times every op at 0.1 ms without running it: what replay_step costs, not what it
// measures, is under test.
class TimesEveryOpAtATenthOfAMillisecond final : public Backend {
 public:
  BackendInfo info() const override { return {"fake", "times without running", "-", "-", 1, 0}; }
  std::string unsupported(const Op&) const override { return ""; }
  Timing time_op(const Op&, const TimingOptions&) override { return tenth(); }
  SequenceTiming time_sequence(std::span<const Op> ops, const TimingOptions&) override {
    SequenceTiming s;
    s.total_median_s = 1e-4 * static_cast<double>(ops.size());
    s.per_op.assign(ops.size(), tenth());
    s.in_sequence.assign(ops.size(), tenth());
    return s;
  }
  CheckResult check_op(const Op&) override { return {}; }

 private:
  static Timing tenth() {
    Timing t;
    t.median_s = t.p10_s = t.p90_s = 1e-4;
    t.repetitions = 5;
    return t;
  }
};

BOOST_AUTO_TEST_CASE(a_replay_is_costed_at_the_kernel_runs_clock_not_a_training_runs) {
  // A profile's compute_clock_ratio is a long training run's sustained clock over the kernel runs':
  // one replayed step is a short run, and its prediction must not move with it (a GPU profile
  // carries 0.9, and replay once costed its GEMMs 1/0.9 slower than the kernels it was fitted to).
  const DeviceProfile p = load_profile(cpu_profile());
  BOOST_TEST_REQUIRE(p.device_spec.has_value());
  const ModelCatalog catalog = ModelCatalog::load_default();
  ReplayOptions o;
  o.model = catalog.get("tiny");
  o.step.seq_len = 64;
  o.step.micro_batch = 1;
  o.step.layers = 1;
  o.step.precision = Precision::kFp32;
  const std::vector<StepOp> ops = replay_ops(o);
  TimesEveryOpAtATenthOfAMillisecond backend;
  CostParams sustained = p.params, short_run = p.params;
  sustained.compute_clock_ratio = 0.5;
  short_run.compute_clock_ratio = 1.0;
  const Replay a = replay_step(o, ops, backend, *p.device_spec, sustained);
  const Replay b = replay_step(o, ops, backend, *p.device_spec, short_run);
  BOOST_TEST(a.predicted_step_s > 0);
  BOOST_TEST(a.predicted_step_s == b.predicted_step_s);
  BOOST_TEST(a.predicted_s == b.predicted_s, boost::test_tools::per_element());
  // The command says so when the profile's ratio is not 1.
  const fs::path slow = scratch_dir() / "cpu_clock_0.9.json";
  {
    nlohmann::json j = nlohmann::json::parse(slurp(cpu_profile()));
    j.at("parameters").at("compute_clock_ratio").at("value") = 0.9;
    std::ofstream(slow) << j.dump(2);
  }
  const Run r = run("replay --backend cpu --model tiny --seq 64 --micro-batch 1 --layers 1 --format csv --profile " +
                    slow.string());
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  BOOST_TEST(
      r.err.find("costed at the kernel runs' clock: the profile's compute_clock_ratio 0.900") != std::string::npos,
      r.err);
}

// An accuracy figure of timed kernels: in the Release build only. Under the sanitizers every kernel
// runs instrumented, unevenly by kind, and the case took 100 s of the sanitizer run; the replay
// code itself is exercised there by the case above.
BOOST_AUTO_TEST_CASE(replay_lands_near_the_prediction_of_a_short_calibration,
                     *boost::unit_test::enable_if<!TPSIM_TEST_SANITIZED>()) {
  // The loop of issue 17 on a budget: a 15 s calibration (about 150 of its 750 shapes on this
  // machine: the tiny model's step ops and a spread of the grid), then two steps it never timed
  // whole: tiny at a sequence length of 128, and r256 (data/models/replay_cpu.yaml: 2 blocks,
  // vocabulary 4096) at 384. Asserted within 20%: the full calibration lands within 10% on a quiet
  // machine (docs/accuracy.md, "Kernel calibration and replay"), this one fits a fifth of the shapes, and on a shared
  // 2-core host the speed of the core drifts by up to ~15% between a calibration and a replay minutes apart.
  constexpr double kTolerancePercent = 20;
  const fs::path profile = scratch_dir() / "cpu15.json";
  const Run c = run("calibrate kernels --backend cpu --budget 15 --out " + profile.string());
  BOOST_TEST_REQUIRE(c.status == 0, c.err);
  const std::string models = std::string(" --models ") + TPSIM_DATA + "/models/replay_cpu.yaml";
  // A replay is one measurement of a ~50-100 ms step on a shared host: CI's run once measured tiny
  // 24% slow while the suites beside it loaded both cores. A replay that misses is measured again,
  // up to three times (the profile stays the same), and the test asserts the best of them: a model
  // that is off misses every time, a core that was busy for one replay does not.
  constexpr int kAttempts = 3;
  for (const std::string config : {"tiny --seq 128 --micro-batch 1", "r256 --seq 384 --micro-batch 1"})
    BOOST_TEST_CONTEXT(config) {
      double best = std::numeric_limits<double>::infinity();
      for (int attempt = 1; attempt <= kAttempts && std::fabs(best) > kTolerancePercent; ++attempt) {
        const Run r =
            run("replay --backend cpu --model " + config + models + " --format csv --profile " + profile.string());
        BOOST_TEST_REQUIRE(r.status == 0, r.err);
        std::map<std::string, std::string> cell = step_row(r.out);
        BOOST_TEST_REQUIRE(cell.count("Ops Alone (s)") == 1u);
        BOOST_TEST(std::stod(cell["Ops Alone (s)"]) > 0);
        const double error = std::stod(cell["Error (%)"]);
        BOOST_TEST_MESSAGE(config << ", replay " << attempt << ": measured " << cell["Measured Step Time (s)"]
                                  << " s, predicted " << cell["Predicted Step Time (s)"] << " s, " << error
                                  << "%, reference GEMM now/calibrated " << cell["Reference GEMM Now / Calibrated"]);
        if (std::fabs(error) < std::fabs(best)) best = error;
      }
      BOOST_TEST(std::fabs(best) <= kTolerancePercent);
    }
}

BOOST_AUTO_TEST_CASE(bad_replay_input_is_a_one_line_error) {
  const std::string profile = " --profile " + cpu_profile().string();
  std::vector<std::string> cases = {
      "--backend tpu --model tiny --seq 64 --micro-batch 1" + profile,
      "--backend cpu --model tiny --seq 64 --micro-batch 1 --layers 0" + profile,
      "--backend cpu --model tiny --seq 64 --micro-batch 1 --layers 5" + profile,
      "--backend cpu --model tiny --seq 64 --micro-batch 1 --precision amp_bf16" + profile,
      "--backend cpu --model tiny --seq 64 --micro-batch 1",  // the CPU has no datasheet: a profile is needed
      "--backend cpu --model nope --seq 64 --micro-batch 1" + profile,
      "--backend cpu --model tiny --seq 0 --micro-batch 1" + profile,
  };
  // cuda (and hip) on a machine without such a GPU, or a build without the backend.
  bool gpu_present = false;
  try {
    make_backend(BackendKind::kCuda, 0);
    gpu_present = true;
  } catch (const Error&) {
  }
  if (!gpu_present) {
    cases.push_back("--backend cuda --model tiny --seq 64 --micro-batch 1");
    const Run k = run("calibrate kernels --backend cuda --out " + (scratch_dir() / "gpu.json").string());
    BOOST_TEST(k.status != 0);
    BOOST_TEST(k.err.rfind("tpsim: error: ", 0) == 0u);
    BOOST_TEST(std::count(k.err.begin(), k.err.end(), '\n') == 1);
    BOOST_TEST(!fs::exists(scratch_dir() / "gpu.json"));
  } else {
    BOOST_TEST_MESSAGE("a CUDA device is present: the no-GPU error is not checked here");
  }
  for (const auto& args : cases) BOOST_TEST_CONTEXT(args) {
      const Run r = run("replay " + args);
      BOOST_TEST(r.status != 0);
      BOOST_TEST(r.err.rfind("tpsim: error: ", 0) == 0u);
      BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      BOOST_TEST(r.out.empty());
    }
}
