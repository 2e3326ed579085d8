// Megatron-Core's CUDA graphs (--cuda-graphs; a table's CUDA Graphs): the modules' names, the host
// time they take away (none at all under full_iteration; one launch per graphed module and pass
// otherwise), and the rules, flag and column.
#define BOOST_TEST_MODULE cuda_graphs
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "common.hpp"
#include "io/measured_table.hpp"
#include "model/simulator.hpp"
#include "run_tpsim.hpp"

using namespace tpsim;
using tpsim::test::contains;
using tpsim::test::shipped_hf;
using tpsim::testing::run_tpsim;
namespace tt = boost::test_tools;
namespace fs = std::filesystem;

namespace {

uint8_t graphs(const std::string& text) {
  std::string error;
  const std::optional<uint8_t> m = parse_cuda_graphs(text, error);
  BOOST_TEST_REQUIRE(m.has_value(), text << ": " << error);
  return *m;
}

TrainConfig megatron_run(int64_t gpus, uint8_t cuda_graphs) {
  TrainConfig cfg{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = gpus};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.cuda_graphs = cuda_graphs;
  return cfg;
}

}  // namespace

BOOST_AUTO_TEST_CASE(module_names_as_megatron_core_gives_them) {
  BOOST_TEST(cuda_graphs_text(graphs("transformer_engine:attn,moe_router,moe_preprocess")) ==
             "attn;moe_router;moe_preprocess");
  BOOST_TEST(cuda_graphs_text(graphs("local:layer")) == "attn;mlp;moe;mamba");
  BOOST_TEST(graphs("full_iteration") == graph_bit(GraphModule::kFullIteration));
  BOOST_TEST(graphs("none") == 0);
  std::string error;
  BOOST_TEST(!parse_cuda_graphs("attn,full_iteration", error).has_value());
  BOOST_TEST(contains(error, "full_iteration captures the whole step"));
  BOOST_TEST(!parse_cuda_graphs("transformer_engine:attn,router", error).has_value());
  BOOST_TEST(contains(error, "unknown CUDA graph module 'router'"));
  BOOST_TEST(!parse_cuda_graphs("attn,attn", error).has_value());
  BOOST_TEST(contains(error, "'attn' given twice"));
}

BOOST_AUTO_TEST_CASE(graphs_take_the_host_time_of_the_kernels_they_hold) {
  // A host-bound run (1 ms to issue each kernel): the whole-iteration graph leaves the GPU's time
  // alone, exactly what the same run costs with nothing to issue; per-layer graphs leave the
  // kernels outside them and one launch per graph.
  const ModelConfig llama = shipped_hf("llama-3.1-8b");
  const DeviceSpec device = load_device("h100_80gb");
  CostParams slow_host = load_shipped_profile("h100_80gb").params, free_host = slow_host;
  slow_host.host_kernel_issue_s = 1e-3;
  free_host.host_kernel_issue_s = 0;
  const auto step = [&](const CostParams& p, const std::string& g) {
    const TrainConfig cfg = megatron_run(8, g.empty() ? 0 : graphs(g));
    BOOST_TEST_REQUIRE(check_config(llama, device, p, cfg) == "");
    return predict(llama, device, p, cfg).step_s;
  };
  const double eager = step(slow_host, ""), gpu_only = step(free_host, "");
  BOOST_TEST(step(slow_host, "full_iteration") == gpu_only, tt::tolerance(1e-12));
  const double attn = step(slow_host, "attn"), layer = step(slow_host, "layer");
  BOOST_TEST(attn < eager);
  BOOST_TEST(layer < attn);
  BOOST_TEST(layer > gpu_only);  // each layer's two graphs, forward and backward, still launched
  // Under 'layer' a Llama block is two graphs (attn, mlp) each way: 32 layers x 8 micro-batches x 4
  // launches at 1 ms bound the step from below.
  BOOST_TEST(layer > 32.0 * 8.0 * 4.0 * 1e-3);
  BOOST_TEST(step(free_host, "layer") == gpu_only, tt::tolerance(1e-12));  // graphs change no GPU time
}

