// Models whose layers differ (ModelConfig::layers): the groups and runs of layer_pattern, parameter
// counts by hand, and the step of each framework as the sum of its layers' kinds.
#define BOOST_TEST_MODULE layer_pattern
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <stdexcept>

#include "common.hpp"
#include "io/hf_config.hpp"
#include "model/architecture.hpp"
#include "model/schedule.hpp"
#include "model/simulator.hpp"

using namespace tpsim;
using tpsim::test::contains;
namespace tt = boost::test_tools;

namespace {

// A small Mixtral-like model: 8 experts of 1,024, top 2, and a dense feed-forward of 2,048 for the
// layers whose kind is dense.
ModelConfig moe_model(int64_t layers) {
  ModelConfig m = test::llama(1024, 8, 8, layers, 2048, 32000);
  m.name = "mixed";
  m.moe.experts = 8;
  m.moe.top_k = 2;
  m.moe.d_expert = 1024;
  return m;
}

// `m` with its first `dense` layers dense and the rest experts.
ModelConfig first_dense(ModelConfig m, int64_t dense) {
  std::vector<LayerKind> kinds(static_cast<size_t>(m.n_layers));
  for (int64_t i = 0; i < dense; ++i) kinds[static_cast<size_t>(i)].dense_ffn = true;
  set_layer_kinds(m, kinds);
  return m;
}

ModelConfig all_dense(ModelConfig m) {
  m.moe = MoeConfig{};
  return m;
}

struct Fixture {
  DeviceSpec device = load_device("h100_80gb");
  DeviceProfile profile = load_shipped_profile("h100_80gb");
};

TrainConfig composer(int64_t gpus) {
  return TrainConfig{.seq_len = 2048, .global_batch = 8 * gpus, .micro_batch = 2, .n_gpus = gpus};
}

TrainConfig megatron(int64_t gpus, int64_t pp) {
  TrainConfig c{.seq_len = 2048, .global_batch = 64, .micro_batch = 1, .n_gpus = gpus};
  c.layout.framework = Framework::kMegatron;
  c.layout.pipeline = pp;
  c.layout.expert = 1;
  return c;
}

// The compute of a step by category: what adds up layer by layer.
struct Compute {
  double gemm, attention, other;
};
Compute compute(const Prediction& p) { return {p.time.gemm_s, p.time.attention_s, p.time.other_compute_s}; }

}  // namespace

BOOST_AUTO_TEST_CASE(a_pattern_groups_equal_layers_and_keeps_their_runs) {
  ModelConfig m = moe_model(6);
  set_layer_kinds(m, {{false, true}, {false, false}, {false, false}, {false, true}, {false, false}, {false, false}});
  const LayerPattern p = layer_pattern(m);
  BOOST_TEST_REQUIRE(p.groups.size() == 2u);
  BOOST_TEST(p.groups[0].layers == 2);
  BOOST_TEST(!p.groups[0].model.moe.active());  // dense: the experts off, ffn_hidden's MLP
  BOOST_TEST(p.groups[1].layers == 4);
  BOOST_TEST(p.groups[1].model.moe.experts == 8);
  BOOST_TEST(p.runs.size() == 4u);  // dense, 2 MoE, dense, 2 MoE
  BOOST_TEST(p.runs[1].group == 1);
  BOOST_TEST(p.runs[1].layers == 2);
  // Layers 1..4 (a pipeline chunk): 1 dense, 3 MoE.
  const std::vector<int64_t> n = p.count_in(1, 4);
  BOOST_TEST(n[0] == 1);
  BOOST_TEST(n[1] == 3);
  // All of one kind: one representation, the uniform one.
  ModelConfig same = moe_model(3);
  set_layer_kinds(same, {{false, true}, {false, true}, {false, true}});
  BOOST_TEST(same.layers.empty());
  BOOST_TEST(!same.moe.active());
  // What costs one block refuses a model whose blocks differ.
  BOOST_CHECK_THROW(layer_parameter_count(m), std::logic_error);
  BOOST_CHECK_THROW(block_shape(m, 1, 128, Precision::kAmpBf16), std::logic_error);
}

BOOST_AUTO_TEST_CASE(a_pattern_is_checked) {
  ModelConfig m = moe_model(4);
  m.layers = {{false, true}, {false, false}};
  BOOST_TEST(contains(check_architecture(m), "the per-layer kinds (2) are not one per layer (4)"));
  m.layers = {{true, false}, {false, false}, {false, false}, {false, false}};
  BOOST_TEST(contains(check_architecture(m), "sliding-window layers without a window"));
  ModelConfig dense = all_dense(moe_model(2));
  dense.layers = {{false, true}, {false, false}};
  BOOST_TEST(contains(check_architecture(dense), "dense feed-forward layers in a model without experts"));
}

