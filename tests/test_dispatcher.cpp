// The flex token dispatcher (--moe-dispatcher deepep, hybridep): which ranks and NVLink domains a
// token reaches under uniform and group-limited routing (against a simulation of Megatron-Core's
// router on random logits), what each dispatch sends against the all-to-all's rows, and the rules,
// flag, column and config keys that ask for it.
#define BOOST_TEST_MODULE dispatcher
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "io/hf_config.hpp"
#include "io/measured_table.hpp"
#include "model/architecture.hpp"
#include "model/cost.hpp"
#include "model/model_parallel.hpp"
#include "model/parallelism.hpp"
#include "model/simulator.hpp"
#include "run_tpsim.hpp"

using namespace tpsim;
using tpsim::test::contains;
using tpsim::test::shipped_hf;
using tpsim::testing::run_tpsim;
namespace tt = boost::test_tools;
namespace fs = std::filesystem;

namespace {

// The share of `tokens` tokens whose experts include one of [first, first + span), routed as
// Megatron-Core routes them under --moe-router-force-load-balancing: iid normal logits, with groups
// each group scored by the sum of its two best, the best group_top_k groups kept, then the top_k
// experts among theirs (moe_utils.py group_limited_topk).
double simulated_hit_share(const MoeConfig& e, int64_t first, int64_t span, int tokens) {
  std::mt19937_64 rng(12345);
  std::normal_distribution<double> normal;
  std::vector<double> logits(static_cast<size_t>(e.experts));
  std::vector<int64_t> order(static_cast<size_t>(e.experts));
  int hits = 0;
  for (int t = 0; t < tokens; ++t) {
    for (double& x : logits) x = normal(rng);
    std::vector<bool> open(static_cast<size_t>(e.experts), true);
    if (e.groups > 1) {
      const int64_t size = e.experts / e.groups;
      std::vector<std::pair<double, int64_t>> scores;
      for (int64_t g = 0; g < e.groups; ++g) {
        std::vector<double> in(logits.begin() + g * size, logits.begin() + (g + 1) * size);
        std::partial_sort(in.begin(), in.begin() + 2, in.end(), std::greater<>());
        scores.emplace_back(in[0] + in[1], g);
      }
      std::sort(scores.begin(), scores.end(), std::greater<>());
      std::fill(open.begin(), open.end(), false);
      for (int64_t i = 0; i < e.group_top_k; ++i)
        for (int64_t x = 0; x < size; ++x)
          open[static_cast<size_t>(scores[static_cast<size_t>(i)].second * size + x)] = true;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + e.top_k, order.end(), [&](int64_t a, int64_t b) {
      const double la = open[static_cast<size_t>(a)] ? logits[static_cast<size_t>(a)] : -1e300;
      const double lb = open[static_cast<size_t>(b)] ? logits[static_cast<size_t>(b)] : -1e300;
      return la > lb;
    });
    hits +=
        std::any_of(order.begin(), order.begin() + e.top_k, [&](int64_t x) { return x >= first && x < first + span; });
  }
  return static_cast<double>(hits) / tokens;
}

MoeConfig deepseek_routing(bool groups) {
  MoeConfig e{.experts = 256, .top_k = 8, .d_expert = 2048};
  if (groups) e.groups = 8, e.group_top_k = 4;
  return e;
}

}  // namespace

BOOST_AUTO_TEST_CASE(hit_probabilities_match_a_simulated_router) {
  // A rank of ep 64 (4 experts), of ep 8 (32: one group), an 8-GPU node of ep 64 (32), and 2 groups
  // at once (64: an NVLink domain of 16 ranks at ep 64); uniform and DeepSeek-V3's 8 groups, top 4.
  // 20,000 tokens: a share's standard error is at most 0.0035; 0.012 is over three of them.
  for (const bool groups : {false, true})
    for (const int64_t span : {4, 32, 64}) {
      const MoeConfig e = deepseek_routing(groups);
      const double formula = routed_hit_probability(e, span);
      const double simulated = simulated_hit_share(e, span, span, 20000);
      BOOST_TEST(std::abs(formula - simulated) < 0.012,
                 "groups " << groups << " span " << span << ": " << formula << " against " << simulated);
    }
  // Without groups, 1 - C(224, 8) / C(256, 8) for a 32-expert rank, by hand.
  double miss = 1.0;
  for (int i = 0; i < 8; ++i) miss *= (224.0 - i) / (256.0 - i);
  BOOST_TEST(routed_hit_probability(deepseek_routing(false), 32) == 1.0 - miss, tt::tolerance(1e-12));
  // With groups a 32-expert rank is one group, hit when chosen (half the time); a 4-expert rank is hit
  // by one of its group's two picks, 1 - C(28, 2) / C(32, 2); 64 experts are two groups, hit unless
  // both are among the 4 of 8 left out, 1 - C(6, 4) / C(8, 4).
  BOOST_TEST(routed_hit_probability(deepseek_routing(true), 32) == 0.5, tt::tolerance(1e-12));
  BOOST_TEST(routed_hit_probability(deepseek_routing(true), 4) == 0.5 * (1.0 - 378.0 / 496.0), tt::tolerance(1e-12));
  BOOST_TEST(routed_hit_probability(deepseek_routing(true), 64) == 1.0 - 15.0 / 70.0, tt::tolerance(1e-12));
  BOOST_TEST(routed_hit_probability(deepseek_routing(true), 256) == 1.0);
  BOOST_TEST(routed_hit_probability(deepseek_routing(true), 0) == 0.0);
}

