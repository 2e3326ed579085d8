// LoRA fine-tuning (model/lora.hpp): the targets as each framework names them, the adapters'
// parameters, FLOPs and kept activations, and the memory and metrics of a run, each against a hand
// computation on Llama 3 8B's shapes (d 4096, 32 heads, 8 K/V heads of 128, SwiGLU of 14336).
#define BOOST_TEST_MODULE lora
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "common.hpp"
#include "io/devices.hpp"
#include "io/measured_table.hpp"
#include "io/profile_io.hpp"
#include "model/lora.hpp"
#include "model/metrics.hpp"
#include "model/ops.hpp"
#include "model/rules.hpp"
#include "model/simulator.hpp"

using namespace tpsim;
using tpsim::test::contains;
namespace tt = boost::test_tools;

namespace {

constexpr double d(int64_t x) { return static_cast<double>(x); }

ModelConfig llama8b() { return test::llama(4096, 32, 8, 32, 14336, 128256); }

Lora lora(int64_t rank, const std::string& targets) {
  Lora l;
  l.rank = rank;
  BOOST_TEST_REQUIRE(parse_lora_targets(targets, l).empty(), targets);
  return l;
}

BlockShape shape(const ModelConfig& m, const Lora& l, int64_t tokens = 4096) {
  BlockShape s = block_shape(m, 1, tokens, Precision::kAmpBf16);
  s.lora = l;
  return s;
}

struct Sums {
  double flops = 0, saved = 0;
  int weight_grads = 0;
};
Sums sums(void (*build)(const BlockShape&, OpSink&), const BlockShape& s) {
  OpList ops;
  build(s, ops);
  Sums out{total_flops(ops), total_saved_bytes(ops), 0};
  for (const Op& op : ops)
    if (op.pass == OpPass::kWeightGrad) ++out.weight_grads;
  return out;
}

TrainConfig run(Framework f, const Lora& l) {
  TrainConfig c{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = 8, .precision = Precision::kAmpBf16};
  c.layout.framework = f;
  c.layout.sharding = f == Framework::kMegatron ? Sharding::kNoShard : Sharding::kFullShard;
  c.layout.distributed_optimizer = f == Framework::kMegatron;
  c.lora = l;
  return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(targets_are_read_under_each_frameworks_names_and_written_back) {
  const Lora m = lora(16, "linear_qkv,linear_proj,linear_fc1,linear_fc2");
  BOOST_TEST(m.target_bits == kLoraAll);
  BOOST_TEST((m.fused_qkv && m.fused_fc1));
  BOOST_TEST(lora_targets_name(m) == "linear_qkv,linear_proj,linear_fc1,linear_fc2");
  const Lora hf = lora(8, "q_proj, v_proj");
  BOOST_TEST(hf.target_bits == (lora_bit(LoraTarget::kQ) | lora_bit(LoraTarget::kV)));
  BOOST_TEST(!hf.fused_qkv);
  BOOST_TEST(lora_targets_name(hf) == "q_proj,v_proj");
  const Lora titan = lora(8, "wq,wk,wv,wo,w1,w3,w2");
  BOOST_TEST(titan.target_bits == kLoraAll);
  BOOST_TEST(lora_targets_name(titan) == "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
  BOOST_TEST(lora(8, "all-linear").target_bits == kLoraAll);
  const Lora mpt = lora(64, "Wqkv");
  BOOST_TEST((mpt.target_bits == kLoraQkv && mpt.fused_qkv));
  Lora bad;
  BOOST_TEST(contains(parse_lora_targets("c_attn", bad), "'c_attn' is not a linear tpsim knows"));
  BOOST_TEST(contains(parse_lora_targets("linear_qkv,k_proj", bad), "named both as one fused linear"));
  BOOST_TEST(contains(parse_lora_targets("q_proj,,v_proj", bad), "an empty module name"));
}

// r x (k + n) per adapter, over each linear's k and n; one adapter per fused linear.
BOOST_AUTO_TEST_CASE(adapter_parameters_are_rank_times_in_plus_out_per_adapter) {
  const ModelConfig m = llama8b();
  BOOST_TEST(lora_block_params(shape(m, lora(16, "linear_qkv"))) == 16.0 * (4096 + (4096 + 2 * 1024)));
  BOOST_TEST(lora_block_params(shape(m, lora(8, "q_proj,v_proj"))) == 8.0 * (4096 + 4096) + 8.0 * (4096 + 1024));
  const double all = 16.0 * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 14336));
  BOOST_TEST(lora_block_params(shape(m, lora(16, "all-linear"))) == all);
  // Megatron-Core's four fused linears: qkv, proj, fc1 over gate and up (n 2 x 14336), fc2.
  const double megatron = 16.0 * ((4096 + 6144) + (4096 + 4096) + (4096 + 28672) + (14336 + 4096));
  const Lora four = lora(16, "linear_qkv,linear_proj,linear_fc1,linear_fc2");
  BOOST_TEST(lora_block_params(shape(m, four)) == megatron);  // gate and up run as two linears here
  BlockShape fused = shape(m, four);
  fused.fused_swiglu = true;  // Megatron-Core's one fc1 GEMM
  BOOST_TEST(lora_block_params(fused) == megatron);
  // Tensor parallel 2: each rank's slice (the column-parallel qkv's n and the row-parallel proj's k halved).
  const BlockShape tp2 = tensor_parallel_shape(shape(m, lora(16, "linear_qkv,linear_proj")), 2, true, 128256);
  BOOST_TEST(lora_block_params(tp2) == 16.0 * (4096 + 3072) + 16.0 * (2048 + 4096));
  BOOST_TEST(lora_block_params(shape(m, Lora{})) == 0.0);
  BOOST_TEST(lora_model_block_params(m, four) == megatron);
}

// Forward: the base GEMMs and the adapter's 2 t r (k + n). Backward: the base weight gradients
// gone (2 t x the linears' parameters), the adapter's two data and two weight gradients
// (4 t r (k + n)) in their place; nothing else changes FLOPs.
BOOST_AUTO_TEST_CASE(a_frozen_block_drops_its_weight_gradients_and_adds_its_adapters_gemms) {
  const ModelConfig m = llama8b();
  const double t = 4096, r = 16, k = 4096, n = 4096 + 2 * 1024;
  const double linear_params = 4096.0 * 6144 + 4096.0 * 4096 + 3 * 4096.0 * 14336;
  const Sums full_f = sums(block_forward_ops, shape(m, {}));
  const Sums full_b = sums(block_backward_ops, shape(m, {}));
  const Sums lora_f = sums(block_forward_ops, shape(m, lora(16, "linear_qkv")));
  const Sums lora_b = sums(block_backward_ops, shape(m, lora(16, "linear_qkv")));
  BOOST_TEST(lora_f.flops == full_f.flops + 2 * t * r * (k + n), tt::tolerance(1e-12));
  BOOST_TEST(lora_b.flops == full_b.flops - 2 * t * linear_params + 4 * t * r * (k + n), tt::tolerance(1e-12));
  BOOST_TEST(full_b.weight_grads == 5);  // qkv, out, gate, up, down
  BOOST_TEST(lora_b.weight_grads == 2);  // the adapter's A and B
  // Kept for the backward: no frozen linear keeps its input for a weight gradient (the gate's x and
  // the down projection's input, t x (d + 14336) in bf16, no longer); the adapter keeps the QKV
  // input the base kept, and its t x r intermediate.
  BOOST_TEST(lora_b.saved == 0.0);
  BOOST_TEST(lora_f.saved == full_f.saved - 2.0 * t * (4096 + 14336) + 2.0 * t * r, tt::tolerance(1e-12));
  // The head: no weight gradient of the output projection (2 t d V), and no kept input for it.
  OpList full_head, lora_head;
  head_backward_ops(shape(m, {}), full_head);
  head_backward_ops(shape(m, lora(16, "linear_qkv")), lora_head);
  BOOST_TEST(total_flops(lora_head) == total_flops(full_head) - 2.0 * t * 4096 * 128256, tt::tolerance(1e-12));
  OpList embed;
  embedding_backward_ops(shape(m, lora(16, "linear_qkv")), embed);
  BOOST_TEST(embed.size() == 0);
}

// Composer FSDP over 8 GPUs: 16 bytes per trained parameter (fp32 weight, gradient, Adam's two
// moments) and 4 per frozen one, sharded 8 ways.
BOOST_AUTO_TEST_CASE(composer_and_torchtitan_keep_four_bytes_per_frozen_parameter_and_sixteen_per_adapter) {
  const ModelConfig m = llama8b();
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  const Lora l = lora(16, "linear_qkv");
  const double base = d(parameter_count(m, 4096)), adapters = 32.0 * 16 * (4096 + 6144);
  for (Framework f : {Framework::kComposer, Framework::kTorchtitan}) {
    BOOST_TEST_CONTEXT(to_string(f)) {
      Evaluator e(m, device, profile.params);
      const MemoryBreakdown full = e.memory(run(f, {}));
      const MemoryBreakdown tuned = e.memory(run(f, l));
      BOOST_TEST(full.sharded_state_bytes == 16.0 * base / 8, tt::tolerance(1e-12));
      BOOST_TEST(tuned.sharded_state_bytes == (4.0 * (base + adapters) + 12.0 * adapters) / 8, tt::tolerance(1e-12));
      BOOST_TEST(tuned.peak_bytes < full.peak_bytes);
    }
  }
}

// Megatron-Core, one stage, distributed optimizer over 8 ranks: the bf16 weights of every parameter
// (2 bytes), fp32 main gradients of the adapters only (4), their fp32 master weights and moments
// (12) sharded 8 ways.
BOOST_AUTO_TEST_CASE(megatron_keeps_bf16_frozen_weights_and_grads_and_optimizer_state_of_the_adapters) {
  const ModelConfig m = llama8b();
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  const Lora l = lora(16, "linear_qkv,linear_proj,linear_fc1,linear_fc2");
  const double base = d(parameter_count(m, 4096));
  const double adapters = 32.0 * 16 * ((4096 + 6144) + (4096 + 4096) + (4096 + 28672) + (14336 + 4096));
  Evaluator e(m, device, profile.params);
  const MemoryBreakdown full = e.memory(run(Framework::kMegatron, {}));
  const MemoryBreakdown tuned = e.memory(run(Framework::kMegatron, l));
  BOOST_TEST(full.sharded_state_bytes == 2.0 * base + 4.0 * base + 12.0 * base / 8, tt::tolerance(1e-12));
  BOOST_TEST(tuned.sharded_state_bytes == 2.0 * (base + adapters) + 4.0 * adapters + 12.0 * adapters / 8,
             tt::tolerance(1e-12));
  // Time: the weight gradients, the gradient reduce-scatter of 8 billion parameters and their Adam
  // step are gone; the optimizer steps 1/8 of the adapters.
  const Prediction pf = e.predict(run(Framework::kMegatron, {}));
  const Prediction pt = e.predict(run(Framework::kMegatron, l));
  BOOST_TEST(pt.step_s < pf.step_s);
  BOOST_TEST(pt.time.gemm_s < pf.time.gemm_s);
  BOOST_TEST(pt.time.optimizer_s < pf.time.optimizer_s / 100);
  BOOST_TEST(pt.time.attention_s == pf.time.attention_s, tt::tolerance(1e-12));
}

// llm-foundry's MFU of a LoRA run: the forward and data gradient over base and adapters, the weight
// gradient over the adapters (Megatron-Bridge's frozen x 2/3, NeMo AutoModel's (2 + lora/frozen)/3).
BOOST_AUTO_TEST_CASE(the_mfu_of_a_lora_run_counts_the_adapters_weight_gradients_only) {
  const int64_t n = 1000000000, lora_params = 10000000, layers = 10, d_model = 1000, seq = 1000;
  const double per_seq = 2.0 * d(n + lora_params) * seq;  // foundry_flops_per_seq of base and adapters
  const double attn = 10.0 * 2 * 2 * 1000 * 1000.0 * 1000;
  const FoundryMetrics fm = foundry_metrics(n, layers, d_model, seq, 1.0, 1, 1e15, Checkpointing::kFull, lora_params);
  BOOST_TEST(fm.model_flops_per_s_per_gpu == 2 * per_seq + 2.0 * d(lora_params) * seq + 3 * attn, tt::tolerance(1e-12));
  BOOST_TEST(fm.hfu * 1e15 == 3 * per_seq + 2.0 * d(lora_params) * seq + 4 * attn, tt::tolerance(1e-12));
  // Without LoRA, llm-foundry's 3x.
  const FoundryMetrics plain = foundry_metrics(n, layers, d_model, seq, 1.0, 1, 1e15, Checkpointing::kNone);
  BOOST_TEST(plain.model_flops_per_s_per_gpu == 3 * 2.0 * d(n) * seq + 3 * attn, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(what_lora_does_not_model_is_refused_by_name) {
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  const auto broken = [&](const ModelConfig& m, const Lora& l) {
    TrainConfig c = run(Framework::kComposer, l);
    const BrokenRule b = first_broken_rule(m, device, profile.params, c);
    return std::string(b.rule) + ": " + b.why;
  };
  ModelConfig moe = llama8b();
  moe.name = "moe";
  moe.moe = {.experts = 8, .top_k = 2, .d_expert = 14336};
  BOOST_TEST(contains(broken(moe, lora(16, "all-linear")), "lora-targets-modelled: LoRA on q_proj"));
  BOOST_TEST(contains(broken(moe, lora(16, "all-linear")), "is a mixture of experts"));
  BOOST_TEST(broken(moe, lora(16, "q_proj,v_proj")) == ": ");
  ModelConfig mlp = test::gpt2();
  mlp.max_positions = 4096;
  BOOST_TEST(contains(broken(mlp, lora(16, "gate_proj")), "without a gate projection"));
  BOOST_TEST(broken(mlp, lora(16, "linear_fc1")) == ": ");  // an MLP's fc1 is its up projection
  Lora no_targets;
  no_targets.rank = 16;
  BOOST_TEST(contains(broken(llama8b(), no_targets), "without targets"));
}

BOOST_AUTO_TEST_CASE(measured_tables_read_lora_rank_and_targets) {
  const std::string head =
      "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Recompute,LoRA Rank,"
      "LoRA Targets,Throughput (T/s)\n";
  const MeasuredTable t = parse_measured_table(head +
                                                   "llama-3-8b,4096,8,h100_80gb,amp_bf16,1,32,megatron,none,16,"
                                                   "linear_qkv;linear_proj,1000\n"
                                                   "llama-3-8b,4096,8,h100_80gb,amp_bf16,1,32,megatron,none,0,,1000\n",
                                               "t.csv");
  BOOST_TEST_REQUIRE(t.rows.size() == 2u);
  BOOST_TEST(t.rows[0].config().lora.rank == 16);
  BOOST_TEST(t.rows[0].config().lora.target_bits == (kLoraQkv | lora_bit(LoraTarget::kO)));
  BOOST_TEST(!t.rows[1].config().lora.active());
  const auto error = [&](const std::string& row) {
    try {
      parse_measured_table(head + row, "t.csv");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  BOOST_TEST(error("llama-3-8b,4096,8,h100_80gb,amp_bf16,1,32,megatron,none,16,,1000\n") ==
             "t.csv:2: 'LoRA Rank' 16 without 'LoRA Targets'");
  BOOST_TEST(contains(error("llama-3-8b,4096,8,h100_80gb,amp_bf16,1,32,megatron,none,16,c_attn,1000\n"),
                      "t.csv:2: 'LoRA Targets': 'c_attn' is not a linear tpsim knows"));
}
