// Megatron-LM layouts: tensor-parallel shapes, the FLOPs and memory of a rank against hand-computed
// cases, the rank groups, and the layouts that cannot run.
#define BOOST_TEST_MODULE megatron
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "common.hpp"
#include "model/megatron.hpp"
#include "model/ops.hpp"
#include "model/parallelism.hpp"
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
  TrainConfig c{.seq_len = 1024, .global_batch = global_batch, .micro_batch = micro_batch, .n_gpus = gpus,
                .precision = Precision::kAmpFp16};
  c.parallel.framework = Framework::kMegatron;
  c.parallel.tensor = tp;
  c.parallel.pipeline = pp;
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
    BOOST_TEST(flops_of(block_forward_ops, part) * static_cast<double>(tp) ==
               flops_of(block_forward_ops, full), tt::tolerance(1e-12));
    BOOST_TEST(flops_of(block_backward_ops, part) * static_cast<double>(tp) ==
               flops_of(block_backward_ops, full), tt::tolerance(1e-12));
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
  const double stats = 2.0 * tokens * 8.0;            // two LayerNorms' mean and rstd
  const double lse = 2.0 * 16.0 * 1024.0 * 4.0;       // log-sum-exp per head and row
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
  Parallelism par;
  par.framework = Framework::kMegatron;
  par.tensor = 4;
  par.pipeline = 4;
  const MegatronLayout l = megatron_layout(par, 64, 8);
  BOOST_TEST(l.dp == 4);
  BOOST_TEST(l.tp_group.ranks == 4);
  BOOST_TEST(l.tp_group.nodes == 1);
  BOOST_TEST(l.dp_group.ranks == 4);
  BOOST_TEST(l.dp_group.nodes == 2);
  BOOST_TEST(l.dp_group.groups_per_node == 4);
  BOOST_TEST(l.stage_link_crosses_nodes);
  // One node: everything inside it.
  const MegatronLayout one = megatron_layout(par, 16, 8);
  BOOST_TEST(one.dp == 1);
  BOOST_TEST(one.stage_link_crosses_nodes);  // stages 4 ranks apart: pp 4 spans two nodes
  par.pipeline = 2;
  BOOST_TEST(!megatron_layout(par, 8, 8).stage_link_crosses_nodes);
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
  c.parallel.distributed_optimizer = true;
  BOOST_TEST(e.memory(c).sharded_state_bytes == (4.0 + 12.0 / 2.0) * params, tt::tolerance(1e-9));
  // Full recompute keeps only each layer's input (and, on the last stage, the head's fp32 softmax
  // of the cross-entropy for the micro-batch in flight).
  c.parallel.distributed_optimizer = false;
  c.checkpointing = Checkpointing::kFull;
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
    const double parts = b.gemm_s + b.attention_s + b.other_compute_s + b.exposed_comm_s + b.optimizer_s + b.overhead_s +
                         b.pipeline_bubble_s;
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
  BOOST_TEST(contains(why(c), "does not divide the 12 GPUs"));
  c = megatron(8, 2, 1, 16, 3);
  BOOST_TEST(contains(why(c), "micro-batch 3 does not divide"));
  c = megatron(8, 2, 1, 8, 1);
  c.parallel.context = 2;
  BOOST_TEST(contains(why(c), "context parallelism (2) is not modelled yet"));
  c.parallel.context = 1;
  c.parallel.virtual_stages = 2;
  BOOST_TEST(contains(why(c), "need pipeline parallelism of at least 2"));
  c = megatron(8, 2, 1, 8, 1);
  c.parallel.framework = Framework::kComposer;
  BOOST_TEST(contains(why(c), "composer runs FSDP without tensor"));
  c.parallel.framework = Framework::kTorchtitan;
  BOOST_TEST(contains(why(c), "torchtitan is not modelled yet"));
  for (const TrainConfig& bad : {megatron(24, 3, 1, 24, 1), megatron(12, 8, 1, 12, 1)})
    BOOST_TEST(why(bad).find('\n') == std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(composer_is_unchanged_by_the_new_fields, Fixture) {
  // A composer configuration predicts exactly as before Parallelism existed: the same object path.
  ModelCatalog catalog = ModelCatalog::load_default();
  const ModelConfig& m = catalog.get("1b");
  const TrainConfig c{.seq_len = 2048, .global_batch = 512, .micro_batch = 8, .n_gpus = 8};
  const Prediction a = predict(m, device, profile.params, c);
  TrainConfig same = c;
  same.parallel = Parallelism{};
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
  BOOST_TEST(flops_of(block_forward_ops, s) - flops_of(block_forward_ops, flash) ==
             2.0 * b * heads * seq * seq * dh, tt::tolerance(1e-12));
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
}  // namespace

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