BOOST_AUTO_TEST_CASE(parameter_counts_sum_the_kinds_by_hand) {
  // Qwen2-MoE's sparse step and mlp_only_layers (modeling_qwen2_moe.py): layer i is sparse when
  // (i + 1) % 2 == 0 and i is not listed: layers 0 and 2 dense by the step, 3 by the list, 1 sparse.
  // hidden 8, 2 heads of 4 (q, k, v with biases), intermediate 16, 4 experts of 4 (top 2), one
  // shared expert of 6 behind a gate, vocabulary 10, untied.
  const HfConfig c = read_hf_config(
      R"({"model_type": "qwen2_moe", "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 2,
          "num_hidden_layers": 4, "intermediate_size": 16, "moe_intermediate_size": 4, "num_experts": 4,
          "num_experts_per_tok": 2, "shared_expert_intermediate_size": 6, "vocab_size": 10,
          "decoder_sparse_step": 2, "mlp_only_layers": [3]})",
      "c.json");
  const ModelConfig& m = c.model;
  BOOST_TEST_REQUIRE(m.layers.size() == 4u);
  BOOST_TEST(m.layers[0].dense_ffn);
  BOOST_TEST(!m.layers[1].dense_ffn);
  BOOST_TEST(m.layers[2].dense_ffn);
  BOOST_TEST(m.layers[3].dense_ffn);
  const int64_t attention = 4 * 8 * 8 + 3 * 8, norms = 2 * 8;
  const int64_t dense = attention + norms + 3 * 8 * 16;  // 680
  const int64_t router = 8 * 4, expert = 3 * 8 * 4, shared = 3 * 8 * 6 + 8;
  const int64_t sparse = attention + norms + router + 4 * expert + shared;         // 864
  const int64_t sparse_active = attention + norms + router + 2 * expert + shared;  // 672
  const int64_t embedding = 10 * 8, head = 10 * 8, final_norm = 8;
  BOOST_TEST(parameter_count(m, 128) == 3 * dense + sparse + embedding + head + final_norm);  // 3,072
  BOOST_TEST(active_parameter_count(m, 128) == 3 * dense + sparse_active + embedding + final_norm);
  // Qwen2's max_window_layers: with use_sliding_window, layers from it on slide.
  const ModelConfig w =
      read_hf_config(
          R"({"model_type": "qwen2", "num_hidden_layers": 4, "use_sliding_window": true, "max_window_layers": 2,
          "sliding_window": 1024})",
          "c.json")
          .model;
  BOOST_TEST_REQUIRE(w.layers.size() == 4u);
  BOOST_TEST(!w.layers[1].sliding);
  BOOST_TEST(w.layers[2].sliding);
  BOOST_TEST(w.sliding_window == 1024);
}

// The step of a model whose layers differ is the step of its layers: compute by category adds up
// layer by layer (k MoE layers and L - k dense ones: k/L of the all-MoE model's and (L-k)/L of the
// all-dense model's, the embedding and head counted once in each), and so do its parameters.
BOOST_FIXTURE_TEST_CASE(compute_adds_up_over_the_kinds_under_composer_and_megatron, Fixture) {
  const int64_t L = 8, dense = 3;
  const ModelConfig moe = moe_model(L), mixed = first_dense(moe, dense), flat = all_dense(moe);
  const double k = static_cast<double>(L - dense) / static_cast<double>(L), j = 1.0 - k;
  for (const TrainConfig& cfg : {composer(8), megatron(8, 1)}) {
    BOOST_TEST_CONTEXT(to_string(cfg.layout.framework)) {
      BOOST_TEST_REQUIRE(check_config(mixed, device, profile.params, cfg) == "");
      const Prediction a = predict(moe, device, profile.params, cfg), b = predict(flat, device, profile.params, cfg),
                       p = predict(mixed, device, profile.params, cfg);
      const Compute ca = compute(a), cb = compute(b), cp = compute(p);
      BOOST_TEST(cp.gemm == k * ca.gemm + j * cb.gemm, tt::tolerance(1e-9));
      BOOST_TEST(cp.attention == k * ca.attention + j * cb.attention, tt::tolerance(1e-9));
      BOOST_TEST(cp.other == k * ca.other + j * cb.other, tt::tolerance(1e-9));
      BOOST_TEST(p.n_params == dense * (b.n_params - a.n_params) / L + a.n_params);
      // Between the two in time and memory.
      BOOST_TEST(p.step_s > std::min(a.step_s, b.step_s));
      BOOST_TEST(p.step_s < std::max(a.step_s, b.step_s));
      BOOST_TEST(p.memory.peak_bytes > std::min(a.memory.peak_bytes, b.memory.peak_bytes));
      BOOST_TEST(p.memory.peak_bytes < std::max(a.memory.peak_bytes, b.memory.peak_bytes));
    }
  }
}

