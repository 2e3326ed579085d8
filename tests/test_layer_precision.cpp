// Which layers run in which format under Megatron-Core's low-precision recipes: the first and last
// layers left out of an fp8 or fp4 recipe (--bf16-layers-at-start, --bf16-layers-at-end; a table's
// BF16 Layers At Start and BF16 Layers At End; Megatron-Core's --first-last-layers-bf16), each such
// layer costed as under amp_bf16 and the others as the run's precision; and the output layer under
// MXFP8 (--fp8-output-proj; FP8 Output Proj). The rules that bound them, and the flags and columns
// that ask for them.
#define BOOST_TEST_MODULE layer_precision
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "common.hpp"
#include "io/measured_table.hpp"
#include "model/architecture.hpp"
#include "model/ops.hpp"
#include "model/simulator.hpp"
#include "run_tpsim.hpp"

using namespace tpsim;
using tpsim::test::contains;
using tpsim::test::shipped_hf;
using tpsim::testing::run_tpsim;
namespace tt = boost::test_tools;
namespace fs = std::filesystem;

namespace {

// Llama 3.2 1B (16 layers) on one B200, one stage: the step is the layers in a row.
TrainConfig one_gpu(Precision p, int64_t start, int64_t end) {
  TrainConfig cfg{.seq_len = 4096, .global_batch = 8, .micro_batch = 1, .n_gpus = 1, .precision = p};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.bf16_layers_start = start;
  cfg.layout.bf16_layers_end = end;
  return cfg;
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_bf16_layer_costs_what_a_bf16_run_s_layer_does) {
  const ModelConfig llama = shipped_hf("llama-3.2-1b");
  const DeviceSpec device = load_device("b200");
  const CostParams params = load_shipped_profile("b200").params;
  BOOST_TEST_REQUIRE(llama.n_layers == 16);
  for (const Precision p : {Precision::kMxfp8, Precision::kNvfp4}) {
    const auto step = [&](int64_t start, int64_t end) {
      const TrainConfig cfg = one_gpu(p, start, end);
      BOOST_TEST_REQUIRE(check_config(llama, device, params, cfg) == "");
      return predict(llama, device, params, cfg);
    };
    const Prediction none = step(0, 0), all = step(0, 16), last4 = step(0, 4), ends = step(2, 2);
    // Every layer in bf16: the block GEMMs a bf16 run's (the head's are bf16 under both).
    const Prediction bf16 = predict(llama, device, params, one_gpu(Precision::kAmpBf16, 0, 0));
    BOOST_TEST(all.time.gemm_s == bf16.time.gemm_s, tt::tolerance(1e-9));
    BOOST_TEST(all.time.gemm_s > none.time.gemm_s);
    // The GEMM seconds are the layers', one at a time: 4 of 16 layers a quarter of the way, wherever
    // the 4 are.
    const double quarter = none.time.gemm_s + (all.time.gemm_s - none.time.gemm_s) / 4.0;
    BOOST_TEST(last4.time.gemm_s == quarter, tt::tolerance(1e-9));
    BOOST_TEST(ends.time.gemm_s == quarter, tt::tolerance(1e-9));
    BOOST_TEST(last4.step_s > none.step_s);
  }
}

BOOST_AUTO_TEST_CASE(the_rule_flags_and_columns) {
  const ModelConfig llama = shipped_hf("llama-3.2-1b");
  const DeviceSpec device = load_device("b200");
  const CostParams params = load_shipped_profile("b200").params;
  // Only out of a recipe that quantizes; at most one pipeline stage's layers (16 / 2 = 8).
  BOOST_TEST(contains(check_config(llama, device, params, one_gpu(Precision::kAmpBf16, 0, 2)),
                      "--bf16-layers-at-end: precision amp_bf16 quantizes no layer"));
  TrainConfig staged = one_gpu(Precision::kMxfp8, 9, 0);
  staged.n_gpus = 2, staged.layout.pipeline = 2;
  BOOST_TEST(contains(check_config(llama, device, params, staged), "--bf16-layers-at-start 9 is outside 0..8"));
  staged.layout.bf16_layers_start = 8;
  BOOST_TEST(check_config(llama, device, params, staged) == "");
  TrainConfig titan = one_gpu(Precision::kMxfp8, 0, 1);
  titan.layout.framework = Framework::kTorchtitan;
  BOOST_TEST(contains(check_config(llama, device, params, titan), "--bf16-layers-at-end: Megatron-Core's option"));

  const auto ok = run_tpsim(
      "predict --model llama-3.2-1b --seq 4096 --device b200 --gpus 1 --framework megatron --precision nvfp4 "
      "--micro-batch 1 --global-batch 8 --bf16-layers-at-end 4 --format csv");
  BOOST_TEST(ok.status == 0, ok.err);
  BOOST_TEST(contains(ok.out, "BF16 Layers At Start,BF16 Layers At End"));
  BOOST_TEST(contains(ok.out, ",0,4"));
  const auto bad = run_tpsim(
      "predict --model llama-3.2-1b --seq 4096 --device b200 --gpus 1 --framework megatron --precision nvfp4 "
      "--bf16-layers-at-end four");
  BOOST_TEST(bad.status != 0);
  BOOST_TEST(contains(bad.err, "--bf16-layers-at-end 'four': expected a whole number"), bad.err);
  const auto composer = run_tpsim(
      "predict --model llama-3.2-1b --seq 4096 --device b200 --gpus 8 --precision nvfp4 --bf16-layers-at-start 1");
  BOOST_TEST(composer.status != 0);
  BOOST_TEST(contains(composer.err, "--bf16-layers-at-start: Megatron-Core's option; use --framework megatron"),
             composer.err);

  const fs::path file = fs::temp_directory_path() / "tpsim_bf16_layers.csv";
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Recompute,"
         "BF16 Layers At Start,BF16 Layers At End,Throughput (T/s)\n"
         "llama-3.2-1b,4096,1,b200,nvfp4,1,8,megatron,none,0,4,100000\n"
         "llama-3.2-1b,4096,1,b200,nvfp4,1,8,megatron,none,0,-1,100000\n";
  }
  const std::string error = test::error_of([&] { read_measured_table(file); });
  BOOST_TEST(contains(error, ":3: column 'BF16 Layers At End' must be a whole number in 0..65536, got '-1'"), error);
  fs::remove(file);
}