BOOST_AUTO_TEST_CASE(a_flex_dispatch_sends_each_token_once_per_rank_it_reaches) {
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  const CostModel cost(device, profile.params);
  const LayerPattern pattern = layer_pattern(shipped_hf("deepseek-v3"));
  const auto moe_group = std::find_if(pattern.groups.begin(), pattern.groups.end(),
                                      [](const LayerGroup& g) { return g.model.moe.active(); });
  BOOST_TEST_REQUIRE((moe_group != pattern.groups.end()));
  const ModelConfig& v3 = moe_group->model;  // DeepSeek-V3's mixture-of-experts layer
  BOOST_TEST(v3.moe.groups == 8);
  BOOST_TEST(v3.moe.group_top_k == 4);
  TrainConfig cfg{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = 8};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.expert = 8;
  cfg.layout.set_expert_tensor(1);
  const BlockShape s = rank_shape(v3, cfg, 129280);
  const ModelParallelLayout l = model_parallel_layout(cfg.layout, cfg.n_gpus, device.gpus_per_node);
  // One node: every other rank over NVLink, each token to the ranks it reaches (32 experts a rank:
  // one group of 8, chosen half the time).
  const double nvlink = device.intra_node_bytes_per_s * profile.params.intra_node_link_efficiency;
  const double row = 4096.0 * 7168.0 * 2.0;
  const double p = routed_hit_probability(v3.moe, 32);
  BOOST_TEST(
      flex_dispatch_seconds(cost, s, l.tp_ep_group) == row * p * 7.0 / nvlink + profile.params.intra_node_latency_s,
      tt::tolerance(1e-12));
  // The all-to-all sends every (token, expert) row: 8 per token, 7/8 of them off the rank.
  const double a2a = all_to_all_seconds(cost, moe_dispatch_bytes(s), l.ep_group);
  BOOST_TEST(a2a - profile.params.intra_node_latency_s == row * 8.0 * 7.0 / 8.0 / nvlink, tt::tolerance(1e-12));
  BOOST_TEST(p == 0.5);  // so the flex dispatch sends half the all-to-all's bytes

  // Across nodes (ep 64 on 8 nodes): the network carries each token once per other node it reaches,
  // the node's 8 ranks at once over its NICs; NVLink the forwarded copies. H100's network is slower.
  cfg.n_gpus = 64;
  cfg.layout.expert = 64;
  const BlockShape s64 = rank_shape(v3, cfg, 129280);
  const ModelParallelLayout l64 = model_parallel_layout(cfg.layout, cfg.n_gpus, device.gpus_per_node);
  BOOST_TEST(l64.tp_ep_group.nodes == 8);
  const double p_node = routed_hit_probability(v3.moe, 32), p_rank = routed_hit_probability(v3.moe, 4);
  const double network =
      8.0 * row * p_node * 7.0 / (device.inter_node_bytes_per_s * profile.params.inter_node_link_efficiency);
  const double forwarded = row * p_rank * 7.0 * 8.0 / nvlink;
  BOOST_TEST(flex_dispatch_seconds(cost, s64, l64.tp_ep_group) ==
                 std::max(network, forwarded) + profile.params.inter_node_latency_s,
             tt::tolerance(1e-12));
  BOOST_TEST(flex_dispatch_seconds(cost, s64, l64.tp_ep_group) <
             all_to_all_seconds(cost, moe_dispatch_bytes(s64), l64.ep_group));
}

