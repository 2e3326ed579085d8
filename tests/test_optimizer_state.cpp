// Megatron-Core's precision-aware optimizer with bf16 Adam moments (--bf16-adam-moments; a table's
// Optimizer "adam (bf16 moments)"): what the optimizer keeps per parameter under bf16 and fp8
// recipes, its step's bytes, and the flag, column and refusals.
#define BOOST_TEST_MODULE optimizer_state
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

TrainConfig llama_on_8(Precision p, bool bf16_moments) {
  TrainConfig cfg{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = 8, .precision = p};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.bf16_moments = bf16_moments;
  return cfg;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_state_per_parameter_under_bf16_and_fp8_recipes) {
  // One stage, no distributed optimizer: the rank's master parameters are the model's (Llama 3.1 8B's
  // vocabulary, 128,256, needs no padding at tp 1). fp32 moments and master: 12 bytes. bf16 moments
  // under mxfp8 (Megatron-Core's fp32 master): 8; under bf16 (TransformerEngine keeps the master's
  // 16-bit remainder): 6.
  const ModelConfig llama = shipped_hf("llama-3.1-8b");
  const DeviceSpec device = load_device("b200");
  const DeviceProfile profile = load_shipped_profile("b200");
  const double params = static_cast<double>(parameter_count(llama, 4096));
  for (const auto& [precision, saved] : {std::pair{Precision::kMxfp8, 4.0}, std::pair{Precision::kAmpBf16, 6.0}}) {
    const TrainConfig fp32 = llama_on_8(precision, false), bf16 = llama_on_8(precision, true);
    BOOST_TEST_REQUIRE(check_config(llama, device, profile.params, bf16) == "");
    const Prediction a = predict(llama, device, profile.params, fp32), b = predict(llama, device, profile.params, bf16);
    BOOST_TEST(a.memory.sharded_state_bytes - b.memory.sharded_state_bytes == saved * params, tt::tolerance(1e-9));
    BOOST_TEST(b.step_s < a.step_s);  // the Adam kernel moves 4 bytes less per parameter each way
    BOOST_TEST(b.step_s > 0.98 * a.step_s);
  }
}

BOOST_AUTO_TEST_CASE(the_flag_column_and_refusals) {
  const auto ok = run_tpsim(
      "predict --model llama-3.1-8b --seq 4096 --device b200 --gpus 8 --framework megatron --micro-batch 1 "
      "--global-batch 64 --bf16-adam-moments --format csv");
  BOOST_TEST(ok.status == 0, ok.err);
  const auto titan = run_tpsim(
      "predict --model llama-3.1-8b --seq 4096 --device b200 --gpus 8 --framework torchtitan --micro-batch 1 "
      "--global-batch 64 --bf16-adam-moments");
  BOOST_TEST(titan.status != 0);
  BOOST_TEST(contains(titan.err, "--bf16-adam-moments: Megatron-Core's option; use --framework megatron"), titan.err);

  const fs::path file = fs::temp_directory_path() / "tpsim_optimizer.csv";
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Recompute,Optimizer,"
         "Throughput (T/s)\n"
         "llama-3.1-8b,4096,8,b200,amp_bf16,1,64,megatron,none,Adam (bf16 moments),100000\n"
         "llama-3.1-8b,4096,8,b200,amp_bf16,1,64,megatron,none,adam,100000\n"
         "llama-3.1-8b,4096,8,b200,amp_bf16,1,64,megatron,none,muon,100000\n";
  }
  const MeasuredTable t = read_measured_table(file);
  fs::remove(file);
  BOOST_TEST_REQUIRE(t.rows.size() == 3u);
  BOOST_TEST(t.rows[0].layout.bf16_moments);
  BOOST_TEST(t.rows[0].unmodelled == "");
  BOOST_TEST(!t.rows[1].layout.bf16_moments);
  BOOST_TEST(contains(t.rows[2].unmodelled, "the optimizer 'muon' is not modelled yet"));
}