BOOST_AUTO_TEST_CASE(the_rules_flag_and_column) {
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  const ModelConfig llama = shipped_hf("llama-3.1-8b"), qwen = shipped_hf("qwen3-30b-a3b");
  const auto why = [&](const ModelConfig& m, const std::string& g, Checkpointing ckpt = Checkpointing::kNone) {
    TrainConfig cfg = megatron_run(8, graphs(g));
    cfg.layout.checkpointing = ckpt;
    if (m.moe.active()) cfg.layout.expert = 8;
    return check_config(m, device, profile.params, cfg);
  };
  BOOST_TEST(why(qwen, "attn,moe_router,moe_preprocess") == "");
  BOOST_TEST(contains(why(qwen, "attn,moe_preprocess"), "moe_preprocess needs moe_router"));
  BOOST_TEST(contains(why(qwen, "mlp"), "mlp captures dense feed-forward layers;"));
  BOOST_TEST(contains(why(qwen, "moe"), "only with drop-padding"));
  BOOST_TEST(contains(why(llama, "moe_router"), "moe_router captures routed experts"));
  BOOST_TEST(contains(why(llama, "mamba"), "mamba captures Mamba layers"));
  BOOST_TEST(contains(why(llama, "attn", Checkpointing::kFull), "full recompute runs only under full_iteration"));
  BOOST_TEST(why(llama, "full_iteration", Checkpointing::kFull) == "");
  BOOST_TEST(why(llama, "layer") == "");
  TrainConfig titan = megatron_run(8, graphs("attn"));
  titan.layout.framework = Framework::kTorchtitan;
  BOOST_TEST(contains(check_config(llama, device, profile.params, titan), "--cuda-graphs"));

  const auto ok = run_tpsim(
      "predict --model qwen3-30b-a3b --seq 4096 --device h100_80gb --gpus 16 --framework megatron --ep 8 "
      "--micro-batch 1 --global-batch 256 --cuda-graphs attn,moe_router,moe_preprocess --format csv");
  BOOST_TEST(ok.status == 0, ok.err);
  BOOST_TEST(contains(ok.out, "CUDA Graphs"));
  BOOST_TEST(contains(ok.out, "attn;moe_router;moe_preprocess"));
  const auto bad = run_tpsim(
      "predict --model llama-3.1-8b --seq 4096 --device h100_80gb --gpus 8 --framework megatron --micro-batch 1 "
      "--global-batch 64 --cuda-graphs attention");
  BOOST_TEST(bad.status != 0);
  BOOST_TEST(contains(bad.err, "--cuda-graphs 'attention': unknown CUDA graph module 'attention'"), bad.err);

  const fs::path file = fs::temp_directory_path() / "tpsim_cuda_graphs.csv";
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Expert Parallel,Recompute,"
         "CUDA Graphs,Throughput (T/s)\n"
         "qwen3-30b-a3b,4096,16,h100_80gb,amp_bf16,1,256,megatron,8,none,transformer_engine:attn;moe_router,100000\n"
         "qwen3-30b-a3b,4096,16,h100_80gb,amp_bf16,1,256,megatron,8,none,full_iteration,100000\n"
         "qwen3-30b-a3b,4096,16,h100_80gb,amp_bf16,1,256,megatron,8,none,transformer_engine:everything,100000\n";
  }
  const MeasuredTable t = read_measured_table(file);
  fs::remove(file);
  BOOST_TEST_REQUIRE(t.rows.size() == 3u);
  BOOST_TEST(cuda_graphs_text(t.rows[0].layout.cuda_graphs) == "attn;moe_router");
  BOOST_TEST(t.rows[0].unmodelled == "");
  BOOST_TEST(t.rows[1].layout.cuda_graphs == graph_bit(GraphModule::kFullIteration));
  BOOST_TEST(contains(t.rows[2].unmodelled, "unknown CUDA graph module 'everything'"), t.rows[2].unmodelled);
}