BOOST_AUTO_TEST_CASE(the_step_and_the_expert_tensor_parallel_gather) {
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  const DeviceSpec device = load_device("b200");
  const DeviceProfile profile = load_shipped_profile("b200");
  TrainConfig cfg{.seq_len = 4096, .global_batch = 1024, .micro_batch = 1, .n_gpus = 256};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.pipeline = 16;
  cfg.layout.first_stage_layers = 4, cfg.layout.last_stage_layers = 1;
  cfg.layout.expert = 8;
  cfg.layout.set_expert_tensor(1);
  cfg.precision = Precision::kMxfp8;
  TrainConfig hybrid = cfg;
  hybrid.layout.moe_dispatcher = MoeDispatcher::kHybridEp;
  BOOST_TEST_REQUIRE(check_config(v3, device, profile.params, hybrid) == "");
  const Prediction a2a = predict(v3, device, profile.params, cfg), flex = predict(v3, device, profile.params, hybrid);
  BOOST_TEST(flex.step_s < a2a.step_s);
  BOOST_TEST(flex.memory.peak_bytes == a2a.memory.peak_bytes);  // the dispatcher's buffers are not costed
  // DeepEP and HybridEP are costed alike within 8 NVLink peers.
  TrainConfig deep = hybrid;
  deep.layout.moe_dispatcher = MoeDispatcher::kDeepEp;
  BOOST_TEST_REQUIRE(check_config(v3, device, profile.params, deep) == "");
  BOOST_TEST(predict(v3, device, profile.params, deep).step_s == flex.step_s, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(the_rules_flag_column_and_config_keys) {
  const DeviceSpec gb200 = load_device("gb200");
  const DeviceProfile profile = load_shipped_profile("gb200");
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  TrainConfig cfg{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = 64};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.expert = 32;
  cfg.layout.moe_dispatcher = MoeDispatcher::kDeepEp;
  BOOST_TEST(contains(check_config(v3, gb200, profile.params, cfg), "DeepEP reaches at most 8 NVLink peers"));
  cfg.layout.moe_dispatcher = MoeDispatcher::kHybridEp;
  BOOST_TEST(check_config(v3, gb200, profile.params, cfg) == "");
  const ModelConfig dense = shipped_hf("llama-3.1-8b");
  cfg.layout.expert = 1;
  BOOST_TEST(contains(check_config(dense, gb200, profile.params, cfg), "has no routed experts"));
  cfg.layout.framework = Framework::kTorchtitan;
  BOOST_TEST(contains(check_config(v3, gb200, profile.params, cfg), "--moe-dispatcher"));

  const auto ok = run_tpsim(
      "predict --model deepseek-v3 --seq 4096 --device b200 --gpus 256 --framework megatron --pp 16 --ep 8 --etp 1 "
      "--first-stage-layers 4 --last-stage-layers 1 --micro-batch 1 --global-batch 1024 --moe-dispatcher hybridep --format csv");
  BOOST_TEST(ok.status == 0, ok.err);
  BOOST_TEST(contains(ok.out, "MoE Dispatcher"));
  BOOST_TEST(contains(ok.out, "flex:hybridep"));
  const auto bad = run_tpsim(
      "predict --model deepseek-v3 --seq 4096 --device b200 --gpus 256 --framework megatron --ep 8 "
      "--moe-dispatcher nccl");
  BOOST_TEST(bad.status != 0);
  BOOST_TEST(contains(bad.err, "--moe-dispatcher 'nccl': expected alltoall, deepep or hybridep"));
  const auto composer = run_tpsim("predict --model 7b --seq 2048 --device h100_80gb --gpus 8 --moe-dispatcher deepep");
  BOOST_TEST(composer.status != 0);
  BOOST_TEST(contains(composer.err, "--moe-dispatcher: Megatron-Core's option; use --framework megatron"));

  // A table's column: the flex dispatchers are read, another is refused by name.
  const fs::path file = fs::temp_directory_path() / "tpsim_dispatcher.csv";
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Expert Parallel,Recompute,"
         "MoE Dispatcher,Throughput (T/s)\n"
         "deepseek-v3,4096,64,b200,amp_bf16,1,64,megatron,8,none,flex:HybridEP,100000\n"
         "deepseek-v3,4096,64,b200,amp_bf16,1,64,megatron,8,none,flex:ncclep,100000\n";
  }
  const MeasuredTable t = read_measured_table(file);
  fs::remove(file);
  BOOST_TEST_REQUIRE(t.rows.size() == 2u);
  BOOST_TEST(to_string(t.rows[0].layout.moe_dispatcher) == "flex:hybridep");
  BOOST_TEST(t.rows[0].unmodelled == "");
  BOOST_TEST(contains(t.rows[1].unmodelled, "the MoE dispatcher 'flex:ncclep' is not modelled"));

  // config.json: the group limit read, a wrong one named with its line.
  const fs::path json = fs::temp_directory_path() / "tpsim_groups.json";
  {
    std::ofstream f(json);
    f << "{\n  \"model_type\": \"deepseek_v3\",\n  \"n_routed_experts\": 256,\n  \"n_group\": 7,\n"
         "  \"topk_group\": 4\n}\n";
  }
  const std::string error = test::error_of([&] { read_hf_config_file(json); });
  fs::remove(json);
  BOOST_TEST(contains(error, ":4: n_group"), error);
  BOOST_TEST(contains(error, "does not divide the 256 routed experts"), error);
}

BOOST_AUTO_TEST_CASE(token_dropping_pads_each_expert_to_its_capacity) {
  // Megatron-Core's --moe-expert-capacity-factor with padding: every expert takes cf times its even
  // share of the routed rows, so the dispatch and the experts' rows grow by cf (rounded up per expert).
  const ModelConfig qwen = shipped_hf("qwen3-30b-a3b");
  TrainConfig cfg{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = 8};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.expert = 8;
  const BlockShape dropless = rank_shape(qwen, cfg, 151936);
  cfg.layout.moe_capacity_factor = 1.25;
  const BlockShape padded = rank_shape(qwen, cfg, 151936);
  BOOST_TEST(padded.moe.capacity_factor == 1.25);
  const double rows = 4096.0 * 8.0, per_expert = std::ceil(1.25 * rows / 128.0);
  BOOST_TEST(moe_dispatch_bytes(padded) / moe_dispatch_bytes(dropless) == per_expert * 128.0 / rows,
             tt::tolerance(1e-12));
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  BOOST_TEST(check_config(qwen, device, profile.params, cfg) == "");
  BOOST_TEST(predict(qwen, device, profile.params, cfg).step_s > predict(qwen, device, profile.params,
                                                                         [&] {
                                                                           TrainConfig c = cfg;
                                                                           c.layout.moe_capacity_factor = 0;
                                                                           return c;
                                                                         }())
                                                                     .step_s);
  cfg.layout.moe_dispatcher = MoeDispatcher::kDeepEp;
  BOOST_TEST(contains(check_config(qwen, device, profile.params, cfg), "does not pad experts to a capacity"));
  TrainConfig dense = cfg;
  dense.layout.moe_dispatcher = MoeDispatcher::kAllToAll;
  dense.layout.expert = 1;
  BOOST_TEST(contains(check_config(shipped_hf("llama-3.1-8b"), device, profile.params, dense),
                      "has no routed experts to drop tokens from"));

  const auto titan = run_tpsim(
      "predict --model qwen3-30b-a3b --seq 4096 --device h100_80gb --gpus 8 --framework torchtitan --micro-batch 1 "
      "--global-batch 64 --moe-capacity-factor 1");
  BOOST_TEST(titan.status != 0);
  BOOST_TEST(contains(titan.err, "--moe-capacity-factor: Megatron-Core's option"), titan.err);

  const fs::path file = fs::temp_directory_path() / "tpsim_token_drop.csv";
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Expert Parallel,Recompute,"
         "Token Drop,MoE Capacity Factor,Throughput (T/s)\n"
         "qwen3-30b-a3b,4096,8,h100_80gb,amp_bf16,1,64,megatron,8,none,True,1.0,100000\n"
         "qwen3-30b-a3b,4096,8,h100_80gb,amp_bf16,1,64,megatron,8,none,True,,100000\n";
  }
  const MeasuredTable t = read_measured_table(file);
  BOOST_TEST_REQUIRE(t.rows.size() == 2u);
  BOOST_TEST(t.rows[0].layout.moe_capacity_factor == 1.0);
  BOOST_TEST(t.rows[0].unmodelled == "");
  BOOST_TEST(contains(t.rows[1].unmodelled, "without its capacity (MoE Capacity Factor)"));
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Expert Parallel,Recompute,"
         "MoE Capacity Factor,Throughput (T/s)\n"
         "qwen3-30b-a3b,4096,8,h100_80gb,amp_bf16,1,64,megatron,8,none,0,100000\n";
  }
  const std::string error = test::error_of([&] { read_measured_table(file); });
  fs::remove(file);
  BOOST_TEST(contains(error, ":2: column 'MoE Capacity Factor' must be in (0, 64], got '0'"), error);
}
