// Megatron-LM layouts: tensor-parallel shapes, the FLOPs and memory of a rank against hand-computed
// cases, the rank groups, context and expert parallelism, and the layouts that cannot run.
#define BOOST_TEST_MODULE megatron
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>

#include "common.hpp"
#include "io/measured_table.hpp"
#include "model/layout.hpp"
#include "model/megatron.hpp"
#include "model/ops.hpp"
#include "model/parallelism.hpp"
#include "model/rules.hpp"
#include "model/simulator.hpp"

using namespace tpsim;
using tpsim::test::contains;
namespace tt = boost::test_tools;

namespace {

// A Megatron GPT of vTrain's runs: hidden 1024, 16 heads, 24 layers, GPT-2's vocabulary.
ModelConfig gpt_1024() {
  ModelConfig m = test::gpt2();
  m.name = "gpt-h1024-l24";
  m.d_model = 1024;
  m.n_heads = 16;
  m.n_layers = 24;
  return m;
}

TrainConfig megatron(int64_t gpus, int64_t tp, int64_t pp, int64_t global_batch, int64_t micro_batch) {
  TrainConfig c{.seq_len = 1024,
                .global_batch = global_batch,
                .micro_batch = micro_batch,
                .n_gpus = gpus,
                .precision = Precision::kAmpFp16};
  c.layout.framework = Framework::kMegatron;
  c.layout.tensor = tp;
  c.layout.pipeline = pp;
  return c;
}

struct Fixture {
  DeviceSpec device = load_device("a100_80gb");
  DeviceProfile profile = load_shipped_profile("a100_80gb");
};

double flops_of(void (*build)(const BlockShape&, OpSink&), const BlockShape& s) {
  OpList ops;
  build(s, ops);
  return total_flops(ops);
}
double saved_of(const BlockShape& s) {
  OpList ops;
  block_forward_ops(s, ops);
  return total_saved_bytes(ops);
}

}  // namespace