// Kinds that cost alike (a window no shorter than the sequence slides over nothing) give the
// uniform model's step exactly, however many runs the pattern has: the schedule's steady-state skip
// within runs is exact.
BOOST_FIXTURE_TEST_CASE(kinds_that_cost_alike_give_the_uniform_step, Fixture) {
  ModelConfig uniform = test::llama(2048, 16, 8, 12, 5632, 32000);
  ModelConfig alternating = uniform;
  alternating.sliding_window = 4096;  // >= the sequence: every layer attends to its whole prefix
  std::vector<LayerKind> kinds;
  for (int64_t i = 0; i < uniform.n_layers; ++i) kinds.push_back({i % 3 == 2, false});
  set_layer_kinds(alternating, kinds);
  BOOST_TEST_REQUIRE(layer_pattern(alternating).runs.size() == 8u);
  TrainConfig cfg = composer(16);
  cfg.global_batch = 16 * 6;  // a smaller last micro-batch too
  const Prediction a = predict(uniform, device, profile.params, cfg),
                   b = predict(alternating, device, profile.params, cfg);
  BOOST_TEST(b.step_s == a.step_s, tt::tolerance(1e-12));
  BOOST_TEST(b.memory.peak_bytes == a.memory.peak_bytes, tt::tolerance(1e-12));
  TrainConfig mcfg = megatron(8, 2);
  mcfg.layout.sequence_parallel = true;
  const Prediction c = predict(uniform, device, profile.params, mcfg),
                   d = predict(alternating, device, profile.params, mcfg);
  BOOST_TEST(d.step_s == c.step_s, tt::tolerance(1e-12));
  BOOST_TEST(d.memory.peak_bytes == c.memory.peak_bytes, tt::tolerance(1e-12));
}

// The FSDP schedule over runs of unequal blocks: skipping each run's steady state is exact against
// stepping through every block, and a block's backward gathers the next block's parameters (its
// own size), not its own.
BOOST_AUTO_TEST_CASE(the_schedule_steps_run_by_run_exactly) {
  MicroBatchCosts small, big;
  small.block_fwd_s = 1.0, small.block_bwd_s = 2.0, small.block_gather_fwd_s = small.block_gather_bwd_s = 0.5;
  small.block_reduce_s = 0.9;
  big = small;
  big.block_fwd_s = 1.5, big.block_bwd_s = 3.0, big.block_gather_fwd_s = big.block_gather_bwd_s = 2.5;
  big.block_reduce_s = 4.0;
  StepCosts step;
  step.n_layers = 40;
  step.n_micro = 3;
  step.overlap_slowdown = 0.3;
  step.runs = {{0, 10}, {1, 5}, {0, 20}, {1, 5}};
  step.full = step.last = small;
  step.full_groups = step.last_groups = {small, big};
  const Timeline fast = simulate_step(step);
  step.skip_steady_state = false;
  const Timeline slow = simulate_step(step);
  BOOST_TEST(fast.step_s == slow.step_s, tt::tolerance(1e-12));
  BOOST_TEST(fast.exposed_comm_s == slow.exposed_comm_s, tt::tolerance(1e-9));
  BOOST_TEST(fast.blocks_stepped < slow.blocks_stepped);
  // Compute: every block's forward and backward, each run with its own.
  BOOST_TEST(slow.compute_s == 3.0 * (30.0 * 3.0 + 10.0 * 4.5), tt::tolerance(1e-12));
  // Communication: each block gathered twice and reduced once, each at its own size.
  BOOST_TEST(slow.comm_s == 3.0 * (30.0 * (2 * 0.5 + 0.9) + 10.0 * (2 * 2.5 + 4.0)), tt::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(torchtitan_refuses_a_pattern_by_name, Fixture) {
  ModelConfig m = test::llama(2048, 16, 8, 4, 5632, 32000);
  m.sliding_window = 4096;
  set_layer_kinds(m, {{true, false}, {false, false}, {true, false}, {false, false}});
  TrainConfig cfg = composer(8);
  cfg.layout.framework = Framework::kTorchtitan;
  cfg.layout.sharding = Sharding::kFullShard;
  BOOST_TEST(contains(check_config(m, device, profile.params, cfg), "layers differ"));
}

// Megatron runs a window through TransformerEngine's fused attention: modelled, but not with
// context parallelism (the ring's windowed steps) or under torchtitan.
BOOST_FIXTURE_TEST_CASE(megatron_models_a_window_but_not_with_context_parallelism, Fixture) {
  ModelConfig m = test::llama(2048, 16, 8, 4, 5632, 32000);
  m.sliding_window = 512;
  set_layer_kinds(m, {{true, false}, {false, false}, {true, false}, {false, false}});
  TrainConfig cfg = megatron(8, 1);
  BOOST_TEST(check_config(m, device, profile.params, cfg) == "");
  const Prediction windowed = predict(m, device, profile.params, cfg);
  ModelConfig full = m;
  set_layer_kinds(full, std::vector<LayerKind>(4));
  const Prediction whole = predict(full, device, profile.params, cfg);
  // Half the layers attend within 512 of 2,048 keys: less attention, the same GEMMs.
  BOOST_TEST(windowed.time.attention_s < whole.time.attention_s);
  BOOST_TEST(windowed.time.gemm_s == whole.time.gemm_s, tt::tolerance(1e-12));
  cfg.layout.context = 2;
  BOOST_TEST(contains(check_config(m, device, profile.params, cfg), "with context parallel 2 is not modelled"));
}
