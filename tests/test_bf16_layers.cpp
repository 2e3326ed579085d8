// The first and last layers left out of an fp8 or fp4 recipe (--bf16-layers-at-start, --bf16-layers-at-end;
// a table's BF16 Layers At Start and BF16 Layers At End; Megatron-Core's --first-last-layers-bf16): each
// such layer costed as under amp_bf16 and the others as the run's precision, the rule that bounds
// them, and the flags and columns that ask for them.
#define BOOST_TEST_MODULE bf16_layers
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "common.hpp"
#include "io/measured_table.hpp"
#include "model/architecture.hpp"
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