BOOST_AUTO_TEST_CASE(the_output_layer_under_mxfp8) {
  // Llama 3.1 8B (untied output layer, vocabulary 128,256, hidden 4,096) on one B200.
  const ModelConfig llama = shipped_hf("llama-3.1-8b");
  const DeviceSpec device = load_device("b200");
  const CostParams params = load_shipped_profile("b200").params;
  BlockShape s = block_shape(llama, 1, 4096, Precision::kMxfp8);
  s.fp8_weight_cache = true;
  s.fp8_head = true;
  OpList fwd, bwd;
  head_forward_ops(s, fwd);
  head_backward_ops(s, bwd);
  // Its GEMMs in the block format, 2 t V h FLOPs each; its input cast each micro-batch (and kept in
  // MXFP8, 1 + 1/32 bytes an element), its weight once a step.
  const double t = 4096, vocab = 128256, h = 4096, q = 1.0 + 1.0 / 32.0;
  for (const auto& [ops, op_name] :
       {std::pair{&fwd, "lm_head.fwd"}, std::pair{&bwd, "lm_head.dgrad"}, std::pair{&bwd, "lm_head.wgrad"}}) {
    const std::string name = op_name;  // (clang 14 captures no structured binding)
    const auto op = std::find_if(ops->begin(), ops->end(), [&](const Op& o) { return o.name == name; });
    BOOST_TEST_REQUIRE((op != ops->end()), name);
    BOOST_TEST((op->dtype == DType::kFp8), name);
    BOOST_TEST(op->flops == 2.0 * t * vocab * h, tt::tolerance(1e-12));
  }
  const auto weight = std::find_if(fwd.begin(), fwd.end(),
                                   [](const Op& o) { return std::string(o.name) == "lm_head.fp8_cast_weight"; });
  BOOST_TEST_REQUIRE((weight != fwd.end()));
  BOOST_TEST(weight->per_step);
  BOOST_TEST(weight->bytes_written == 2.0 * q * vocab * h, tt::tolerance(1e-12));
  BOOST_TEST(total_saved_bytes(fwd) > 0);

  // The step: faster GEMMs; without fp8 parameters the weight's MXFP8 copy and transpose stay
  // allocated beside the bf16 weight.
  TrainConfig off = one_gpu(Precision::kMxfp8, 0, 0);
  TrainConfig on = off;
  on.layout.fp8_output_proj = true;
  BOOST_TEST_REQUIRE(check_config(llama, device, params, on) == "");
  const Prediction p_off = predict(llama, device, params, off), p_on = predict(llama, device, params, on);
  BOOST_TEST(p_on.time.gemm_s < p_off.time.gemm_s);
  BOOST_TEST(p_on.memory.gathered_params_bytes - p_off.memory.gathered_params_bytes == 2.0 * q * vocab * h,
             tt::tolerance(1e-9));

  // Megatron-Core runs it under the MXFP8 recipe, on an untied output layer.
  TrainConfig fp8 = on;
  fp8.precision = Precision::kAmpFp8;
  BOOST_TEST(contains(check_config(llama, device, params, fp8), "--fp8-output-proj needs precision mxfp8"));
  BOOST_TEST(contains(check_config(shipped_hf("llama-3.2-1b"), device, params, on), "ties its output layer"));
  const auto titan = run_tpsim(
      "predict --model llama-3.1-8b --seq 4096 --device b200 --gpus 8 --framework torchtitan --precision mxfp8 "
      "--fp8-output-proj");
  BOOST_TEST(titan.status != 0);
  BOOST_TEST(contains(titan.err, "--fp8-output-proj"), titan.err);
}