BOOST_AUTO_TEST_CASE(tensor_parallelism_divides_every_flop_of_a_block) {
  // Column- and row-parallel linears and the attention heads split exactly; nothing else has FLOPs.
  const BlockShape full = block_shape(gpt_1024(), 2, 1024, Precision::kAmpBf16);
  for (int64_t tp : {2, 4, 8}) {
    const BlockShape part = tensor_parallel_shape(full, tp, false, megatron_padded_vocab(50257, tp));
    BOOST_TEST(flops_of(block_forward_ops, part) * static_cast<double>(tp) == flops_of(block_forward_ops, full),
               tt::tolerance(1e-12));
    BOOST_TEST(flops_of(block_backward_ops, part) * static_cast<double>(tp) == flops_of(block_backward_ops, full),
               tt::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(megatron_pads_the_vocabulary_to_whole_slices) {
  // --make-vocab-size-divisible-by 128, times the tensor-parallel degree.
  BOOST_TEST(megatron_padded_vocab(50257, 1) == 50304);
  BOOST_TEST(megatron_padded_vocab(50257, 2) == 50432);
  BOOST_TEST(megatron_padded_vocab(50257, 8) == 51200);
  // Without tensor parallelism too: the logits run over 50304 columns.
  const BlockShape one = tensor_parallel_shape(block_shape(gpt_1024(), 2, 1024, Precision::kAmpBf16), 1, false,
                                               megatron_padded_vocab(50257, 1));
  BOOST_TEST(one.vocab == 50304);
}

BOOST_AUTO_TEST_CASE(activations_follow_korthikanti_with_and_without_sequence_parallelism) {
  // Korthikanti et al. 2022 (Eq. 3 and 4) without dropout and with flash attention: a block keeps
  // s*b*h*(10 + 22/t) bytes under tensor parallelism (the two norms' inputs and the two linears'
  // inputs that read them stay whole: 4 + 4 of the 10; MPT-style blocks have no dropout masks, so
  // 8 here) and s*b*h*30/t with sequence parallelism, plus the norms' fp32 statistics and the
  // attention's log-sum-exp.
  const BlockShape full = block_shape(gpt_1024(), 2, 1024, Precision::kAmpBf16);
  const double sbh = 2.0 * 1024.0 * 1024.0;
  const double tokens = 2.0 * 1024.0;
  const double stats = 2.0 * tokens * 8.0;       // two LayerNorms' mean and rstd
  const double lse = 2.0 * 16.0 * 1024.0 * 4.0;  // log-sum-exp per head and row
  BOOST_TEST(saved_of(full) == sbh * 32.0 + stats + lse, tt::tolerance(1e-12));
  for (int64_t t : {2, 4, 8}) {
    const double td = static_cast<double>(t);
    const BlockShape tp = tensor_parallel_shape(full, t, false, megatron_padded_vocab(50257, t));
    const BlockShape sp = tensor_parallel_shape(full, t, true, megatron_padded_vocab(50257, t));
    BOOST_TEST(saved_of(tp) == sbh * (8.0 + 24.0 / td) + stats + lse / td, tt::tolerance(1e-12));
    BOOST_TEST(saved_of(sp) == sbh * 32.0 / td + stats / td + lse / td, tt::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(rank_groups_follow_megatrons_order) {
  // 64 GPUs on nodes of 8, tp 4, pp 4, dp 4: tensor groups inside a node; a data-parallel group
  // strides 4 ranks (two of its members per node, over two nodes, four groups sharing a node's NICs);
  // stage boundaries are 16 ranks apart, across nodes.
  Layout par;
  par.framework = Framework::kMegatron;
  par.tensor = 4;
  par.pipeline = 4;
  const ModelParallelLayout l = model_parallel_layout(par, 64, 8);
  BOOST_TEST(l.dp == 4);
  BOOST_TEST(l.tp_group.ranks == 4);
  BOOST_TEST(l.tp_group.nodes == 1);
  BOOST_TEST(l.dp_group.ranks == 4);
  BOOST_TEST(l.dp_group.nodes == 2);
  BOOST_TEST(l.dp_group.groups_per_node == 4);
  BOOST_TEST(l.stage_link_crosses_nodes);
  // One node: everything inside it.
  const ModelParallelLayout one = model_parallel_layout(par, 16, 8);
  BOOST_TEST(one.dp == 1);
  BOOST_TEST(one.stage_link_crosses_nodes);  // stages 4 ranks apart: pp 4 spans two nodes
  par.pipeline = 2;
  BOOST_TEST(!model_parallel_layout(par, 8, 8).stage_link_crosses_nodes);
  // pp 4, dp 2 on one node of 8: the tied embedding's group pairs ranks 0 and 6 (and 1 and 7), six
  // apart but inside the node (vTrain's single-node rows were costed across nodes before).
  Layout deep;
  deep.framework = Framework::kMegatron;
  deep.pipeline = 4;
  const ModelParallelLayout d8 = model_parallel_layout(deep, 8, 8);
  BOOST_TEST(d8.embedding_group.ranks == 2);
  BOOST_TEST(d8.embedding_group.nodes == 1);
  // On 16 GPUs (dp 4) the pairs are 12 apart: ranks 0-3 with 12-15, across two nodes.
  const ModelParallelLayout d16 = model_parallel_layout(deep, 16, 8);
  BOOST_TEST(d16.embedding_group.nodes == 2);
  BOOST_TEST(d16.embedding_group.groups_per_node == 4);
  // tp 2, cp 2, ep 4 on 64 GPUs (dp 16): the context ranks 2 apart; the gradient group all dp x cp =
  // 32 ranks 2 apart (four per node, eight nodes, two groups per node); the ep ranks 2 apart inside a
  // node (the expert generator: expert tensor parallel 2, then ep); the expert-data-parallel group the
  // 32 / 4 = 8 ranks 8 apart, one per node, every GPU of a node in its own.
  Layout moe;
  moe.framework = Framework::kMegatron;
  moe.tensor = 2;
  moe.context = 2;
  moe.expert = 4;
  const ModelParallelLayout m = model_parallel_layout(moe, 64, 8);
  BOOST_TEST(m.dp == 16);
  BOOST_TEST((m.cp_group.ranks == 2 && m.cp_group.nodes == 1));
  BOOST_TEST((m.dp_group.ranks == 32 && m.dp_group.nodes == 8 && m.dp_group.groups_per_node == 2));
  BOOST_TEST((m.ep_group.ranks == 4 && m.ep_group.nodes == 1));
  BOOST_TEST((m.expert_dp_group.ranks == 8 && m.expert_dp_group.nodes == 8 && m.expert_dp_group.groups_per_node == 8));
}

BOOST_AUTO_TEST_CASE(legacy_scatter_gather_sends_a_tp_th_of_the_activations_and_gathers_them) {
  // tp 8, pp 2 on 16 GPUs: each stage one node, the hop over the NICs that all 8 ranks of a node
  // share. One micro-batch of 2 x 2,048 tokens of hidden 8,192 in fp16: 67,108,864 bytes.
  Fixture f;
  const CostModel cost(f.device, f.profile.params);
  const CostParams& p = f.profile.params;
  Layout par;
  par.framework = Framework::kMegatron;
  par.tensor = 8;
  par.pipeline = 2;
  const ModelParallelLayout l = model_parallel_layout(par, 16, 8);
  BOOST_TEST_REQUIRE(l.stage_link_crosses_nodes);
  BOOST_TEST_REQUIRE(l.stage_link_sharers == 8);
  const double td = 2.0 * 2048 * 8192 * 2;
  const double nic = f.device.inter_node_bytes_per_s * p.inter_node_link_efficiency / 8.0;
  // Megatron-Core (and legacy Megatron without the option): every rank sends the whole tensor.
  BOOST_TEST(pipeline_send_seconds(cost, l, par, td) == td / nic + p.inter_node_latency_s, tt::tolerance(1e-12));
  // The scatter-gather: an eighth each, then an all-gather of the whole over the node's tp group.
  par.pipeline_scatter_gather = true;
  const double gather = cost.collective_seconds(CollectiveKind::kAllGather, td, l.tp_group);
  BOOST_TEST(gather > 0.0);
  BOOST_TEST(pipeline_send_seconds(cost, l, par, td) == td / 8.0 / nic + p.inter_node_latency_s + gather,
             tt::tolerance(1e-12));
  BOOST_TEST(pipeline_send_seconds(cost, l, par, td) < 0.25 * (td / nic));
  // Under sequence parallelism the rank holds a tp-th already: the option changes nothing.
  par.sequence_parallel = true;
  const double sp = pipeline_send_seconds(cost, l, par, td);
  par.pipeline_scatter_gather = false;
  BOOST_TEST(pipeline_send_seconds(cost, l, par, td) == sp);
  BOOST_TEST(sp == td / 8.0 / nic + p.inter_node_latency_s, tt::tolerance(1e-12));
  // One stage: no hop.
  par.pipeline = 1;
  par.pipeline_scatter_gather = true;
  BOOST_TEST(pipeline_send_seconds(cost, model_parallel_layout(par, 16, 8), par, td) == 0.0);
  // A whole step: legacy Megatron's GPT of Narayanan et al.'s 39.1B shape on 16 GPUs is faster with
  // the option, and the option is refused outside megatron.
  ModelConfig m = gpt_1024();
  m.d_model = 8192, m.n_heads = 64, m.n_layers = 4, m.max_positions = 2048;
  TrainConfig cfg = megatron(16, 8, 2, 16, 2);
  cfg.seq_len = 2048;
  cfg.layout.checkpointing = Checkpointing::kFull;
  MegatronEvaluator ev(m, f.device, f.profile.params);
  BOOST_TEST_REQUIRE(check_config(m, f.device, f.profile.params, cfg) == "");
  const double plain = ev.predict(cfg).step_s;
  cfg.layout.pipeline_scatter_gather = true;
  BOOST_TEST(ev.predict(cfg).step_s < plain);
  cfg.layout = {};
  cfg.layout.pipeline_scatter_gather = true;
  BOOST_TEST(first_broken_rule(m, f.device, f.profile.params, cfg).rule == "option-owned");
}

BOOST_FIXTURE_TEST_CASE(memory_of_a_stage_is_its_parameters_and_in_flight_activations, Fixture) {
  // tp 2, pp 2, dp 2 on 8 GPUs, no checkpointing, 8 micro-batches: the first stage holds 12 layers
  // and the padded embedding, each parameter with 2 + 2 (fp16 gradients) + 12 bytes; it keeps 2
  // micro-batches in flight (1F1B: p - s for stage 0).
  const ModelConfig m = gpt_1024();
  TrainConfig c = megatron(8, 2, 2, 32, 2);
  BOOST_TEST_REQUIRE(check_config(m, device, profile.params, c).empty());
  MegatronEvaluator e(m, device, profile.params);
  const MemoryBreakdown mem = e.memory(c);
  const double block = static_cast<double>(layer_parameter_count(m)) / 2.0;
  const double embedding = (50432.0 * 1024.0) / 2.0 + 1024.0 * 1024.0;  // padded slice + positions
  const double first_stage = 12.0 * block + embedding;
  const double last_stage = 12.0 * block + 2.0 * 1024.0 + 50432.0 * 1024.0 / 2.0;  // final norm, embedding copy
  const double params = std::max(first_stage, last_stage);
  const BlockShape s = tensor_parallel_shape(block_shape(m, 2, 1024, Precision::kAmpFp16), 2, false, 50432);
  const double activations_first = 2.0 * 12.0 * saved_of(s);
  BOOST_TEST(mem.sharded_state_bytes == 16.0 * params, tt::tolerance(1e-9));
  BOOST_TEST(mem.activation_bytes >= activations_first);
  // The distributed optimizer shards the 12 bytes of master weights and moments over dp.
  c.layout.distributed_optimizer = true;
  BOOST_TEST(e.memory(c).sharded_state_bytes == (4.0 + 12.0 / 2.0) * params, tt::tolerance(1e-9));
  // Full recompute keeps only each layer's input (and, on the last stage, the head's fp32 softmax
  // of the cross-entropy for the micro-batch in flight).
  c.layout.distributed_optimizer = false;
  c.layout.checkpointing = Checkpointing::kFull;
  BlockShape megatron_head = s;
  megatron_head.fp32_vocab_parallel_xent = true;
  OpList head;
  head_forward_ops(megatron_head, head);
  BOOST_TEST(e.memory(c).activation_bytes < mem.activation_bytes / 4.0 + total_saved_bytes(head));
}

BOOST_FIXTURE_TEST_CASE(more_pipeline_stages_add_bubble_and_tensor_parallelism_adds_communication, Fixture) {
  const ModelConfig m = gpt_1024();
  const Prediction one = predict(m, device, profile.params, megatron(2, 1, 1, 16, 4));
  const Prediction piped = predict(m, device, profile.params, megatron(2, 1, 2, 16, 4));
  const Prediction split = predict(m, device, profile.params, megatron(2, 2, 1, 16, 4));
  BOOST_TEST(one.time.pipeline_bubble_s == 0.0, tt::tolerance(1e-9));
  BOOST_TEST(piped.time.pipeline_bubble_s > 0.0);
  BOOST_TEST(split.time.exposed_comm_s > one.time.exposed_comm_s);
  for (const Prediction* p : {&one, &piped, &split}) {
    const StepBreakdown& b = p->time;
    const double parts = b.gemm_s + b.attention_s + b.other_compute_s + b.exposed_comm_s + b.optimizer_s +
                         b.overhead_s + b.pipeline_bubble_s;
    BOOST_TEST(parts == p->step_s, tt::tolerance(1e-6));
    BOOST_TEST(std::isfinite(p->mfu));
  }
  // Two stages on two GPUs beat one GPU's pair of data-parallel replicas only by what they save in
  // gradient traffic; both are of the same order.
  BOOST_TEST(piped.step_s < 2.0 * one.step_s);
}

BOOST_FIXTURE_TEST_CASE(layouts_that_cannot_run_are_one_line_errors, Fixture) {
  const ModelConfig m = gpt_1024();
  const auto why = [&](const TrainConfig& c) { return check_config(m, device, profile.params, c); };
  TrainConfig c = megatron(24, 3, 1, 24, 1);
  BOOST_TEST(contains(why(c), "does not divide the 16 attention heads"));
  c = megatron(64, 1, 32, 64, 1);
  BOOST_TEST(contains(why(c), "more stages than the 24 layers"));
  c = megatron(40, 1, 5, 40, 1);
  BOOST_TEST(contains(why(c), "does not divide the 24 layers"));
  c = megatron(12, 8, 1, 12, 1);
  BOOST_TEST(first_broken_rule(m, device, profile.params, c).rule == "degrees-divide-gpus");
  c = megatron(8, 2, 1, 16, 3);
  BOOST_TEST(contains(why(c), "micro-batch 3 does not divide"));
  c = megatron(8, 2, 1, 8, 1);
  c.layout.context = 2;
  c.seq_len = 1022;  // 1022 tokens do not split into 4 equal chunks
  BOOST_TEST(contains(why(c), "context parallel 2 does not split the sequence length 1022 into 4 equal chunks"));
  c.seq_len = 1024;
  c.layout.context = 1;
  c.layout.virtual_stages = 2;
  BOOST_TEST(contains(why(c), "need pipeline parallelism of at least 2"));
  c = megatron(8, 2, 1, 8, 1);
  c.layout.framework = Framework::kComposer;
  BOOST_TEST(first_broken_rule(m, device, profile.params, c).rule == "no-model-parallelism");
  c.layout.framework = Framework::kTorchtitan;
  BOOST_TEST(contains(why(c), "torchtitan is not modelled yet"));
  for (const TrainConfig& bad : {megatron(24, 3, 1, 24, 1), megatron(12, 8, 1, 12, 1)})
    BOOST_TEST(why(bad).find('\n') == std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(composer_is_unchanged_by_the_new_fields, Fixture) {
  // A composer configuration predicts exactly as before the model-parallel fields existed: the same object path.
  ModelCatalog catalog = ModelCatalog::load_default();
  const ModelConfig& m = catalog.get("1b");
  const TrainConfig c{.seq_len = 2048, .global_batch = 512, .micro_batch = 8, .n_gpus = 8};
  const Prediction a = predict(m, device, profile.params, c);
  TrainConfig same = c;
  same.layout = Layout{};
  const Prediction b = predict(m, device, profile.params, same);
  BOOST_TEST(a.step_s == b.step_s);
  BOOST_TEST(a.time.pipeline_bubble_s == 0.0);
}

BOOST_AUTO_TEST_CASE(unfused_attention_keeps_korthikantis_score_terms) {
  // Megatron's core attention without flash attention: the two batched products run over the whole
  // s x s square (4*b*h*s^2*dh FLOPs against flash's causal 2*b*h*s^2*dh), and a block keeps
  // 32*sbh + 5*a*s^2*b bytes: Korthikanti et al.'s 34*sbh + 5*a*s^2*b less the two hidden-dropout
  // masks, plus the norms' statistics (no log-sum-exp).
  ModelConfig m = gpt_1024();
  m.unfused_attention = true;
  m.attention_dropout = 0.1;
  const BlockShape s = block_shape(m, 2, 1024, Precision::kAmpFp16);
  const BlockShape flash = block_shape(gpt_1024(), 2, 1024, Precision::kAmpFp16);
  const double b = 2, seq = 1024, h = 1024, heads = 16, dh = 64;
  const double sbh = seq * b * h, stats = 2.0 * b * seq * 8.0;
  BOOST_TEST(saved_of(s) == 32.0 * sbh + 5.0 * heads * seq * seq * b + stats, tt::tolerance(1e-12));
  BOOST_TEST(flops_of(block_forward_ops, s) - flops_of(block_forward_ops, flash) == 2.0 * b * heads * seq * seq * dh,
             tt::tolerance(1e-12));
  // Selective checkpointing stops keeping exactly the score terms.
  BOOST_TEST(attention_only_saved_bytes(s) == 5.0 * heads * seq * seq * b, tt::tolerance(1e-12));
  // Without dropout only the softmax output is kept of them.
  m.attention_dropout = 0;
  BOOST_TEST(saved_of(block_shape(m, 2, 1024, Precision::kAmpFp16)) == 32.0 * sbh + 2.0 * heads * seq * seq * b + stats,
             tt::tolerance(1e-12));
}

namespace {
Op op_named(const OpList& ops, std::string_view name) {
  for (const Op& op : ops)
    if (name == op.name) return op;
  BOOST_FAIL("no op " << name);
  return Op{};
}

// Mixtral 8x7B as the catalogue gives it: d 4096, 32 heads over 8 K/V heads, 32 layers, 8 experts of
// SwiGLU width 14336, top 2, vocabulary 32000, untied embeddings.
const ModelConfig& mixtral() {
  static const ModelCatalog catalog = ModelCatalog::load_default();
  return catalog.get("mixtral-8x7b");
}

// gpt_1024 with its learned positions sized by the run's sequence (MPT's convention), for long sequences.
ModelConfig gpt_long() {
  ModelConfig m = gpt_1024();
  m.max_positions = 0;
  return m;
}

TrainConfig with_cp_ep(TrainConfig c, int64_t cp, int64_t ep) {
  c.layout.context = cp;
  c.layout.expert = ep;
  return c;
}

// The FLOPs of a block's ops other than the attention kernel.
double non_attention_flops(void (*build)(const BlockShape&, OpSink&), const BlockShape& s) {
  OpList ops;
  build(s, ops);
  double f = 0;
  for (const Op& op : ops)
    if (op.kind == OpKind::kGemm || op.kind == OpKind::kMemoryBound) f += op.flops;
  return f;
}

}  // namespace

BOOST_AUTO_TEST_CASE(context_parallelism_halves_a_ranks_flops) {
  // cp 2: every GEMM of the rank runs on s/2 tokens, and the ring's two steps, each a causal
  // attention over the rank's s/2 queries, do half the full sequence's causal attention.
  const ModelConfig m = gpt_long();
  TrainConfig c = megatron(4, 2, 1, 8, 2);
  c.seq_len = 4096;
  const int64_t vocab = megatron_padded_vocab(m.vocab_size, 2);
  const BlockShape whole = rank_shape(m, c, vocab);
  const BlockShape half = rank_shape(m, with_cp_ep(c, 2, 1), vocab);
  BOOST_TEST(half.seq == 2048);
  BOOST_TEST(half.tokens() * 2 == whole.tokens());
  for (auto build : {block_forward_ops, block_backward_ops})
    BOOST_TEST(2.0 * non_attention_flops(build, half) == non_attention_flops(build, whole), tt::tolerance(1e-12));
  const Op full_fwd = attention_op("a", OpKind::kAttentionFwd, whole);
  const Op step_fwd = attention_op("a", OpKind::kAttentionFwd, half);
  BOOST_TEST(2.0 * step_fwd.flops == full_fwd.flops / 2.0, tt::tolerance(1e-12));  // two steps, half the work
  // Hand: 2 steps x 2*b*h*(s/2)^2*dh = b*h*s^2*dh with b 2, 8 heads (16 / tp 2), dh 64.
  BOOST_TEST(2.0 * step_fwd.flops == 2.0 * 8.0 * 4096.0 * 4096.0 * 64.0, tt::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(the_ring_exchanges_k_and_v_per_step_behind_the_steps_attention, Fixture) {
  // Llama-like GQA: 8 K/V heads of 128. A rank of cp 4 holds b*s/4 = 2*8192/4 tokens; each step sends
  // their K and V: 2 * 4096 * 1024 * 2 bytes (bf16). Exposed: 3 exchanges, each beyond its step.
  const ModelConfig m = test::llama(4096, 32, 8, 32, 14336, 128256);
  TrainConfig c = megatron(4, 1, 1, 8, 2);
  c.precision = Precision::kAmpBf16;
  c.seq_len = 8192;
  const TrainConfig cp4 = with_cp_ep(c, 4, 1);
  const BlockShape local = rank_shape(m, cp4, megatron_padded_vocab(m.vocab_size, 1));
  const CostModel cost(device, profile.params);
  const ModelParallelLayout l = model_parallel_layout(cp4.layout, 4, device.gpus_per_node);
  BOOST_TEST(l.cp_group.ranks == 4);
  BOOST_TEST(l.cp_group.nodes == 1);
  const RingAttention r = ring_attention(cost, local, 4, l.cp_group);
  const double kv = 2.0 * 4096.0 * 1024.0 * 2.0;
  BOOST_TEST(r.kv_bytes_per_step == kv, tt::tolerance(1e-12));
  const CostParams& p = profile.params;
  const double link = device.intra_node_bytes_per_s * p.intra_node_link_efficiency;
  BOOST_TEST(r.step_fwd_comm_s == kv / link + p.intra_node_latency_s, tt::tolerance(1e-12));
  BOOST_TEST(r.step_bwd_comm_s == 2.0 * kv / link + p.intra_node_latency_s, tt::tolerance(1e-12));
  BOOST_TEST(r.fwd_compute_s == 4.0 * cost.op_seconds(attention_op("a", OpKind::kAttentionFwd, local)),
             tt::tolerance(1e-12));
  BOOST_TEST(r.fwd_exposed_s == 3.0 * std::max(r.step_fwd_comm_s - r.step_fwd_s, 0.0), tt::tolerance(1e-12));
  BOOST_TEST(r.bwd_exposed_s == 3.0 * std::max(r.step_bwd_comm_s - r.step_bwd_s, 0.0), tt::tolerance(1e-12));
  // cp 1: one attention, nothing exchanged.
  const RingAttention one = ring_attention(cost, rank_shape(m, c, m.vocab_size), 1, CommGroup{});
  BOOST_TEST(one.fwd_exposed_s + one.bwd_exposed_s + one.kv_bytes_per_step == 0.0);
  // Across nodes the exchange waits for the hop between nodes, on NICs shared by the rings crossing
  // them: cp 4 of ranks 8 apart on nodes of 8 puts every member on its own node, 8 rings per node.
  const CommGroup far = strided_group(4, 8, 8);
  const double nic = device.inter_node_bytes_per_s * p.inter_node_link_efficiency / 8.0;
  BOOST_TEST(ring_step_seconds(cost, kv, far) == kv / nic + p.inter_node_latency_s, tt::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(context_parallelism_halves_activations_and_reduces_over_data_and_context, Fixture) {
  // 8 GPUs, tp 2: cp 1 (dp 4) against cp 2 (dp 2), one micro-batch in flight (pp 1). Every saved
  // byte is per token, so the activations halve exactly; the parameters are the same.
  const ModelConfig m = gpt_long();
  TrainConfig c = megatron(8, 2, 1, 16, 2);
  c.seq_len = 4096;
  c.layout.sequence_parallel = true;
  MegatronEvaluator e(m, device, profile.params);
  const MemoryBreakdown one = e.memory(c);
  const MemoryBreakdown two = e.memory(with_cp_ep(c, 2, 1));
  BOOST_TEST_REQUIRE(check_config(m, device, profile.params, with_cp_ep(c, 2, 1)).empty());
  BOOST_TEST(two.activation_bytes * 2.0 == one.activation_bytes, tt::tolerance(1e-12));
  BOOST_TEST(two.transient_bytes * 2.0 == one.transient_bytes, tt::tolerance(1e-12));
  BOOST_TEST(two.sharded_state_bytes == one.sharded_state_bytes, tt::tolerance(1e-12));
  // The distributed optimizer shards over the dp*cp = 4 ranks of the gradient group in both.
  c.layout.distributed_optimizer = true;
  BOOST_TEST(e.memory(with_cp_ep(c, 2, 1)).sharded_state_bytes == e.memory(c).sharded_state_bytes,
             tt::tolerance(1e-12));
  // Megatron's order tp-cp-ep-dp-pp: cp ranks 2 apart; the gradient group all dp x cp = 4 ranks, 2 apart.
  const ModelParallelLayout l = model_parallel_layout(with_cp_ep(c, 2, 1).layout, 8, 8);
  BOOST_TEST(l.cp_group.ranks == 2);
  BOOST_TEST(l.dp_group.ranks == 4);
  BOOST_TEST(l.grad_ranks() == 4);
  // The step's attention: 24 layers x 4 micro-batches (8 sequences per replica, 2 each) of the ring's
  // two steps forward and backward.
  c.layout.distributed_optimizer = false;
  const TrainConfig cp2 = with_cp_ep(c, 2, 1);
  const Prediction p2 = predict(m, device, profile.params, cp2);
  const CostModel cost(device, profile.params);
  const RingAttention r =
      ring_attention(cost, rank_shape(m, cp2, megatron_padded_vocab(m.vocab_size, 2)), 2, l.cp_group);
  BOOST_TEST(p2.time.attention_s == 24.0 * 4.0 * (r.fwd_compute_s + r.bwd_compute_s), tt::tolerance(1e-9));
  const StepBreakdown& b = p2.time;
  BOOST_TEST(b.gemm_s + b.attention_s + b.other_compute_s + b.exposed_comm_s + b.optimizer_s + b.overhead_s +
                     b.pipeline_bubble_s ==
                 p2.step_s,
             tt::tolerance(1e-6));
}

BOOST_FIXTURE_TEST_CASE(context_and_expert_layouts_that_cannot_run_are_one_line_errors, Fixture) {
  const auto why = [&](const ModelConfig& m, const TrainConfig& c) {
    return check_config(m, device, profile.params, c);
  };
  TrainConfig c = megatron(8, 2, 1, 8, 1);
  c.seq_len = 1000;  // 1000 = 8 x 125: cp 4 divides it, 2cp = 8 chunks too; cp 8 needs 16 chunks
  c.n_gpus = 16;
  c.global_batch = 16;
  BOOST_TEST(why(gpt_1024(), with_cp_ep(c, 4, 1)).empty());
  c.n_gpus = 32;
  c.global_batch = 32;
  BOOST_TEST(contains(why(gpt_1024(), with_cp_ep(c, 8, 1)),
                      "context parallel 8 does not split the sequence length 1000 into 16 equal chunks"));
  c = megatron(8, 2, 1, 8, 1);
  ModelConfig unfused = gpt_1024();
  unfused.unfused_attention = true;
  BOOST_TEST(contains(why(unfused, with_cp_ep(c, 2, 1)), "context parallel 2 needs flash (fused) attention"));
  BOOST_TEST(contains(why(gpt_1024(), with_cp_ep(c, 1, 2)), "expert parallel 2 needs a mixture-of-experts model"));
  TrainConfig moe = megatron(24, 1, 1, 24, 1);
  moe.precision = Precision::kAmpBf16;
  BOOST_TEST(contains(why(mixtral(), with_cp_ep(moe, 1, 3)), "expert parallel 3 does not divide the 8 experts"));
  moe = megatron(4, 1, 1, 4, 1);
  moe.precision = Precision::kAmpBf16;
  BOOST_TEST(
      contains(why(mixtral(), with_cp_ep(moe, 1, 8)), "expert parallel 8 does not divide data x context parallel 4"));
  moe = megatron(8, 2, 1, 8, 1);
  moe.precision = Precision::kAmpBf16;
  BOOST_TEST(contains(why(mixtral(), moe), "needs sequence parallelism (--sp)"));
  moe.layout.sequence_parallel = true;
  BOOST_TEST(why(mixtral(), with_cp_ep(moe, 1, 4)).empty());
  for (const std::string& line : {why(unfused, with_cp_ep(c, 2, 1)), why(mixtral(), with_cp_ep(moe, 1, 3))})
    BOOST_TEST(line.find('\n') == std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(expert_parallelism_splits_the_experts_and_dispatches_by_all_to_all, Fixture) {
  // Mixtral on one node of 8, tp 1, dp 8, micro-batch 1 of 4096 tokens, bf16: each all-to-all holds
  // the rank's 4096 x top 2 routed rows of 4096 activations, (ep-1)/ep of which leave the rank over
  // NVLink. The rank keeps 8/ep experts: its parameters are the rest of the model plus 1/ep of the
  // routed experts' 32 x 8 x 3 x 4096 x 14336 weights; the distributed optimizer shards the experts'
  // state over the 8/ep expert-data-parallel ranks and the rest over the 8 data-parallel ranks.
  const ModelConfig& m = mixtral();
  TrainConfig c = megatron(8, 1, 1, 8, 1);
  c.precision = Precision::kAmpBf16;
  c.seq_len = 4096;
  const CostModel cost(device, profile.params);
  const CostParams& p = profile.params;
  const double link = device.intra_node_bytes_per_s * p.intra_node_link_efficiency;
  const double routed = 32.0 * 8.0 * 3.0 * 4096.0 * 14336.0;
  const double total = static_cast<double>(parameter_count(m, 4096));
  const double padded_table = 32000.0 * 4096.0;  // 32000 is a multiple of 128: Megatron pads nothing
  MegatronEvaluator e(m, device, profile.params);
  for (int64_t ep : {1, 2, 4, 8}) {
    BOOST_TEST_CONTEXT("ep " << ep) {
      const TrainConfig cfg = with_cp_ep(c, 1, ep);
      BOOST_TEST_REQUIRE(check_config(m, device, profile.params, cfg).empty());
      const BlockShape s = rank_shape(m, cfg, 32000);
      BOOST_TEST(moe_dispatch_bytes(s) == 4096.0 * 2.0 * 4096.0 * 2.0, tt::tolerance(1e-12));
      const ModelParallelLayout l = model_parallel_layout(cfg.layout, 8, 8);
      BOOST_TEST(l.ep_group.ranks == ep);
      BOOST_TEST(l.expert_grad_ranks() == 8 / ep);
      const double e_ep = static_cast<double>(ep);
      const double expected_a2a =
          ep == 1 ? 0.0 : (e_ep - 1.0) / e_ep * moe_dispatch_bytes(s) / link + p.intra_node_latency_s;
      BOOST_TEST(all_to_all_seconds(cost, moe_dispatch_bytes(s), l.ep_group) == expected_a2a, tt::tolerance(1e-12));
      // Local parameters: everything, less the (ep-1)/ep of the routed experts held elsewhere.
      const double local = total - routed + routed / e_ep;
      BOOST_TEST(total == static_cast<double>(layer_parameter_count(m)) * 32.0 + 2.0 * padded_table + 4096.0);
      BOOST_TEST(e.memory(cfg).sharded_state_bytes == 18.0 * local, tt::tolerance(1e-12));
      TrainConfig dist = cfg;
      dist.layout.distributed_optimizer = true;
      const double master = (local - routed / e_ep) / 8.0 + (routed / e_ep) / (8.0 / e_ep);
      BOOST_TEST(e.memory(dist).sharded_state_bytes == 6.0 * local + 12.0 * master, tt::tolerance(1e-12));
      const Prediction pr = predict(m, device, profile.params, cfg);
      BOOST_TEST(std::isfinite(pr.step_s));
      BOOST_TEST(pr.step_s > 0.0);
    }
  }
  // Across nodes: ep 16 of consecutive ranks on two nodes of 8. Each rank sends 7/16 of its buffer
  // over NVLink and 8/16 off the node, through NICs its node's 8 ranks share: 8 x B / 2 per node.
  const double buffer = 64.0 * 1024.0 * 1024.0;
  const CommGroup two_nodes = strided_group(16, 1, 8);
  const double nic = device.inter_node_bytes_per_s * p.inter_node_link_efficiency;
  BOOST_TEST(all_to_all_seconds(cost, buffer, two_nodes) ==
                 std::max(7.0 / 16.0 * buffer / link, 8.0 * buffer / 2.0 / nic) + p.inter_node_latency_s,
             tt::tolerance(1e-12));
  // The experts' GEMMs: 8/ep groups over the same routed rows, the same FLOPs.
  const BlockShape s1 = rank_shape(m, c, 32000), s4 = rank_shape(m, with_cp_ep(c, 1, 4), 32000);
  BOOST_TEST(flops_of(block_forward_ops, s1) == flops_of(block_forward_ops, s4), tt::tolerance(1e-12));
  OpList ops;
  block_forward_ops(s4, ops);
  for (const Op& op : ops)
    if (std::string(op.name) == "moe.experts.up_proj.fwd") BOOST_TEST(op.batch == 2);
}

BOOST_FIXTURE_TEST_CASE(expert_tensor_parallelism_keeps_the_experts_whole_across_the_tensor_ranks, Fixture) {
  // Mixtral on one node of 8, tp 2 (sequence parallel), dp 4, ep 4, micro-batch 1 of 4096 tokens.
  // Megatron-Core's default (expert tensor parallel = tp 2): each rank holds 8/4 experts at half their
  // width and gathers its tp peer's routed rows, 4096 x top 2; the expert groups (2 x 4 ranks) take
  // the whole stage, so the expert-data-parallel group is 1. With --etp 1 the rank holds its 2 experts
  // whole and runs only its own 2048 tokens' 4096 routed rows: the same FLOPs, twice the expert
  // parameters, no gather over the tensor ranks, and expert groups of 4 ranks, 2 of them.
  const ModelConfig& m = mixtral();
  TrainConfig c = megatron(8, 2, 1, 8, 1);
  c.precision = Precision::kAmpBf16;
  c.seq_len = 4096;
  c.layout.sequence_parallel = true;
  c.layout.expert = 4;
  TrainConfig whole = c;
  whole.layout.expert_tensor = 1;
  BOOST_TEST_REQUIRE(check_config(m, device, profile.params, c).empty());
  BOOST_TEST_REQUIRE(check_config(m, device, profile.params, whole).empty());
  const BlockShape split = rank_shape(m, c, 32000), own = rank_shape(m, whole, 32000);
  BOOST_TEST(split.moe.d_expert == 14336 / 2);
  BOOST_TEST(own.moe.d_expert == 14336);
  BOOST_TEST(split.expert_rows() == 4096 * 2);
  BOOST_TEST(own.expert_rows() == 2048 * 2);
  BOOST_TEST(moe_dispatch_bytes(split) == moe_dispatch_bytes(own));  // each rank's own 2048 tokens' rows
  for (auto build : {block_forward_ops, block_backward_ops})
    BOOST_TEST(flops_of(build, split) == flops_of(build, own), tt::tolerance(1e-12));
  const ModelParallelLayout ls = model_parallel_layout(c.layout, 8, 8), lo = model_parallel_layout(whole.layout, 8, 8);
  BOOST_TEST((ls.etp_group.ranks == 2 && lo.etp_group.ranks == 1));
  BOOST_TEST((ls.expert_grad_ranks() == 1 && lo.expert_grad_ranks() == 2));
  BOOST_TEST((lo.ep_group.ranks == 4 && lo.expert_dp_group.ranks == 2));
  // Parameters: the routed experts' 32 x 8 x 3 x 4096 x 14336 weights over etp x ep ranks, the rest
  // over tp; 18 bytes each (bf16 weight, fp32 gradient and Adam state) without the distributed optimizer.
  const double routed = 32.0 * 8.0 * 3.0 * 4096.0 * 14336.0;
  MegatronEvaluator e(m, device, profile.params);
  BOOST_TEST(
      e.memory(whole).sharded_state_bytes - e.memory(c).sharded_state_bytes == 18.0 * (routed / 4.0 - routed / 8.0),
      tt::tolerance(1e-9));
  // The default spelled out (--etp equal to --tp) is the default, byte for byte.
  TrainConfig spelled = c;
  spelled.layout.expert_tensor = 2;
  BOOST_TEST(predict(m, device, profile.params, spelled).step_s == predict(m, device, profile.params, c).step_s);
  // Expert groups beyond a stage's ranks: etp 2 x ep 8 > tp 2 x dp 4.
  TrainConfig wide = c;
  wide.layout.expert = 8;
  BOOST_TEST(contains(check_config(m, device, profile.params, wide),
                      "expert parallel 8 does not divide data x context parallel 4"));
  wide.layout.expert_tensor = 1;
  BOOST_TEST(check_config(m, device, profile.params, wide).empty());
  wide.layout.expert_tensor = 4;
  BOOST_TEST(
      contains(check_config(m, device, profile.params, wide),
               "expert tensor parallel 4 x expert parallel 8 does not divide tensor x data x context parallel 8"));
  TrainConfig dense = megatron(8, 2, 1, 8, 1);
  dense.layout.sequence_parallel = true;
  dense.layout.expert_tensor = 1;
  BOOST_TEST(contains(check_config(gpt_1024(), device, profile.params, dense), "needs a mixture-of-experts model"));
}

BOOST_FIXTURE_TEST_CASE(bf16_gradient_reduction_halves_the_gradients_bytes, Fixture) {
  // Under bf16 Megatron-LM keeps fp32 main gradients: 18 bytes a parameter without the distributed
  // optimizer (bf16 weight, fp32 gradient, fp32 master and Adam's two moments). --grad-reduce-in-bf16
  // keeps them in bf16: 16 bytes, and the gradients' all-reduce after the backward (not overlapped:
  // tp 1, pp 1, dp 8, so it is the step's only communication) moves half the bytes.
  const ModelConfig m = gpt_1024();
  TrainConfig c = megatron(8, 1, 1, 8, 1);
  c.precision = Precision::kAmpBf16;
  TrainConfig half = c;
  half.layout.grad_reduce_bf16 = true;
  BOOST_TEST_REQUIRE(check_config(m, device, profile.params, half).empty());
  MegatronEvaluator e(m, device, profile.params);
  const double params = e.memory(c).sharded_state_bytes / 18.0;
  BOOST_TEST(e.memory(half).sharded_state_bytes == 16.0 * params, tt::tolerance(1e-12));
  const CostModel cost(device, profile.params);
  const CommGroup dp = model_parallel_layout(c.layout, 8, device.gpus_per_node).dp_group;
  const Prediction fp32 = predict(m, device, profile.params, c), bf16 = predict(m, device, profile.params, half);
  BOOST_TEST(fp32.time.exposed_comm_s == cost.collective_seconds(CollectiveKind::kAllReduce, 4.0 * params, dp),
             tt::tolerance(1e-9));
  BOOST_TEST(bf16.time.exposed_comm_s == cost.collective_seconds(CollectiveKind::kAllReduce, 2.0 * params, dp),
             tt::tolerance(1e-9));
  // fp16 already reduces in its own 2 bytes; fp32 parameters have no bf16 to keep.
  TrainConfig fp16 = half;
  fp16.precision = Precision::kAmpFp16;
  BOOST_TEST(contains(check_config(m, device, profile.params, fp16), "--grad-reduce-in-bf16 needs bf16 parameters"));
}

BOOST_AUTO_TEST_CASE(fused_softmax_falls_back_to_pytorch_in_fp32_where_its_kernel_cannot_run) {
  // Megatron's fused causal softmax needs batch x local heads to be a multiple of 4: 16 heads over
  // tp 8 at micro-batch 1 leave 2, and the softmax runs as five fp32 PyTorch kernels (cast, scale,
  // mask, softmax, cast) reading 18 and writing 18 bytes per score, keeping its fp32 output.
  ModelConfig m = gpt_1024();
  m.unfused_attention = true;
  m.attention_dropout = 0.1;
  const auto softmax = [&](int64_t micro_batch, int64_t tp) {
    OpList ops;
    block_forward_ops(tensor_parallel_shape(block_shape(m, micro_batch, 1024, Precision::kAmpFp16), tp, false,
                                            megatron_padded_vocab(50257, tp)),
                      ops);
    return op_named(ops, "attn.softmax.fwd");
  };
  const double scores_1x2 = 1.0 * 2 * 1024 * 1024;  // batch x local heads x s x s
  const Op fallback = softmax(1, 8);
  BOOST_TEST(fallback.kernels == 5);
  BOOST_TEST(fallback.bytes_read == 18.0 * scores_1x2, tt::tolerance(1e-12));
  BOOST_TEST(fallback.bytes_written == 18.0 * scores_1x2, tt::tolerance(1e-12));
  BOOST_TEST(fallback.saved_bytes == 4.0 * scores_1x2, tt::tolerance(1e-12));
  const Op fused = softmax(2, 8);  // 2 x 2 local heads: the fused kernel
  BOOST_TEST(fused.kernels == 1);
  BOOST_TEST(fused.bytes_read == 2.0 * 2.0 * scores_1x2, tt::tolerance(1e-12));
  BOOST_TEST(softmax(1, 4).kernels == 1);  // 4 local heads
  // Longer than the kernel's 2,048 keys: the fallback at any batch.
  OpList long_ops;
  block_forward_ops(block_shape(m, 4, 4096, Precision::kAmpFp16), long_ops);
  BOOST_TEST(op_named(long_ops, "attn.softmax.fwd").kernels == 5);
}

BOOST_AUTO_TEST_CASE(megatron_cross_entropy_streams_fp32_logits) {
  // vocab_parallel_cross_entropy(logits.float()): six kernels over t x V/tp fp32 elements in the
  // forward (2 + 20 bytes read, 16 written per element), the fp32 softmax kept for the backward's
  // two (8 read, 4 + 2 written); costed at the element-wise bandwidth, not the fused kernel's rate.
  BlockShape s = tensor_parallel_shape(block_shape(gpt_1024(), 2, 1024, Precision::kAmpFp16), 2, false,
                                       megatron_padded_vocab(50257, 2));
  s.fp32_vocab_parallel_xent = true;  // as MegatronEvaluator sets it
  OpList fwd, bwd;
  head_forward_ops(s, fwd);
  head_backward_ops(s, bwd);
  const double tv = 2.0 * 1024 * (50432 / 2);
  const Op xent = op_named(fwd, "loss.xent.fwd");
  BOOST_TEST(xent.kernels == 6);
  BOOST_TEST(xent.bytes_read == 22.0 * tv, tt::tolerance(1e-12));
  BOOST_TEST(xent.saved_bytes == 4.0 * tv, tt::tolerance(1e-12));
  BOOST_TEST(op_named(bwd, "loss.xent.bwd").bytes_written == 6.0 * tv, tt::tolerance(1e-12));
  Fixture f;
  CostParams slow = f.profile.params;
  slow.xent_efficiency = 0.05;  // the fused kernel's rate does not apply
  BOOST_TEST(CostModel(f.device, slow).op_seconds(xent) == CostModel(f.device, f.profile.params).op_seconds(xent),
             tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(megatron_fuses_swiglu_and_keeps_only_fc1s_output) {
  // Megatron-Core's SwiGLUFunction keeps its input [gate | up] (t x 2f) and recomputes silu(gate) in
  // the backward: no silu kernel either way, and not the t x f gate the eager activation keeps.
  // Under fp8 the gate and up projections are one TransformerEngine linear (fc1): x is cast and its
  // fp8 copy kept once. Llama 3 8B at tp 2 with sequence parallelism, 2 x 4,096 tokens.
  const ModelConfig m = test::llama(4096, 32, 8, 32, 14336, 128256);
  for (const Precision p : {Precision::kAmpBf16, Precision::kAmpFp8}) {
    BlockShape eager = tensor_parallel_shape(block_shape(m, 2, 4096, p), 2, true, 128256);
    BlockShape fused = eager;
    fused.fused_swiglu = true;
    OpList ef, eb, ff, fb;
    block_forward_ops(eager, ef);
    block_backward_ops(eager, eb);
    block_forward_ops(fused, ff);
    block_backward_ops(fused, fb);
    const double t = 2.0 * 4096, f = 14336.0 / 2, x_fp8 = t / 2 * 4096;  // the rank's t/tp rows of x, 1 byte
    const double fewer = 2.0 * t * f + (p == Precision::kAmpFp8 ? x_fp8 : 0.0);
    BOOST_TEST(total_saved_bytes(ef) - total_saved_bytes(ff) == fewer, tt::tolerance(1e-12));
    BOOST_TEST(op_named(ff, "ffn.mul.fwd").saved_bytes == 2.0 * 2.0 * t * f, tt::tolerance(1e-12));
    BOOST_TEST(total_flops(ef) == total_flops(ff), tt::tolerance(1e-12));
    BOOST_TEST(total_flops(eb) == total_flops(fb), tt::tolerance(1e-12));
    const auto kernels = [](const OpList& ops) {
      int64_t k = 0;
      for (const Op& op : ops) k += op.kernels;
      return k;
    };
    // Fused: fc1 is one GEMM (and under fp8 one cast of x and W) where the eager block runs up's
    // apart; no silu; the backward's one fc1 data gradient sums both halves (no dx_sum).
    BOOST_TEST(kernels(ef) - kernels(ff) == (p == Precision::kAmpFp8 ? 4 : 2));  // silu, up's GEMM (and cast)
    BOOST_TEST(kernels(eb) - kernels(fb) == (p == Precision::kAmpFp8 ? 5 : 4));  // silu, up's 2 GEMMs (cast), dx_sum
    BOOST_TEST(op_named(ff, "ffn.fc1.fwd").n == 14336);  // gate and up widths of the rank's 7,168 each
    for (const OpList* ops : {&ff, &fb})
      for (const Op& op : *ops) BOOST_TEST(std::string_view(op.name).find("silu") == std::string_view::npos);
  }
  // MegatronEvaluator builds the fused block: Llama 3 8B at tp 2, pp 1, micro-batch 1 of 4,096, no
  // recompute, on 8 GPUs keeps 2 bytes x t x f less per layer than the same block unfused.
  TrainConfig c{.seq_len = 4096, .global_batch = 8, .micro_batch = 1, .n_gpus = 8, .precision = Precision::kAmpBf16};
  c.layout.framework = Framework::kMegatron;
  c.layout.tensor = 2;
  c.layout.sequence_parallel = true;
  const DeviceSpec h100 = load_device("h100_80gb");  // the evaluator keeps references
  const DeviceProfile prof = load_shipped_profile("h100_80gb");
  MegatronEvaluator ev(m, h100, prof.params);
  BlockShape eager = rank_shape(m, c, megatron_padded_vocab(m.vocab_size, 2));
  BlockShape fused = eager;
  fused.fused_swiglu = true;
  OpList e, f;
  block_forward_ops(eager, e);
  block_forward_ops(fused, f);
  BOOST_TEST(total_saved_bytes(e) - total_saved_bytes(f) == 2.0 * 4096 * (14336 / 2), tt::tolerance(1e-12));
  // One micro-batch in flight without a pipeline: 32 fused blocks, the embedding's and the head's.
  fused.fp32_vocab_parallel_xent = true;
  OpList embed, head;
  embedding_forward_ops(fused, embed);
  head_forward_ops(fused, head);
  BOOST_TEST(
      ev.memory(c).activation_bytes == 32.0 * total_saved_bytes(f) + total_saved_bytes(embed) + total_saved_bytes(head),
      tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(transformer_engine_launches_the_routed_experts_gemms_one_per_expert) {
  // TransformerEngine's GroupedLinear on its per-expert path: one cuBLAS GEMM per local expert, and
  // under fp8 each expert's operands quantized by their own kernels. The device time of a grouped
  // GEMM is unchanged (the streams spread the experts' tiles); the launches are the host's to issue.
  // Mixtral 8x7B at expert parallel 2 (4 local experts), 2 x 4,096 tokens.
  const DeviceSpec h100 = load_device("h100_80gb");
  const DeviceProfile prof = load_shipped_profile("h100_80gb");
  const CostModel cost(h100, prof.params);
  for (const Precision p : {Precision::kAmpBf16, Precision::kAmpFp8}) {
    BlockShape grouped = block_shape(mixtral(), 2, 4096, p);
    grouped.ep = 2;
    grouped.fused_swiglu = true;
    BlockShape per_expert = grouped;
    per_expert.per_expert_launches = true;
    for (const bool forward : {true, false}) {
      OpList g, e;
      (forward ? block_forward_ops : block_backward_ops)(grouped, g);
      (forward ? block_forward_ops : block_backward_ops)(per_expert, e);
      BOOST_TEST_REQUIRE(g.size() == e.size());
      int64_t expert_gemms = 0, expert_casts = 0;
      for (int n = 0; n < g.size(); ++n) {
        const Op* const gi = g.begin() + n;
        const Op* const ei = e.begin() + n;
        BOOST_TEST(std::string_view(gi->name) == std::string_view(ei->name));
        BOOST_TEST(gi->flops == ei->flops);
        BOOST_TEST(gi->bytes_read + gi->bytes_written == ei->bytes_read + ei->bytes_written);
        const bool routed = std::string_view(gi->name).starts_with("moe.expert");
        if (gi->kind == OpKind::kGemm && gi->batch == 4) {
          ++expert_gemms;
          BOOST_TEST(gi->kernels == 1);
          BOOST_TEST(ei->kernels == 4);
          BOOST_TEST(cost.op_seconds(*gi) == cost.op_seconds(*ei), tt::tolerance(1e-12));
        } else if (routed && gi->mem == MemKind::kCast) {
          ++expert_casts;
          BOOST_TEST(ei->kernels == 4 * gi->kernels);
        } else {
          BOOST_TEST(ei->kernels == gi->kernels);
        }
      }
      // fc1 and fc2: their forwards, or their data and weight gradients.
      BOOST_TEST(expert_gemms == (forward ? 2 : 4));
      BOOST_TEST(expert_casts == (p == Precision::kAmpFp8 ? 2 : 0));
    }
  }
}

BOOST_AUTO_TEST_CASE(transformer_engine_casts_the_fp8_weights_once_a_step) {
  // Megatron-Core's first micro-batch of a step sets is_first_microbatch: TransformerEngine casts
  // (and transposes) each linear's weight into its fp8 cache then, and every later micro-batch casts
  // only its input. Llama 3 8B at tp 2, 2 x 4,096 tokens: the rank's linear weights are
  // (4096 x (4096 + 2 x 1024) + 4096 x 4096 + 3 x 4096 x 14336) / 2 = 109,051,904 elements.
  const ModelConfig m = test::llama(4096, 32, 8, 32, 14336, 128256);
  const double weights = (4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3.0 * 4096 * 14336) / 2;
  BOOST_TEST(weights == 109051904.0);
  const DeviceSpec h100 = load_device("h100_80gb");
  const DeviceProfile prof = load_shipped_profile("h100_80gb");
  const CostModel cost(h100, prof.params);
  BlockShape every = tensor_parallel_shape(block_shape(m, 2, 4096, Precision::kAmpFp8), 2, true, 128256);
  every.fused_swiglu = true;
  BlockShape cached = every;
  cached.fp8_weight_cache = true;
  OpList e, c;
  block_forward_ops(every, e);
  block_forward_ops(cached, c);
  double e_bytes = 0, c_bytes = 0, once_written = 0, once_read = 0;
  for (const Op& op : e) e_bytes += op.bytes_read + op.bytes_written;
  for (const Op& op : c) {
    c_bytes += op.bytes_read + op.bytes_written;
    if (!op.per_step) continue;
    BOOST_TEST(std::string_view(op.name).ends_with(".fp8_cast_weight"));
    once_written += op.bytes_written;
    once_read += op.bytes_read;
  }
  BOOST_TEST(once_read == 2.0 * weights, tt::tolerance(1e-12));     // bf16 weights read
  BOOST_TEST(once_written == 2.0 * weights, tt::tolerance(1e-12));  // fp8 and its transpose
  BOOST_TEST(c_bytes == e_bytes, tt::tolerance(1e-12));             // the same bytes, split
  const CategoryTotals ct = costed(cost, block_forward_ops, cached), et = costed(cost, block_forward_ops, every);
  double once_s = 0;
  for (const Op& op : c)
    if (op.per_step) once_s += cost.op_seconds(op);
  BOOST_TEST(ct.per_step_s == once_s, tt::tolerance(1e-12));
  BOOST_TEST(ct.per_step_s > 0.0);
  BOOST_TEST(ct.other + ct.per_step_s == et.other, tt::tolerance(1e-12));  // the same casts, the weights' once a step
  BOOST_TEST(ct.gemm == et.gemm, tt::tolerance(1e-12));
  BOOST_TEST(et.per_step_s == 0.0);
  BOOST_TEST(ct.per_step_written_bytes == 2.0 * weights, tt::tolerance(1e-12));
  // The memory of MegatronEvaluator's rank (tp 2, pp 1, 32 layers on 8 GPUs): TransformerEngine's
  // fp8 copies and transposes of its weights beside the bf16 ones, 32 x 2 x 109,051,904 bytes; none
  // when the weights are fp8 parameters (--fp8-param-gather) or under bf16.
  TrainConfig cfg{.seq_len = 4096, .global_batch = 16, .micro_batch = 2, .n_gpus = 8, .precision = Precision::kAmpFp8};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.tensor = 2;
  cfg.layout.sequence_parallel = true;
  MegatronEvaluator ev(m, h100, prof.params);
  const MemoryBreakdown cached_weights = ev.memory(cfg);
  BOOST_TEST(cached_weights.gathered_params_bytes == 32.0 * 2.0 * weights, tt::tolerance(1e-12));
  cfg.layout.fp8_param_gather = true;
  const MemoryBreakdown fp8_params = ev.memory(cfg);
  BOOST_TEST(fp8_params.gathered_params_bytes == 0.0);
  BOOST_TEST(cached_weights.live_bytes - fp8_params.live_bytes == 32.0 * 2.0 * weights, tt::tolerance(1e-12));
  // The distributed optimizer's all-gather of the updated weights over dp 4 (one node: the ring's
  // time is affine in the bytes): fp8 parameters are gathered as their raw byte, the other weights
  // at 2 bytes, so the step is shorter by the all-gather of one byte per quantized weight element.
  cfg.layout.distributed_optimizer = true;
  const double fp8_gather_step = ev.predict(cfg).step_s;
  cfg.layout.fp8_param_gather = false;
  const double bf16_gather_step = ev.predict(cfg).step_s;
  const CommGroup dp = model_parallel_layout(cfg.layout, cfg.n_gpus, h100.gpus_per_node).dp_group;
  BOOST_TEST(dp.ranks == 4);
  const double one_byte = cost.collective_seconds(CollectiveKind::kAllGather, 64.0 * weights, dp) -
                          cost.collective_seconds(CollectiveKind::kAllGather, 32.0 * weights, dp);
  BOOST_TEST(one_byte > 0.0);
  BOOST_TEST(bf16_gather_step - fp8_gather_step == one_byte, tt::tolerance(1e-9));
  cfg.precision = Precision::kAmpBf16;
  BOOST_TEST(ev.memory(cfg).gathered_params_bytes == 0.0);
}

BOOST_AUTO_TEST_CASE(transformer_engine_runs_the_architectures_native_attention_kernel) {
  // Megatron-Core's attention is TransformerEngine's cuDNN fused kernel: on the H100 at the rate
  // the FlashAttention-3 paper measured for it (attn_native_*), not the FlashAttention-2-era rate
  // the H100 profile was fitted to; where a profile knows no native kernel (0), the fitted rate.
  const DeviceSpec h100 = load_device("h100_80gb");
  const DeviceProfile prof = load_shipped_profile("h100_80gb");
  BOOST_TEST(prof.params.attn_native_fwd_efficiency == 0.685);
  BOOST_TEST(prof.params.attn_native_bwd_efficiency == 0.66);
  BOOST_TEST(load_shipped_profile("a100_80gb").params.attn_native_fwd_efficiency == 0.0);
  const ModelConfig m = test::llama(4096, 32, 8, 32, 14336, 128256);
  BlockShape s = tensor_parallel_shape(block_shape(m, 1, 8192, Precision::kAmpBf16), 4, true, 128256);
  const CostModel cost(h100, prof.params);
  for (const OpKind kind : {OpKind::kAttentionFwd, OpKind::kAttentionBwd}) {
    s.native_attention = false;
    const Op fitted = attention_op("a", kind, s);
    s.native_attention = true;
    const Op native = attention_op("a", kind, s);
    BOOST_TEST(native.native_kernel);
    BOOST_TEST(native.flops == fitted.flops);
    const bool fwd = kind == OpKind::kAttentionFwd;
    const double ratio = fwd ? 0.685 / prof.params.attn_fwd_efficiency : 0.66 / prof.params.attn_bwd_efficiency;
    const double o = prof.params.gemm_overhead_s;  // compute-bound at 8,192 tokens: seconds = overhead + flops / rate
    BOOST_TEST((cost.op_seconds(fitted) - o) / (cost.op_seconds(native) - o) == ratio, tt::tolerance(1e-9));
    CostParams none = prof.params;
    none.attn_native_fwd_efficiency = none.attn_native_bwd_efficiency = 0;
    BOOST_TEST(CostModel(h100, none).op_seconds(native) == cost.op_seconds(fitted));
  }
  // The evaluator asks for it: the same step with the native rates zeroed spends more on attention
  // and the same on GEMMs.
  TrainConfig c{.seq_len = 8192, .global_batch = 8, .micro_batch = 1, .n_gpus = 8, .precision = Precision::kAmpBf16};
  c.layout.framework = Framework::kMegatron;
  c.layout.tensor = 4;
  c.layout.sequence_parallel = true;
  CostParams none = prof.params;
  none.attn_native_fwd_efficiency = none.attn_native_bwd_efficiency = 0;
  const Prediction with = MegatronEvaluator(m, h100, prof.params).predict(c);
  const Prediction without = MegatronEvaluator(m, h100, none).predict(c);
  BOOST_TEST(with.time.attention_s < 0.5 * without.time.attention_s);
  BOOST_TEST(with.time.gemm_s == without.time.gemm_s, tt::tolerance(1e-12));
}

// Uneven pipeline splits (Megatron-Core's --decoder-first/last-pipeline-num-layers and
// --account-for-embedding/loss-in-pipeline-split) and TransformerEngine's TP communication overlap.

namespace {
std::vector<int64_t> chunks_of(int64_t n_layers, int64_t pp, int64_t vp, int64_t first, int64_t last, bool emb,
                               bool loss, std::string* why = nullptr) {
  Layout p;
  p.framework = Framework::kMegatron;
  p.pipeline = pp, p.virtual_stages = vp;
  p.first_stage_layers = first, p.last_stage_layers = last;
  p.account_for_embedding = emb, p.account_for_loss = loss;
  std::vector<int64_t> layers;
  const std::string w = split_layers(n_layers, p, layers);
  if (why) *why = w;
  return layers;
}
}  // namespace

BOOST_AUTO_TEST_CASE(an_uneven_split_gives_each_chunk_megatron_cores_layers) {
  using V = std::vector<int64_t>;
  // No flag: equal chunks.
  BOOST_TEST(chunks_of(24, 4, 2, 0, 0, false, false) == V(8, 3), tt::per_element());
  // First and last stages fixed, the 18 layers between over the 2 stages between.
  BOOST_TEST(chunks_of(24, 4, 1, 3, 3, false, false) == (V{3, 9, 9, 3}), tt::per_element());
  // Interleaved, the first stage's 8 layers in 2 chunks of 4; the other stage (the last, not
  // fixed) splits the remaining 16 into chunks of 8. Chunk c runs on stage c % 2.
  BOOST_TEST(chunks_of(24, 2, 2, 8, 0, false, false) == (V{4, 8, 4, 8}), tt::per_element());
  // The embedding counted as a layer: 25 over 5 stages, the first stage one layer short.
  BOOST_TEST(chunks_of(24, 5, 1, 0, 0, true, false) == (V{4, 5, 5, 5, 5}), tt::per_element());
  // Megatron-Bridge's Llama 3.1 405B: 126 layers + embedding + loss = 128 over pp 8 x vp 8 = 64
  // chunks of 2; the first and last chunk hold 1.
  const V l405 = chunks_of(126, 8, 8, 0, 0, true, true);
  BOOST_TEST_REQUIRE(l405.size() == 64u);
  BOOST_TEST(l405.front() == 1);
  BOOST_TEST(l405.back() == 1);
  BOOST_TEST(std::count(l405.begin(), l405.end(), 2) == 62);
  // NeMo's Qwen3-235B-A22B on B200s: 94 layers + 2 = 96 over pp 8 x vp 12, a layer a chunk; the
  // first chunk holds the embedding alone and the last the loss alone (Megatron-Core builds no
  // transformer layer there: get_num_layers_to_build asserts only >= 0).
  const V q235 = chunks_of(94, 8, 12, 0, 0, true, true);
  BOOST_TEST_REQUIRE(q235.size() == 96u);
  BOOST_TEST(q235.front() == 0);
  BOOST_TEST(q235.back() == 0);
  BOOST_TEST(std::count(q235.begin(), q235.end(), 1) == 94);
}

BOOST_AUTO_TEST_CASE(the_evaluator_refuses_a_split_the_check_refuses) {
  // Called without check_config, an uneven split is an exception, not a read past the chunks;
  // the evaluator stays usable for the next configuration.
  Fixture f;
  TrainConfig c = megatron(8, 1, 8, 8, 1);
  c.layout.virtual_stages = 4;       // 24 layers over 32 chunks
  const ModelConfig m = gpt_1024();  // the evaluator keeps a reference
  MegatronEvaluator ev(m, f.device, f.profile.params);
  BOOST_TEST(!check_config(m, f.device, f.profile.params, c).empty());
  BOOST_CHECK_THROW(ev.predict(c), std::invalid_argument);
  BOOST_CHECK_THROW(ev.predict(c), std::invalid_argument);
  c.layout.virtual_stages = 1;
  BOOST_TEST(ev.predict(c).step_s > 0);
}

BOOST_AUTO_TEST_CASE(uneven_splits_that_cannot_run_are_one_line_errors) {
  const auto why = [](int64_t n, int64_t pp, int64_t vp, int64_t first, int64_t last, bool emb, bool loss) {
    std::string w;
    chunks_of(n, pp, vp, first, last, emb, loss, &w);
    BOOST_TEST(w.find('\n') == std::string::npos);
    return w;
  };
  BOOST_TEST(contains(why(24, 5, 1, 0, 0, false, false), "does not divide the 24 layers evenly"));
  BOOST_TEST(contains(why(126, 8, 8, 0, 0, false, false), "does not divide the 126 layers evenly"));
  BOOST_TEST(contains(why(24, 2, 1, 10, 10, false, false), "do not sum to the 24 layers"));
  BOOST_TEST(contains(why(24, 3, 1, 20, 20, false, false), "do not sum to the 24 layers"));
  BOOST_TEST(contains(why(25, 4, 1, 3, 3, false, false), "do not split evenly over 2 stages"));
  BOOST_TEST(contains(why(24, 2, 2, 3, 0, false, false), "virtual stages 2 do not divide"));
  BOOST_TEST(contains(why(24, 4, 1, 4, 20, false, false), "leaves model chunk 1 (stage 1) with no layers"));
  // Only a chunk holding the embedding or loss counted may build no layer: 24 + 1 over 25 chunks
  // of 1 leaves the first chunk the embedding alone.
  BOOST_TEST(why(24, 5, 5, 0, 0, true, false).empty());
  BOOST_TEST(contains(why(24, 4, 1, 3, 0, true, false), "cannot be combined"));
  BOOST_TEST(contains(why(24, 4, 1, 0, 0, true, false), "do not split evenly over pipeline parallel 4"));
  BOOST_TEST(contains(why(24, 1, 1, 0, 0, true, true), "needs pipeline parallel of at least 2"));
}

BOOST_FIXTURE_TEST_CASE(the_heavier_stage_of_an_uneven_split_sets_the_memory, Fixture) {
  // tp 2, pp 2, dp 2 on 8 GPUs, 8 micro-batches of 2; the first stage holds 8 layers and the
  // embedding, the last 16 layers, the final norm and the output's copy of the embedding. 1F1B:
  // the last stage keeps one micro-batch in flight, its 16 layers' saved bytes and the head's.
  const ModelConfig m = gpt_1024();
  TrainConfig c = megatron(8, 2, 2, 32, 2);
  c.layout.first_stage_layers = 8;
  BOOST_TEST_REQUIRE(check_config(m, device, profile.params, c).empty());
  MegatronEvaluator e(m, device, profile.params);
  const MemoryBreakdown mem = e.memory(c);
  const double block = static_cast<double>(layer_parameter_count(m)) / 2.0;
  const double last_stage = 16.0 * block + 2.0 * 1024.0 + 50432.0 * 1024.0 / 2.0;
  BOOST_TEST(mem.sharded_state_bytes == 16.0 * last_stage, tt::tolerance(1e-9));
  BlockShape s = tensor_parallel_shape(block_shape(m, 2, 1024, Precision::kAmpFp16), 2, false, 50432);
  s.fp32_vocab_parallel_xent = true;
  OpList head;
  head_forward_ops(s, head);
  BOOST_TEST(mem.activation_bytes == 16.0 * saved_of(s) + total_saved_bytes(head), tt::tolerance(1e-9));
  // Written as an uneven split, the even one (12 and 12) predicts exactly what the plain split does.
  TrainConfig even = megatron(8, 2, 2, 32, 2);
  TrainConfig written = even;
  written.layout.first_stage_layers = written.layout.last_stage_layers = 12;
  BOOST_TEST(e.predict(written).step_s == e.predict(even).step_s);
  BOOST_TEST(e.memory(written).peak_bytes == e.memory(even).peak_bytes);
  // The uneven split is slower than the even one: its 16-layer stage sets the pace.
  BOOST_TEST(e.predict(c).step_s > e.predict(even).step_s);
}

BOOST_FIXTURE_TEST_CASE(tp_comm_overlap_hides_each_collective_up_to_its_gemm, Fixture) {
  const BlockShape s = tensor_parallel_shape(block_shape(gpt_1024(), 2, 1024, Precision::kAmpBf16), 4, true,
                                             megatron_padded_vocab(50257, 4));
  const CostModel base(device, profile.params);
  const LinearSeconds f = linear_seconds(base, block_forward_ops, s, OpPass::kForward);
  const LinearSeconds b = linear_seconds(base, block_backward_ops, s, OpPass::kDataGrad);
  const double td = static_cast<double>(s.tokens()) * 1024.0 * 2.0;
  for (double link_slowdown : {1.0, 1e3}) {  // the link as it is, and so slow that every GEMM is shorter
    DeviceSpec slow = device;
    slow.intra_node_bytes_per_s /= link_slowdown;
    const CostModel cost(slow, profile.params);
    const CommGroup tp{.ranks = 4, .nodes = 1, .groups_per_node = 2};
    double fwd = 0, bwd = 0, fwd_on = 0, bwd_on = 0, ag = 0, rs = 0;
    tensor_parallel_seconds(cost, s, tp, false, td, fwd, bwd, ag, rs);
    tensor_parallel_seconds(cost, s, tp, true, td, fwd_on, bwd_on, ag, rs);
    BOOST_TEST(fwd == 2.0 * ag + 2.0 * rs, tt::tolerance(1e-12));
    const double hidden_fwd =
        std::min(ag, f.qkv) + std::min(rs, f.out) + std::min(ag, f.gate + f.up) + std::min(rs, f.down);
    const double hidden_bwd =
        std::min(ag, b.down) + std::min(rs, b.gate + b.up) + std::min(ag, b.out) + std::min(rs, b.qkv);
    BOOST_TEST(fwd - fwd_on == hidden_fwd, tt::tolerance(1e-9));
    BOOST_TEST(bwd - bwd_on == hidden_bwd, tt::tolerance(1e-9));
    if (link_slowdown > 1.0) BOOST_TEST(hidden_fwd == f.qkv + f.out + f.gate + f.up + f.down, tt::tolerance(1e-12));
  }
}

BOOST_FIXTURE_TEST_CASE(tp_comm_overlap_trades_exposed_collectives_for_slower_gemms, Fixture) {
  // tp 4 with sequence parallelism on 8 GPUs, 4 micro-batches: the blocks' collectives shrink to
  // what their GEMMs do not hide, and every block's GEMMs lose the SMs userbuffers hold.
  const ModelConfig m = gpt_1024();
  TrainConfig off = megatron(8, 4, 1, 8, 1);
  off.precision = Precision::kAmpBf16;
  off.layout.sequence_parallel = true;
  TrainConfig on = off;
  on.layout.tp_comm_overlap = true;
  BOOST_TEST_REQUIRE(check_config(m, device, profile.params, on).empty());
  MegatronEvaluator e(m, device, profile.params);
  const Prediction a = e.predict(off), b = e.predict(on);
  const BlockShape s = rank_shape(m, on, megatron_padded_vocab(m.vocab_size, 4));
  const CostModel cost(device, profile.params);
  const UserbuffersSmCost sm =
      userbuffers_sm_seconds(linear_seconds(cost, block_forward_ops, s, OpPass::kForward),
                             linear_seconds(cost, block_backward_ops, s, OpPass::kDataGrad), device.compute_units);
  BOOST_TEST(sm.fwd_s > 0);
  BOOST_TEST(b.time.gemm_s - a.time.gemm_s == 24.0 * 4.0 * (sm.fwd_s + sm.bwd_s), tt::tolerance(1e-6));
  BOOST_TEST(b.time.exposed_comm_s < a.time.exposed_comm_s);
  BOOST_TEST(b.step_s < a.step_s);
}

BOOST_FIXTURE_TEST_CASE(tp_comm_overlap_that_cannot_run_is_a_one_line_error, Fixture) {
  const ModelConfig m = gpt_1024();
  const auto why = [&](const TrainConfig& c) { return check_config(m, device, profile.params, c); };
  TrainConfig c = megatron(8, 1, 1, 8, 1);
  c.layout.tp_comm_overlap = true;
  BOOST_TEST(contains(why(c), "needs tensor parallel > 1 and sequence parallelism"));
  c = megatron(8, 2, 1, 8, 1);
  c.layout.tp_comm_overlap = true;
  BOOST_TEST(contains(why(c), "needs tensor parallel > 1 and sequence parallelism"));
  c.layout.sequence_parallel = true;
  BOOST_TEST(why(c).empty());
  c.layout.framework = Framework::kComposer;
  BOOST_TEST(!why(c).empty());
  c = megatron(8, 1, 2, 8, 1);
  c.layout.account_for_loss = true;
  c.layout.framework = Framework::kTorchtitan;
  BOOST_TEST(why(c).find('\n') == std::string::npos);
  BOOST_TEST(!why(c).empty());
}

BOOST_FIXTURE_TEST_CASE(combined_1f1b_hides_all_to_alls_behind_another_micro_batchs_compute, Fixture) {
  // Mixtral on one node of 8 at ep 8, 8 micro-batches of 4096 tokens, no pipelining: Megatron-Core's
  // combined 1F1B runs the first forward alone, then each backward merged with the next
  // micro-batch's forward, then the last backward. A merged layer hides at most its four
  // all-to-alls, so the step saves at most 7 x 32 x 4 of them, and it does save some.
  const ModelConfig& m = mixtral();
  TrainConfig off = megatron(8, 1, 1, 64, 1);
  off.precision = Precision::kAmpBf16;
  off.seq_len = 4096;
  off.layout.expert = 8;
  TrainConfig on = off;
  on.layout.moe_a2a_overlap = true;
  BOOST_TEST_REQUIRE(check_config(m, device, profile.params, on).empty());
  MegatronEvaluator e(m, device, profile.params);
  const Prediction a = e.predict(off), b = e.predict(on);
  const CostModel cost(device, profile.params);
  const BlockShape s = rank_shape(m, on, 32000);
  const double a2a = all_to_all_seconds(cost, moe_dispatch_bytes(s), model_parallel_layout(on.layout, 8, 8).ep_group);
  BOOST_TEST(a2a > 0);
  BOOST_TEST(b.step_s < a.step_s);
  BOOST_TEST(a.step_s - b.step_s <= 7.0 * 32.0 * 4.0 * a2a * (1 + 1e-9));
  BOOST_TEST(b.time.exposed_comm_s < a.time.exposed_comm_s);
  BOOST_TEST(a.time.exposed_comm_s - b.time.exposed_comm_s == a.step_s - b.step_s, tt::tolerance(1e-9));
  // The merged step's forward holds one more micro-batch's activations.
  const MemoryBreakdown ma = e.memory(off), mb = e.memory(on);
  BlockShape as_run = s;  // the shape's flags as MegatronEvaluator sets them
  as_run.fp32_vocab_parallel_xent = as_run.fused_swiglu = as_run.native_attention = true;
  as_run.per_expert_launches = as_run.fp8_weight_cache = as_run.moe_probs_in_activation = true;
  OpList embed;
  embedding_forward_ops(as_run, embed);
  BOOST_TEST(mb.activation_bytes - ma.activation_bytes == 32.0 * saved_of(as_run) + total_saved_bytes(embed),
             tt::tolerance(1e-9));

  // With pipeline parallelism the combined schedule is the interleaved one's: 2 stages x 2 chunks
  // of 8 layers, 8 micro-batches.
  TrainConfig pp_off = off;
  pp_off.layout.pipeline = 2;
  pp_off.layout.virtual_stages = 2;
  pp_off.n_gpus = 16;
  pp_off.global_batch = 64;
  TrainConfig pp_on = pp_off;
  pp_on.layout.moe_a2a_overlap = true;
  BOOST_TEST_REQUIRE(check_config(m, device, profile.params, pp_on).empty());
  BOOST_TEST(e.predict(pp_on).step_s < e.predict(pp_off).step_s);
}

// Delayed weight gradients (--delay-wgrad-compute) under combined 1F1B: the experts' weight
// gradients after their data gradients, so the dispatch's backward all-to-all starts sooner; on
// Qwen3-30B-A3B's experts over two H100 nodes (ep 16, the all-to-all across InfiniBand) less of the
// communication is exposed and the step is shorter, for the same GPU work.
BOOST_AUTO_TEST_CASE(delayed_weight_gradients_start_the_dispatch_backward_sooner) {
  const ModelConfig m = tpsim::test::shipped_hf("qwen3-30b-a3b");
  const DeviceSpec h100 = load_device("h100_80gb");
  const CostParams params = load_shipped_profile("h100_80gb").params;
  TrainConfig c{.seq_len = 4096, .global_batch = 256, .micro_batch = 1, .n_gpus = 32};
  c.layout.framework = Framework::kMegatron;
  c.layout.expert = 16, c.layout.pipeline = 2, c.layout.virtual_stages = 2;
  c.layout.delay_wgrad = true;
  BOOST_TEST(contains(check_config(m, h100, params, c), "--delay-wgrad-compute) need the expert-parallel all-to-all"));
  c.layout.moe_a2a_overlap = true;
  TrainConfig now = c;
  now.layout.delay_wgrad = false;
  BOOST_TEST_REQUIRE(check_config(m, h100, params, c) == "");
  const Prediction delayed = predict(m, h100, params, c), at_once = predict(m, h100, params, now);
  BOOST_TEST(delayed.step_s < at_once.step_s);
  BOOST_TEST(delayed.time.gemm_s == at_once.time.gemm_s, tt::tolerance(1e-12));
  BOOST_TEST(delayed.time.exposed_comm_s < at_once.time.exposed_comm_s);
}

BOOST_FIXTURE_TEST_CASE(combined_1f1b_that_cannot_run_is_a_one_line_error, Fixture) {
  // Megatron-Core's TransformerConfig asserts: expert parallelism, no full recompute, bf16 or fp16
  // weights, and with pipeline parallelism the interleaved schedule.
  const auto why = [&](const ModelConfig& m, const TrainConfig& c) {
    return check_config(m, device, profile.params, c);
  };
  TrainConfig c = megatron(8, 1, 1, 8, 1);
  c.precision = Precision::kAmpBf16;
  c.layout.moe_a2a_overlap = true;
  BOOST_TEST(contains(why(gpt_1024(), c), "needs a mixture-of-experts model with expert parallel > 1"));
  BOOST_TEST(contains(why(mixtral(), c), "needs a mixture-of-experts model with expert parallel > 1"));
  c.layout.expert = 8;
  BOOST_TEST(why(mixtral(), c).empty());
  c.layout.checkpointing = Checkpointing::kFull;
  BOOST_TEST(contains(why(mixtral(), c), "does not run with full recompute"));
  c.layout.checkpointing = Checkpointing::kSelective;
  BOOST_TEST(why(mixtral(), c).empty());
  c.precision = Precision::kFp32;
  BOOST_TEST(contains(why(mixtral(), c), "needs bf16 or fp16 weights"));
  c = megatron(16, 1, 2, 16, 1);
  c.precision = Precision::kAmpBf16;
  c.layout.expert = 8;
  c.layout.moe_a2a_overlap = true;
  BOOST_TEST(contains(why(mixtral(), c), "needs virtual stages (--vp) of at least 2"));
  c.layout.framework = Framework::kTorchtitan;
  BOOST_TEST(!why(mixtral(), c).empty());
  BOOST_TEST(why(mixtral(), c).find('\n') == std::string::npos);
}

// Megatron-FSDP (megatron/core/distributed/fsdp) on one stage of 8 ranks, bf16 with fp32 main
// gradients: optim shards the 12 bytes of master weights and Adam moments (the distributed
// optimizer's memory); optim_grads the 4 bytes of gradients too, beside two layers' unsharded
// gradient buffers; optim_grads_params the 2 bytes of weights too, beside the two layers being
// computed and prefetched and the tied embedding and output layer gathered whole.
BOOST_FIXTURE_TEST_CASE(megatron_fsdp_shards_what_its_strategy_names, Fixture) {
  const ModelConfig m = gpt_1024();
  TrainConfig c = megatron(8, 1, 1, 32, 1);
  c.precision = Precision::kAmpBf16;
  MegatronEvaluator e(m, device, profile.params);
  const auto state = [&](MegatronFsdp strategy) {
    set_megatron_fsdp(c.layout, strategy);
    BOOST_TEST_REQUIRE(check_config(m, device, profile.params, c).empty());
    return e.memory(c).sharded_state_bytes;
  };
  const double optim = state(MegatronFsdp::kOptim);
  const double params = optim / (2.0 + 4.0 + 12.0 / 8.0);  // this stage's parameters: all of them
  const double block = static_cast<double>(layer_parameter_count(m));
  const double root = params - 24.0 * block;  // the padded embedding, positions and final norm
  BOOST_TEST(root > 50257.0 * 1024.0);
  BOOST_TEST(root < 51000.0 * 1024.0 + 1024.0 * 1024.0);
  BOOST_TEST(state(MegatronFsdp::kOptimGrads) == 2.0 * params + 4.0 * params / 8.0 + 2.0 * 4.0 * block + 1.5 * params,
             tt::tolerance(1e-9));
  BOOST_TEST(state(MegatronFsdp::kOptimGradsParams) == 2.0 * params / 8.0 + 2.0 * 2.0 * block + 2.0 * root +
                                                           4.0 * params / 8.0 + 2.0 * 4.0 * block + 1.5 * params,
             tt::tolerance(1e-9));
  // The layout as Megatron-Bridge runs it: the distributed optimizer on from optim, the gradient
  // reduction overlapped, and the FSDP strategy each amounts to in the Sharding Strategy column.
  BOOST_TEST(c.layout.distributed_optimizer);
  BOOST_TEST(c.layout.overlap_grad_reduce);
  BOOST_TEST(to_string(c.layout.sharding) == "FULL_SHARD");
  set_megatron_fsdp(c.layout, MegatronFsdp::kOptimGrads);
  BOOST_TEST(to_string(c.layout.sharding) == "SHARD_GRAD_OP");
  set_megatron_fsdp(c.layout, MegatronFsdp::kNoShard);
  BOOST_TEST(!c.layout.distributed_optimizer);
  BOOST_TEST(to_string(c.layout.sharding) == "NO_SHARD");
}

// Megatron-FSDP communicates every micro-batch (each layer's gradients reduce-scattered after its
// backward; under optim_grads_params each layer gathered before its forward and its backward),
// where the distributed optimizer reduces once a step. On a link a thousand times slower than
// NVLink the collectives dominate: two more micro-batches add two micro-batches' compute to a
// distributed-optimizer step and 2 x 24 layers' collectives to a Megatron-FSDP one, more again
// when the parameters are gathered too.
BOOST_FIXTURE_TEST_CASE(megatron_fsdp_communicates_every_micro_batch, Fixture) {
  const ModelConfig m = gpt_1024();
  DeviceSpec slow = device;
  slow.intra_node_bytes_per_s /= 1000.0;
  MegatronEvaluator e(m, slow, profile.params);
  const auto added = [&](MegatronFsdp strategy) {
    TrainConfig c = megatron(8, 1, 1, 16, 1);
    c.precision = Precision::kAmpBf16;
    set_megatron_fsdp(c.layout, strategy);
    BOOST_TEST_REQUIRE(check_config(m, slow, profile.params, c).empty());
    const double two = e.predict(c).step_s;
    c.global_batch = 32;
    return e.predict(c).step_s - two;
  };
  const double optim = added(MegatronFsdp::kOptim), grads = added(MegatronFsdp::kOptimGrads);
  const double params = added(MegatronFsdp::kOptimGradsParams);
  TrainConfig fast = megatron(8, 1, 1, 32, 1);
  fast.precision = Precision::kAmpBf16;
  fast.layout.distributed_optimizer = true;
  const Prediction p = MegatronEvaluator(m, device, profile.params).predict(fast);
  BOOST_TEST(optim < 2.0 * p.step_s / 4.0 * 1.05);  // two of the 4 micro-batches' compute, no more
  BOOST_TEST(grads > 10.0 * optim);
  BOOST_TEST(params > 1.5 * grads);
  // And the breakdown says where: the step's parts still add to it.
  TrainConfig c = megatron(8, 1, 1, 32, 1);
  c.precision = Precision::kAmpBf16;
  set_megatron_fsdp(c.layout, MegatronFsdp::kOptimGradsParams);
  const Prediction q = e.predict(c);
  BOOST_TEST(q.time.exposed_comm_s > 0.5 * q.step_s);
  const StepBreakdown& t = q.time;
  BOOST_TEST(t.gemm_s + t.attention_s + t.other_compute_s + t.exposed_comm_s + t.optimizer_s + t.overhead_s +
                     t.pipeline_bubble_s + t.allocator_s ==
                 q.step_s,
             tt::tolerance(1e-6));
}

BOOST_FIXTURE_TEST_CASE(megatron_fsdp_layouts_tpsim_does_not_model_are_refused, Fixture) {
  const ModelConfig m = gpt_1024();
  const auto rule = [&](const TrainConfig& c) { return first_broken_rule(m, device, profile.params, c); };
  TrainConfig c = megatron(8, 1, 2, 32, 1);
  c.precision = Precision::kAmpBf16;
  set_megatron_fsdp(c.layout, MegatronFsdp::kOptimGrads);
  BOOST_TEST(rule(c).rule == "megatron-fsdp-modelled");
  BOOST_TEST(contains(rule(c).why, "optim_grads with pipeline parallel 2"));
  set_megatron_fsdp(c.layout, MegatronFsdp::kOptim);  // ZeRO-1 is the distributed optimizer's: any stages
  BOOST_TEST(rule(c).rule == "");
  c = megatron(8, 1, 1, 32, 1);
  c.precision = Precision::kAmpBf16;
  set_megatron_fsdp(c.layout, MegatronFsdp::kOptimGradsParams);
  c.layout.distributed_optimizer = false;  // a measured row's own column
  BOOST_TEST(contains(rule(c).why, "shards the optimizer state: the Distributed Optimizer column says otherwise"));
  c.layout.distributed_optimizer = true;
  c.layout.framework = Framework::kTorchtitan;
  BOOST_TEST(rule(c).rule == "option-owned");
  BOOST_TEST(contains(rule(c).why, "Megatron-Core's option; use --framework megatron"));
}

BOOST_AUTO_TEST_CASE(measured_tables_read_the_megatron_fsdp_strategy) {
  const std::string head =
      "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Recompute,Megatron FSDP,"
      "Throughput (T/s)\n";
  const MeasuredTable t = parse_measured_table(head +
                                                   "llama-3-8b,8192,8,h100_80gb,amp_bf16,1,128,megatron,none,"
                                                   "optim_grads_params,100000\n"
                                                   "llama-3-8b,8192,8,h100_80gb,amp_bf16,1,128,megatron,none,,100000\n",
                                               "t.csv");
  BOOST_TEST_REQUIRE(t.rows.size() == 2u);
  const Layout& zero3 = t.rows[0].config().layout;
  BOOST_TEST(to_string(zero3.megatron_fsdp) == "optim_grads_params");
  BOOST_TEST(zero3.distributed_optimizer);
  BOOST_TEST(to_string(zero3.sharding) == "FULL_SHARD");
  BOOST_TEST(to_string(t.rows[1].config().layout.megatron_fsdp) == "off");
  BOOST_TEST(to_string(t.rows[1].config().layout.sharding) == "NO_SHARD");
  BOOST_TEST(test::error_of([&] {
               parse_measured_table(head + "llama-3-8b,8192,8,h100_80gb,amp_bf16,1,128,megatron,none,zero3,100000\n",
                                    "t.csv");
             }) ==
             "t.csv:2: column 'Megatron FSDP' must be off, no_shard, optim, optim_grads or optim_grads_params, "
             "got 'zero3'");
}

BOOST_AUTO_TEST_CASE(recent_costs_keep_the_last_four_committed_costings) {
  struct Entry {
    int key = 0;
  };
  RecentCosts<Entry> memo;
  const auto is = [](int k) { return [k](int key) { return key == k; }; };
  for (int k = 1; k <= 5; ++k) {
    memo.start().key = k;
    memo.commit();
  }
  BOOST_TEST(!memo.find(is(1)));  // the oldest, replaced by the fifth
  for (int k = 2; k <= 5; ++k) BOOST_TEST(memo.find(is(k))->key == k);
  memo.start().key = 6;  // a costing that threw before its commit
  BOOST_TEST(!memo.find(is(6)));
  BOOST_TEST(!memo.find(is(2)));  // its slot was the oldest's
  BOOST_TEST(memo.find(is(3)));
}
