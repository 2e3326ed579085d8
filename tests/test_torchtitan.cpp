// torchtitan layouts: FSDP2 against Composer's FULL_SHARD on the same model, float8 all-gathers,
// tensor-parallel FLOPs, memory against a hand-computed case, activation checkpointing's modes,
// pipelines and the layouts that cannot run.
#define BOOST_TEST_MODULE torchtitan
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>

#include "common.hpp"
#include "run_tpsim.hpp"
#include "model/megatron.hpp"
#include "model/ops.hpp"
#include "model/rules.hpp"
#include "model/search.hpp"
#include "model/simulator.hpp"
#include "model/torchtitan.hpp"

using namespace tpsim;
using tpsim::test::contains;
namespace tt = boost::test_tools;

namespace {

// A small Llama 3 shape: GQA, RoPE, RMSNorm, SwiGLU, untied embeddings, no biases.
ModelConfig small_llama() {
  ModelConfig m = test::llama(1024, 16, 8, 8, 3584, 32000);
  m.name = "llama-1024-l8";
  return m;
}

TrainConfig titan(int64_t gpus, int64_t tp, int64_t pp, int64_t global_batch, int64_t micro_batch,
                  Precision precision = Precision::kAmpBf16) {
  TrainConfig c{.seq_len = 2048,
                .global_batch = global_batch,
                .micro_batch = micro_batch,
                .n_gpus = gpus,
                .precision = precision};
  c.layout.framework = Framework::kTorchtitan;
  c.layout.tensor = tp;
  c.layout.pipeline = pp;
  c.layout.sequence_parallel = tp > 1;
  return c;
}

struct Fixture {
  DeviceSpec device = load_device("h100_80gb");
  DeviceProfile profile = load_shipped_profile("h100_80gb");
  ModelConfig model = small_llama();
  std::string why(const TrainConfig& c) const { return check_config(model, device, profile.params, c); }
};

double flops_of(void (*build)(const BlockShape&, OpSink&), const BlockShape& s) {
  OpList ops;
  build(s, ops);
  return total_flops(ops);
}
double saved_of(void (*build)(const BlockShape&, OpSink&), const BlockShape& s) {
  OpList ops;
  build(s, ops);
  return total_saved_bytes(ops);
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(fsdp2_without_model_parallelism_is_composers_full_shard_less_one_gather, Fixture) {
  // Same GEMMs and attention (tp = 1 leaves the shape as it is), so the same GEMM and attention
  // seconds, and more memory-bound seconds: torchtitan's RMSNorm and RoPE run eagerly as PyTorch
  // ops (BlockShape::eager_rms_norm); the same root and per-block parameter all-gathers and fp32
  // reduce-scatters, except that FSDP2 keeps the last block gathered from its forward into its
  // backward: one block's gather fewer per micro-batch.
  TrainConfig comp{.seq_len = 2048, .global_batch = 64, .micro_batch = 4, .n_gpus = 8};
  const TrainConfig tit = titan(8, 1, 1, 64, 4);
  BOOST_REQUIRE(why(comp).empty());
  BOOST_REQUIRE(why(tit).empty());
  const Prediction a = predict(model, device, profile.params, comp);
  const Prediction b = predict(model, device, profile.params, tit);
  BOOST_TEST(b.time.gemm_s == a.time.gemm_s, tt::tolerance(1e-12));
  BOOST_TEST(b.time.attention_s == a.time.attention_s, tt::tolerance(1e-12));
  BOOST_TEST(b.time.other_compute_s > a.time.other_compute_s);
  // With its Triton RMSNorm and the blocks compiled, torchtitan's memory-bound kernels are
  // Composer's compiled ones.
  TrainConfig comp_compiled = comp, tit_fused = tit;
  comp_compiled.layout.torch_compile = tit_fused.layout.torch_compile = tit_fused.layout.fused_rmsnorm = true;
  BOOST_REQUIRE(why(comp_compiled).empty());
  BOOST_REQUIRE(why(tit_fused).empty());
  BOOST_TEST(predict(model, device, profile.params, tit_fused).time.other_compute_s ==
                 predict(model, device, profile.params, comp_compiled).time.other_compute_s,
             tt::tolerance(1e-12));

  const double block = static_cast<double>(layer_parameter_count(model));
  const double root = static_cast<double>(embedding_parameter_count(model, 2048));
  const double L = static_cast<double>(model.n_layers), m = 2;        // 64 / 8 / 4 micro-batches
  const double composer_gather = m * (root + 2.0 * L * block) * 2.0;  // bf16, FULL_SHARD
  TorchtitanEvaluator e(model, device, profile.params);
  const TorchtitanTraffic t = e.traffic(tit);
  BOOST_TEST(t.fsdp_gather_bytes == composer_gather - m * block * 2.0, tt::tolerance(1e-12));
  BOOST_TEST(t.fsdp_reduce_bytes == m * (root + L * block) * 4.0, tt::tolerance(1e-12));
  BOOST_TEST(t.tp_bytes == 0.0);
  // The communication stream is busy exactly one block's gather per micro-batch less.
  const CommGroup all{8, 1, 1};
  const double one_gather =
      CostModel(device, profile.params).collective_seconds(CollectiveKind::kAllGather, block * 2.0, all);
  BOOST_TEST(a.timeline.comm_s - b.timeline.comm_s == m * one_gather, tt::tolerance(1e-9));
}

BOOST_FIXTURE_TEST_CASE(float8_all_gathers_move_one_byte_per_linear_weight, Fixture) {
  TorchtitanEvaluator e(model, device, profile.params);
  const TrainConfig bf16 = titan(8, 1, 1, 64, 4), fp8 = titan(8, 1, 1, 64, 4, Precision::kAmpFp8);
  BOOST_REQUIRE(why(fp8).empty());
  const double dm = 1024, q = 1024, kv = 512, ffn = 3584;
  const double linear = dm * (q + 2.0 * kv) + q * dm + 3.0 * dm * ffn;  // wq wk wv wo w1 w2 w3
  const double block = static_cast<double>(layer_parameter_count(model));
  const double L = 8, m = 2;
  const double saved = m * (2.0 * L - 1.0) * linear;  // a byte per linear weight per block gather
  BOOST_TEST(e.traffic(bf16).fsdp_gather_bytes - e.traffic(fp8).fsdp_gather_bytes == saved, tt::tolerance(1e-12));
  // The blocks' gathers halve but for the norms' weights (2 x 1024 of the block's parameters).
  BOOST_TEST(block - linear == 2.0 * dm);
  // Gradients are reduced in fp32 either way.
  BOOST_TEST(e.traffic(bf16).fsdp_reduce_bytes == e.traffic(fp8).fsdp_reduce_bytes);
}

BOOST_FIXTURE_TEST_CASE(tensor_parallel_two_halves_a_ranks_gemm_flops, Fixture) {
  const BlockShape full = block_shape(model, 4, 2048, Precision::kAmpBf16);
  const BlockShape half = tensor_parallel_shape(full, 2, true, model.vocab_size);
  for (auto build : {block_forward_ops, block_backward_ops, head_forward_ops, head_backward_ops})
    BOOST_TEST(2.0 * flops_of(build, half) == flops_of(build, full), tt::tolerance(1e-12));
  // The prediction: half the GEMM seconds per rank, or more (smaller GEMMs run less efficiently).
  const Prediction one = predict(model, device, profile.params, titan(8, 1, 1, 64, 4));
  const Prediction two = predict(model, device, profile.params, titan(8, 2, 1, 32, 4));
  // (Both run two micro-batches of 4 per replica.)
  BOOST_TEST(two.time.gemm_s > 0.45 * one.time.gemm_s);
  BOOST_TEST(two.time.gemm_s < one.time.gemm_s);
  // The tensor-parallel collectives: per block two all-gathers and two reduce-scatters of the
  // micro-batch's t x d bf16 activations each way, the embedding's and the output's one each way,
  // and three all-reduces of a float per token (loss parallel); two micro-batches.
  TorchtitanEvaluator e(model, device, profile.params);
  const double td = 4.0 * 2048 * 1024 * 2.0, tokens = 4.0 * 2048;
  BOOST_TEST(
      e.traffic(titan(8, 2, 1, 32, 4)).tp_bytes == 2.0 * (8.0 * 8.0 * td + 2.0 * td + 2.0 * td + 3.0 * tokens * 4.0),
      tt::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(async_tensor_parallelism_hides_collectives_behind_gemms, Fixture) {
  TrainConfig sync = titan(8, 4, 1, 16, 2), async = sync;
  async.layout.async_tensor_parallel = true;
  BOOST_REQUIRE(why(async).empty());
  const Prediction a = predict(model, device, profile.params, sync);
  const Prediction b = predict(model, device, profile.params, async);
  BOOST_TEST(b.step_s < a.step_s);
  BOOST_TEST(b.time.exposed_comm_s < a.time.exposed_comm_s);
  BOOST_TEST(b.time.gemm_s == a.time.gemm_s);
}

BOOST_FIXTURE_TEST_CASE(memory_of_a_small_case_by_hand, Fixture) {
  // tp = pp = 1 on 8 GPUs, micro-batch 2: 16 bytes per parameter over 8 ranks; the root and two
  // blocks gathered in bf16; every block's saved bytes, the embedding's and the head's; one block's
  // backward buffers beside its unsharded bf16 and fp32 gradients; then fragmentation and reserve.
  const TrainConfig c = titan(8, 1, 1, 32, 2);
  BlockShape s = block_shape(model, 2, 2048, Precision::kAmpBf16);
  s.eager_rms_norm = s.eager_rope = true;  // torchtitan's norms.py and apply_rotary_emb, run eagerly
  const double block = static_cast<double>(layer_parameter_count(model));
  const double root = static_cast<double>(embedding_parameter_count(model, 2048));
  const double state = 16.0 * (8.0 * block + root) / 8.0;
  const double gathered = (root + 2.0 * block) * 2.0;
  const double acts =
      8.0 * saved_of(block_forward_ops, s) + saved_of(embedding_forward_ops, s) + saved_of(head_forward_ops, s);
  const double transient = block_backward_buffer_bytes(model, s.tokens(), Precision::kAmpBf16) + block * (2.0 + 4.0);
  const CostParams& p = profile.params;
  const double peak = (state + gathered + acts + transient) * p.memory_fragmentation + p.memory_reserve_bytes;
  TorchtitanEvaluator e(model, device, p);
  const MemoryBreakdown mb = e.memory(c);
  BOOST_TEST(mb.sharded_state_bytes == state, tt::tolerance(1e-12));
  BOOST_TEST(mb.gathered_params_bytes == gathered, tt::tolerance(1e-12));
  BOOST_TEST(mb.activation_bytes == acts, tt::tolerance(1e-12));
  BOOST_TEST(mb.peak_bytes == peak, tt::tolerance(1e-12));

  // Full checkpointing keeps each block's input and rebuilds one block at a time.
  TrainConfig full = c;
  full.layout.checkpointing = Checkpointing::kFull;
  const double input = 2.0 * 2048 * 1024 * 2.0;
  BOOST_TEST(e.memory(full).activation_bytes == 8.0 * input + saved_of(block_forward_ops, s) +
                                                    saved_of(embedding_forward_ops, s) + saved_of(head_forward_ops, s),
             tt::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(checkpointing_modes_trade_memory_for_recompute, Fixture) {
  // none < selective 'op' < every 2nd layer < full in step time, the reverse in activations.
  TrainConfig none = titan(8, 2, 1, 32, 4), op = none, every2 = none, full = none;
  op.layout.checkpointing = every2.layout.checkpointing = Checkpointing::kSelective;
  every2.layout.selective_ac_layers = 2;
  full.layout.checkpointing = Checkpointing::kFull;
  TorchtitanEvaluator e(model, device, profile.params);
  const double t_none = e.predict(none).step_s, t_op = e.predict(op).step_s;
  const double t_every2 = e.predict(every2).step_s, t_full = e.predict(full).step_s;
  BOOST_TEST(t_none < t_op);
  BOOST_TEST(t_op < t_full);
  BOOST_TEST(t_none < t_every2);
  BOOST_TEST(t_every2 < t_full);
  const double a_none = e.memory(none).activation_bytes, a_op = e.memory(op).activation_bytes;
  const double a_every2 = e.memory(every2).activation_bytes, a_full = e.memory(full).activation_bytes;
  BOOST_TEST(a_op < a_none);
  BOOST_TEST(a_every2 < a_none);
  BOOST_TEST(a_full < a_every2);
  BOOST_TEST(a_full < a_op);
}

BOOST_FIXTURE_TEST_CASE(pipelines_gather_once_per_step_and_keep_micro_batches_in_flight, Fixture) {
  const TrainConfig piped = titan(8, 2, 2, 32, 2);  // dp 2, 8 micro-batches, 1F1B
  BOOST_REQUIRE(why(piped).empty());
  TorchtitanEvaluator e(model, device, profile.params);
  const Prediction p = e.predict(piped);
  BOOST_TEST(p.time.pipeline_bubble_s > 0.0);
  BOOST_TEST(std::isfinite(p.mfu));
  // Stage 0 gathers its 4 blocks and the embedding once and reduces them once per step.
  const TorchtitanTraffic t = e.traffic(piped);
  const double block = static_cast<double>(layer_parameter_count(model)) / 2.0;
  const double table = 32000.0 * 1024 / 2.0;
  BOOST_TEST(t.fsdp_gather_bytes == (4.0 * block + table) * 2.0, tt::tolerance(1e-12));
  BOOST_TEST(t.fsdp_reduce_bytes == (4.0 * block + table) * 4.0, tt::tolerance(1e-12));
  // Interleaved: 16 micro-batches are a multiple of the 2 stages.
  TrainConfig inter = titan(8, 2, 2, 32, 1);
  inter.layout.virtual_stages = 2;
  BOOST_REQUIRE(why(inter).empty());
  BOOST_TEST(e.predict(inter).step_s > 0.0);
}

BOOST_FIXTURE_TEST_CASE(layouts_that_cannot_run_are_one_line_errors, Fixture) {
  const auto expect = [&](TrainConfig c, const std::string& part) {
    const std::string w = why(c);
    BOOST_TEST(contains(w, part), w);
    BOOST_TEST(w.find('\n') == std::string::npos);
  };
  TrainConfig c = titan(8, 2, 1, 16, 1);
  c.layout.context = 2;
  c.seq_len = 2046;
  expect(c, "context parallel 2 does not split the sequence length 2046 into 4 equal chunks");
  c.seq_len = 2052;  // 4 chunks, but tp 2 x 2 x cp 2 does not divide it
  expect(c, "sequence length 2052 is not a multiple of tensor parallel 2 x 2 x context parallel 2");
  c = titan(8, 1, 1, 16, 1);
  c.layout.expert = 2;
  expect(c, "expert parallelism (2) is not modelled yet under torchtitan");
  expect(titan(24, 3, 1, 24, 1), "tensor parallel 3 does not divide the 16 attention heads");
  expect(titan(32, 1, 16, 32, 1), "pipeline parallel 16 is more stages than the 8 layers");
  expect(titan(8, 2, 1, 16, 3), "micro-batch 3 does not divide the 4 sequences per data-parallel rank (torchtitan");
  c = titan(8, 2, 1, 16, 1);
  c.layout.sequence_parallel = false;
  expect(c, "without sequence parallelism (--no-sp) under torchtitan");
  c = titan(8, 1, 1, 16, 1);
  c.layout.async_tensor_parallel = true;
  expect(c, "async tensor parallelism needs tensor parallel > 1");
  c = titan(8, 1, 1, 16, 1);
  c.layout.selective_ac_layers = 2;
  expect(c, "selective_ac_option 2 applies to selective checkpointing only");
  c = titan(8, 1, 1, 16, 1);
  c.layout.overlap_grad_reduce = true;
  expect(c, "--overlap-grad-reduce is megatron's");
  c = titan(8, 2, 1, 16, 1);
  c.layout.framework = Framework::kMegatron;
  c.layout.async_tensor_parallel = true;
  BOOST_TEST(first_broken_rule(model, device, profile.params, c).rule == "option-owned");
  ModelCatalog catalog = ModelCatalog::load_default();
  Fixture moe;
  moe.model = catalog.get("mixtral-8x7b");
  const std::string w = moe.why(titan(8, 1, 1, 16, 1));
  BOOST_TEST(contains(w, "mixture-of-experts models under torchtitan are not modelled yet"), w);
}

namespace {

double category_flops(void (*build)(const BlockShape&, OpSink&), const BlockShape& s, OpCategory category) {
  OpList ops;
  build(s, ops);
  double f = 0;
  for (const Op& op : ops)
    if (op.category == category) f += op.flops;
  return f;
}

TrainConfig with_context(TrainConfig c, int64_t cp) {
  c.layout.context = cp;
  return c;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(context_parallel_two_halves_a_ranks_gemm_flops_and_activations, Fixture) {
  // Same data-parallel degree (4) and micro-batches; cp 2 doubles the GPUs and gives each rank half
  // of every sequence's tokens.
  const TrainConfig one = titan(4, 1, 1, 16, 2), two = with_context(titan(8, 1, 1, 16, 2), 2);
  BOOST_REQUIRE(why(one).empty());
  BOOST_REQUIRE(why(two).empty());
  const BlockShape full = rank_shape(model, one, model.vocab_size);
  const BlockShape half = rank_shape(model, two, model.vocab_size);
  BOOST_TEST(half.tokens() * 2 == full.tokens());
  for (auto build : {block_forward_ops, block_backward_ops, head_forward_ops, head_backward_ops})
    BOOST_TEST(2.0 * category_flops(build, half, OpCategory::kGemm) == category_flops(build, full, OpCategory::kGemm),
               tt::tolerance(1e-12));
  // The ring's two steps, each a causal attention over the rank's s/2 tokens, do half the
  // sequence's causal attention (up to the diagonal's share).
  BOOST_TEST(2.0 * 2.0 * category_flops(block_forward_ops, half, OpCategory::kAttention) ==
                 category_flops(block_forward_ops, full, OpCategory::kAttention),
             tt::tolerance(1e-3));
  TorchtitanEvaluator e(model, device, profile.params);
  const MemoryBreakdown a = e.memory(one), b = e.memory(two);
  BOOST_TEST(b.activation_bytes == 0.5 * a.activation_bytes, tt::tolerance(1e-12));
  // The FSDP2 shard group doubles with cp (dp_shard x cp = 8): half the sharded state per rank.
  BOOST_TEST(b.sharded_state_bytes == 0.5 * a.sharded_state_bytes, tt::tolerance(1e-12));
  const Prediction p1 = e.predict(one), p2 = e.predict(two);
  BOOST_TEST(p2.time.gemm_s < p1.time.gemm_s);
  BOOST_TEST(p2.time.gemm_s > 0.45 * p1.time.gemm_s);
}

BOOST_FIXTURE_TEST_CASE(context_parallel_all_gathers_kv_and_rings_fp32_dkv, Fixture) {
  // torchtitan's default rotate method: the K/V of the cp ranks all-gathered once per pass, the
  // fp32 dK/dV passed around the ring cp times in the backward.
  const TrainConfig c = with_context(titan(8, 1, 1, 16, 2), 4);  // dp 2; 2048 / 4 = 512 tokens per rank
  BOOST_REQUIRE(why(c).empty());
  const BlockShape local = rank_shape(model, c, model.vocab_size);
  const double t = 2.0 * 512, kv = 512;  // micro-batch x local tokens; 8 K/V heads of 64
  BOOST_REQUIRE(local.tokens() == 1024);
  const CostModel cost(device, profile.params);
  const CommGroup ring = strided_group(4, 1, device.gpus_per_node);
  const ContextParallelAttention a = torchtitan_context_parallel(cost, local, 4, ring);
  BOOST_TEST(a.kv_gather_bytes == 4.0 * 2.0 * t * kv * 2.0);  // 4 ranks' K and V in bf16
  BOOST_TEST(a.dkv_hop_bytes == 2.0 * t * kv * 4.0);          // the rank's dK and dV in fp32
  BOOST_TEST(a.kv_gather_s == cost.collective_seconds(CollectiveKind::kAllGather, a.kv_gather_bytes, ring));
  BOOST_TEST(a.dkv_hop_s == ring_step_seconds(cost, a.dkv_hop_bytes, ring));
  BOOST_TEST(a.fwd_exposed_s == std::max(a.kv_gather_s - a.step_fwd_s, 0.0));
  BOOST_TEST(a.bwd_exposed_s == std::max(a.kv_gather_s - a.step_bwd_s, 0.0) +
                                    3.0 * std::max(a.dkv_hop_s - a.step_bwd_s, 0.0) + a.dkv_hop_s,
             tt::tolerance(1e-12));
  BOOST_TEST(a.step_fwd_s == ring_attention(cost, local, 4, ring).step_fwd_s);
  const ContextParallelAttention none = torchtitan_context_parallel(cost, local, 1, CommGroup{});
  BOOST_TEST(none.kv_gather_bytes == 0.0);
  BOOST_TEST(none.bwd_exposed_s == 0.0);
  // Per step: every block of the four micro-batches (16 / 2 replicas / 2) gathers twice and sends
  // four hops; full recompute gathers once more.
  TorchtitanEvaluator e(model, device, profile.params);
  const double L = 8, m = 4;
  BOOST_TEST(e.traffic(c).cp_bytes == m * L * (2.0 * a.kv_gather_bytes + 4.0 * a.dkv_hop_bytes), tt::tolerance(1e-12));
  TrainConfig full = c;
  full.layout.checkpointing = Checkpointing::kFull;
  BOOST_TEST(e.traffic(full).cp_bytes == m * L * (3.0 * a.kv_gather_bytes + 4.0 * a.dkv_hop_bytes),
             tt::tolerance(1e-12));
  BOOST_TEST(e.traffic(titan(8, 1, 1, 16, 2)).cp_bytes == 0.0);
}

BOOST_FIXTURE_TEST_CASE(fsdp2_shards_over_dp_shard_times_cp, Fixture) {
  // 16 GPUs, tp 2, cp 2: dp 4, FSDP2's dp_shard_cp group is 8 ranks, 2 apart (two nodes of 8).
  const TrainConfig c = with_context(titan(16, 2, 1, 16, 1), 2);
  BOOST_REQUIRE(why(c).empty());
  TorchtitanMesh mesh;
  BOOST_REQUIRE(resolve_torchtitan_mesh(c, device.gpus_per_node, &mesh).empty());
  BOOST_TEST(mesh.dp_shard == 4);
  BOOST_TEST(mesh.dp_replicate == 1);
  BOOST_TEST(mesh.shard_ranks() == 8);
  BOOST_TEST(mesh.shard_group.ranks == 8);
  BOOST_TEST(mesh.shard_group.nodes == 2);
  BOOST_TEST(mesh.shard_group.groups_per_node == 2);
  TorchtitanEvaluator e(model, device, profile.params);
  const double block = static_cast<double>(layer_parameter_count(model)) / 2.0;
  const double root = static_cast<double>(embedding_parameter_count(model, 2048)) / 2.0;
  BOOST_TEST(e.memory(c).sharded_state_bytes == 16.0 * (8.0 * block + root) / 8.0, tt::tolerance(1e-12));
  // Each block's gather and reduce-scatter buffers are its tp slice, whatever the group.
  const double m = 4;  // 16 / 4 replicas, micro-batch 1
  BOOST_TEST(e.traffic(c).fsdp_reduce_bytes == m * (root + 8.0 * block) * 4.0, tt::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(hsdp_all_reduces_the_gradient_shards_over_the_replicas, Fixture) {
  // 16 GPUs, data_parallel_replicate_degree 2: dp_shard 8 (one node each), replicas 8 ranks apart.
  TrainConfig c = titan(16, 1, 1, 32, 2);
  c.layout.replicate_degree = 2;
  BOOST_REQUIRE(why(c).empty());
  TorchtitanMesh mesh;
  BOOST_REQUIRE(resolve_torchtitan_mesh(c, device.gpus_per_node, &mesh).empty());
  BOOST_TEST(mesh.dp_shard == 8);
  BOOST_TEST(mesh.replicate_group.ranks == 2);
  BOOST_TEST(mesh.replicate_group.nodes == 2);
  BOOST_TEST(mesh.shard_group.nodes == 1);
  TorchtitanEvaluator e(model, device, profile.params);
  const double block = static_cast<double>(layer_parameter_count(model));
  const double root = static_cast<double>(embedding_parameter_count(model, 2048));
  const double L = 8, m = 1;  // 32 / 16 replicas, micro-batch 2
  const TorchtitanTraffic t = e.traffic(c);
  BOOST_TEST(t.fsdp_reduce_bytes == m * (root + L * block) * 4.0, tt::tolerance(1e-12));
  BOOST_TEST(t.fsdp_replicate_bytes == m * (root + L * block) * 4.0 / 8.0, tt::tolerance(1e-12));
  BOOST_TEST(t.fsdp_gather_bytes == m * (root + (2.0 * L - 1.0) * block) * 2.0, tt::tolerance(1e-12));
  BOOST_TEST(e.memory(c).sharded_state_bytes == 16.0 * (L * block + root) / 8.0, tt::tolerance(1e-12));
  // Without replicas the same 16 ranks shard everything and all-reduce nothing.
  TrainConfig flat = c;
  flat.layout.replicate_degree = 0;
  BOOST_TEST(e.traffic(flat).fsdp_replicate_bytes == 0.0);
  BOOST_TEST(e.memory(flat).sharded_state_bytes == 16.0 * (L * block + root) / 16.0, tt::tolerance(1e-12));
  // Against one replica alone (8 GPUs, the same shard group and micro-batches): the communication
  // stream is busy longer by the all-reduce of each block's and the root's gradient shard.
  const CostModel cost(device, profile.params);
  const auto all_reduce = [&](double params) {
    return cost.collective_seconds(CollectiveKind::kAllReduce, params * 4.0 / 8.0, mesh.replicate_group);
  };
  const Prediction hsdp = e.predict(c), one_replica = e.predict(titan(8, 1, 1, 16, 2));
  BOOST_TEST(hsdp.timeline.comm_s - one_replica.timeline.comm_s == m * (L * all_reduce(block) + all_reduce(root)),
             tt::tolerance(1e-9));
  // Degrees that do not multiply to the GPU count, and replicas with nothing to shard.
  c.layout.shard_degree = 4;
  BOOST_TEST(contains(why(c),
                      "data_parallel_replicate_degree 2 x data_parallel_shard_degree 4 x context 1 x tensor 1 "
                      "x pipeline 1 = 8 is not the GPU count 16"),
             why(c));
  c.layout.shard_degree = 1;
  c.layout.replicate_degree = 16;
  BOOST_TEST(contains(why(c), "torchtitan's DDP (apply_ddp), not modelled yet"), why(c));
}

BOOST_FIXTURE_TEST_CASE(the_search_runs_torchtitan_layouts, Fixture) {
  SearchSpace space;
  space.asked.framework = Framework::kTorchtitan;
  space.checkpointing = {kAllCheckpointings.begin(), kAllCheckpointings.end()};
  const TrainConfig base{.seq_len = 2048, .global_batch = 64, .n_gpus = 8};
  const SearchResult r = search(model, device, profile.params, base, space, SearchGoal::kAllThatFit);
  BOOST_TEST(r.found);
  bool tp = false, pp = false, selective = false;
  for (const Candidate& c : r.fitting) {
    BOOST_TEST((c.cfg.layout.framework == Framework::kTorchtitan));
    tp = tp || c.cfg.layout.tensor > 1;
    pp = pp || c.cfg.layout.pipeline > 1;
    selective = selective || c.cfg.layout.checkpointing == Checkpointing::kSelective;
    BOOST_TEST(c.prediction.step_s == predict(model, device, profile.params, c.cfg).step_s);
  }
  BOOST_TEST(tp);
  BOOST_TEST(pp);
  BOOST_TEST(selective);
}

BOOST_FIXTURE_TEST_CASE(the_search_takes_context_parallel_and_the_hsdp_degrees, Fixture) {
  SearchSpace space;
  space.asked.framework = Framework::kTorchtitan;
  space.asked.replicate_degree = 2;
  const TrainConfig base{.seq_len = 16384, .global_batch = 16, .n_gpus = 16};
  const SearchResult r = search(model, device, profile.params, base, space, SearchGoal::kAllThatFit);
  BOOST_TEST(r.found);
  bool cp = false;
  for (const Candidate& c : r.fitting) {
    BOOST_TEST(c.cfg.layout.replicate_degree == 2);
    cp = cp || c.cfg.layout.context > 1;
    BOOST_TEST(c.prediction.step_s == predict(model, device, profile.params, c.cfg).step_s);
  }
  BOOST_TEST(cp);
}

BOOST_AUTO_TEST_CASE(the_command_line_runs_torchtitan_and_refuses_other_frameworks_flags) {
  using tpsim::testing::run_tpsim;
  const std::string p = "predict --model llama-3.1-8b --seq 8192 --gpus 16 --micro-batch 1 --global-batch 32 ";
  const auto ok = run_tpsim(p +
                            "--framework torchtitan --tp 2 --pp 2 --async-tp --ckpt selective "
                            "--selective-ac-option 2 --format csv");
  BOOST_TEST(ok.status == 0, ok.err);
  // Its data parallelism is FSDP2: the row's sharding strategy is FULL_SHARD.
  BOOST_TEST(contains(ok.out, ",FULL_SHARD,selective,"), ok.out);
  // Context parallelism and HSDP's degrees (the layout columns: tp, pp, vp, cp, ep, dp).
  const auto cp = run_tpsim(p + "--framework torchtitan --cp 2 --replicate-degree 2 --format csv");
  BOOST_TEST(cp.status == 0, cp.err);
  BOOST_TEST(contains(cp.out, ",1,1,1,2,1,8,"), cp.out);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {p + "--framework megatron --tp 2 --async-tp", "--async-tp: torchtitan's option; use --framework torchtitan"},
      {p + "--selective-ac-option op", "--selective-ac-option: torchtitan's option"},
      {p + "--framework torchtitan --no-dist-opt", "--no-dist-opt: megatron's option"},
      {p + "--framework torchtitan --overlap-grad-reduce", "--overlap-grad-reduce: megatron's option"},
      {p + "--framework torchtitan --sharding NO_SHARD", "--sharding: --framework torchtitan shards with FSDP2"},
      {p + "--framework torchtitan --selective-ac-option two", "--selective-ac-option 'two'"},
      {p + "--framework torchtitan --selective-ac-option 2",
       "selective_ac_option 2 applies to selective checkpointing only"},
      {"predict --model llama-3.1-8b --seq 8194 --gpus 16 --micro-batch 1 --global-batch 32 --framework torchtitan "
       "--cp 2",
       "context parallel 2 does not split the sequence length 8194 into 4 equal chunks"},
      {p + "--framework torchtitan --replicate-degree 3", "data_parallel_replicate_degree 3 does not divide the 16"},
      {p + "--framework torchtitan --cp 2 --shard-degree 4",
       "data_parallel_replicate_degree 1 x data_parallel_shard_degree 4 x context 2 x tensor 1 x pipeline 1 = 8 is "
       "not the GPU count 16"},
      {p + "--framework torchtitan --replicate-degree -1", "data_parallel_replicate_degree -1 is outside 1.."},
      {p + "--framework megatron --replicate-degree 2", "--replicate-degree: HSDP's shard and replicate degrees are"},
      {p + "--framework torchtitan --async-tp", "async tensor parallelism needs tensor parallel > 1"},
  };
  for (const auto& [args, message] : cases) {
    BOOST_TEST_CONTEXT(args) {
      const auto r = run_tpsim(args);
      BOOST_TEST(r.status != 0);
      BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      BOOST_TEST(contains(r.err, message), r.err);
    }
  }
  // sweep and plan search torchtitan's layouts.
  const auto sweep = run_tpsim("sweep --models llama-3.1-8b --seq 8192 --gpus 16 --framework torchtitan --format csv");
  BOOST_TEST(sweep.status == 0, sweep.err);
  BOOST_TEST(contains(sweep.out, "FULL_SHARD"), sweep.out);
  const auto plan = run_tpsim("plan --model llama-3.1-8b --seq 8192 --gpus 16 --framework torchtitan --ckpt any");
  BOOST_TEST(plan.status == 0, plan.err);
}

BOOST_AUTO_TEST_CASE(keeping_the_last_block_gathered_skips_the_steady_state_exactly) {
  // The FSDP schedule's steady-state skip against stepping through every block, with FSDP2's last
  // block kept gathered into its backward, for gathers shorter and longer than the compute.
  for (double gather : {0.2e-3, 3e-3}) {
    StepCosts c;
    c.n_layers = 24;
    c.n_micro = 5;
    MicroBatchCosts& m = c.full;
    m.embed_fwd_s = 0.1e-3, m.block_fwd_s = 1e-3, m.head_s = 2e-3, m.block_bwd_s = 2e-3, m.embed_bwd_s = 0.1e-3;
    m.root_gather_s = 0.5e-3, m.root_reduce_s = 0.8e-3;
    m.block_gather_fwd_s = m.block_gather_bwd_s = gather;
    m.block_reduce_s = 1.5 * gather;
    m.overhead_s = 0.05e-3, m.block_overhead_s = 0.01e-3;
    m.last_block_regathered = false;
    c.last = m;
    c.optimizer_s = 5e-3;
    c.overlap_slowdown = 0.1;
    const Timeline fast = simulate_step(c);
    c.skip_steady_state = false;
    const Timeline slow = simulate_step(c);
    BOOST_TEST(fast.step_s == slow.step_s, tt::tolerance(1e-12));
    BOOST_TEST(fast.comm_s == slow.comm_s, tt::tolerance(1e-12));
    // One gather fewer per micro-batch than with the last block resharded.
    c.full.last_block_regathered = c.last.last_block_regathered = true;
    BOOST_TEST(simulate_step(c).comm_s - slow.comm_s == 5.0 * gather, tt::tolerance(1e-9));
  }
}
