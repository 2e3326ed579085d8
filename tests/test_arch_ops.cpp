// The ops, cost, memory and metrics of the architectures beyond MPT (issue 14): each checked
// against a hand formula with a stated tolerance.
#define BOOST_TEST_MODULE arch_ops
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>

#include "calibrate/step_ops.hpp"
#include "common.hpp"
#include "model/cost.hpp"
#include "model/metrics.hpp"
#include "model/ops.hpp"
#include "model/simulator.hpp"

using namespace tpsim;
namespace tt = boost::test_tools;

namespace {
// Sums of products of whole numbers below 2^53: exact up to the last rounding.
constexpr double kExact = 1e-12;
// A capacity factor's slots are rounded up to whole tokens per expert.
constexpr double kCeilTol = 1e-3;

using tpsim::test::llama;
ModelConfig llama3_8b() { return llama(4096, 32, 8, 32, 14336, 128256); }
ModelConfig mixtral_8x7b() {
  ModelConfig m = llama(4096, 32, 8, 32, 14336, 32000);
  m.name = "mixtral";
  m.moe = {.experts = 8, .top_k = 2, .d_expert = 14336};
  return m;
}

// Qwen2-MoE's shape: shared expert with its sigmoid gate, output bias (the largest block).
ModelConfig qwen2_moe() {
  ModelConfig m = llama(2048, 16, 16, 24, 5632, 151936);
  m.moe = {.experts = 60,
           .top_k = 4,
           .d_expert = 1408,
           .shared_experts = 1,
           .d_shared = 5632,
           .shared_gate = true,
           .capacity_factor = 0,
           .output_bias = true};
  return m;
}

double d(int64_t x) { return static_cast<double>(x); }

template <typename Pred>
double sum_flops(const OpList& ops, Pred pred) {
  double f = 0;
  for (const Op& op : ops)
    if (pred(op)) f += op.flops;
  return f;
}
bool is_gemm(const Op& op) { return op.kind == OpKind::kGemm; }
bool is_attention(const Op& op) { return op.kind == OpKind::kAttentionFwd || op.kind == OpKind::kAttentionBwd; }
bool starts_with(const Op& op, const char* prefix) { return std::string(op.name).rfind(prefix, 0) == 0; }

double attention_forward_flops(const BlockShape& s) {
  return 2.0 * d(s.batch) * d(s.n_heads) * d(s.seq) * d(s.seq) * d(s.d_head());
}

// Counts ops without OpList's capacity, to check that capacity.
class OpCounter final : public OpSink {
 public:
  void push(const Op&) override { ++n; }
  int n = 0;
};

struct H100 {
  DeviceSpec device = load_device("h100_80gb");
  DeviceProfile profile = load_shipped_profile("h100_80gb");
};
}  // namespace

BOOST_AUTO_TEST_CASE(llama_3_8b_block_forward_flops_are_the_hand_formula) {
  const ModelConfig m = llama3_8b();
  const BlockShape s = block_shape(m, 2, 8192, Precision::kAmpBf16);
  OpList fwd;
  block_forward_ops(s, fwd);
  const double t = d(s.tokens()), dm = 4096, q = d(m.q_dim()), kv = d(m.kv_dim()), f = 14336;
  BOOST_TEST(q == 4096.0);
  BOOST_TEST(kv == 1024.0);
  BOOST_TEST(sum_flops(fwd, is_gemm) == 2.0 * t * (dm * (q + 2.0 * kv) + q * dm + 3.0 * dm * f), tt::tolerance(kExact));
  BOOST_TEST(sum_flops(fwd, is_attention) == attention_forward_flops(s), tt::tolerance(kExact));
  // RoPE rotates q and k; no learned positions; RMSNorm.
  int rope = 0, rms = 0, layer_norm = 0;
  for (const Op& op : fwd) {
    rope += op.mem == MemKind::kRope;
    rms += op.mem == MemKind::kRmsNorm;
    layer_norm += op.mem == MemKind::kLayerNorm;
  }
  BOOST_TEST(rope == 1);
  BOOST_TEST(rms == 2);
  BOOST_TEST(layer_norm == 0);
  OpList emb;
  embedding_forward_ops(s, emb);
  BOOST_TEST(emb.size() == 1);  // the token lookup only: no wpe
}

BOOST_AUTO_TEST_CASE(mixtral_block_flops_are_the_router_plus_top_k_of_the_experts) {
  const ModelConfig m = mixtral_8x7b();
  const BlockShape s = block_shape(m, 4, 8192, Precision::kAmpBf16);
  OpList fwd;
  block_forward_ops(s, fwd);
  const double t = d(s.tokens()), dm = 4096, q = 4096, kv = 1024, f = 14336, E = 8, k = 2;
  const double attention_proj = 2.0 * t * (dm * (q + 2.0 * kv) + q * dm);
  const double router = 2.0 * t * dm * E;
  const double experts = k / E * E * 2.0 * t * 3.0 * dm * f;  // dropless: top_k/experts of every expert's work
  BOOST_TEST(sum_flops(fwd, is_gemm) == attention_proj + router + experts, tt::tolerance(kExact));
  BOOST_TEST(sum_flops(fwd, is_attention) == attention_forward_flops(s), tt::tolerance(kExact));
  // The experts run as grouped GEMMs, one group per expert with the mean expert's rows.
  for (const Op& op : fwd)
    if (starts_with(op, "moe.experts.") && op.kind == OpKind::kGemm) {
      BOOST_TEST(op.batch == 8);
      BOOST_TEST(op.m == s.tokens() * 2 / 8);
    }
  // A capacity factor of 1.25 runs 1.25x the expert GEMMs (padded slots), the rest unchanged.
  ModelConfig capped = m;
  capped.moe.capacity_factor = 1.25;
  OpList fwd_capped;
  block_forward_ops(block_shape(capped, 4, 8192, Precision::kAmpBf16), fwd_capped);
  const auto expert_gemm = [](const Op& op) { return is_gemm(op) && starts_with(op, "moe.experts."); };
  BOOST_TEST(sum_flops(fwd_capped, expert_gemm) == 1.25 * sum_flops(fwd, expert_gemm), tt::tolerance(kCeilTol));
  BOOST_TEST(sum_flops(fwd_capped, expert_gemm) == 1.25 * experts, tt::tolerance(kCeilTol));
}

BOOST_AUTO_TEST_CASE(the_largest_blocks_fit_an_op_list) {
  // Qwen2-MoE's shape (shared expert with its sigmoid gate, output bias) under fp8 casts.
  const ModelConfig m = qwen2_moe();
  for (Precision p : {Precision::kAmpBf16, Precision::kAmpFp8}) {
    OpCounter fwd, bwd;
    block_forward_ops(block_shape(m, 1, 4096, p), fwd);
    block_backward_ops(block_shape(m, 1, 4096, p), bwd);
    BOOST_TEST(fwd.n <= OpList::kCapacity);
    BOOST_TEST(bwd.n <= OpList::kCapacity);
  }
}

BOOST_AUTO_TEST_CASE(an_op_list_past_its_capacity_throws_in_every_build) {
  OpList list;
  const Op op = blank_op("filler", OpKind::kMemoryBound, OpCategory::kOther);
  for (int i = 0; i < OpList::kCapacity; ++i) list.push(op);
  BOOST_TEST(list.size() == OpList::kCapacity);
  BOOST_CHECK_THROW(list.push(op), std::length_error);
  BOOST_TEST(list.size() == OpList::kCapacity);  // nothing written past the end
}

// The role of every op of the block shapes that have each role, against what its name says: the
// rules that treat ops apart read the role, so an op left untagged (or a name and a role that
// disagree) is a timing wrong with no error anywhere else.
BOOST_AUTO_TEST_CASE(every_block_op_carries_the_role_its_name_says) {
  auto expected = [](const std::string& name) {
    auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
    if (starts("attn.Wqkv.")) return OpRole::kQkv;
    if (starts("attn.out_proj.")) return OpRole::kAttnOut;
    if (starts("ffn.gate_proj.")) return OpRole::kFfnGate;
    if (starts("ffn.up_proj.")) return OpRole::kFfnUp;
    if (starts("ffn.fc1.")) return OpRole::kFfnFc1;
    if (starts("ffn.down_proj.")) return OpRole::kFfnDown;
    if (starts("moe.router.")) return OpRole::kRouter;
    if (starts("moe.experts.")) return OpRole::kRoutedExpert;
    if (starts("moe.shared")) return OpRole::kSharedExpert;
    return OpRole::kOther;
  };
  auto expected_pass = [](const Op& op) {
    if (op.kind != OpKind::kGemm || op.role == OpRole::kOther) return OpPass::kNone;  // attention's own GEMMs too
    const std::string name = op.name;
    if (name.ends_with(".fwd")) return OpPass::kForward;
    if (name.ends_with(".dgrad")) return OpPass::kDataGrad;
    if (name.ends_with(".wgrad")) return OpPass::kWeightGrad;
    return OpPass::kNone;
  };
  int roles_seen[16] = {};
  for (const ModelConfig& m : {llama3_8b(), mixtral_8x7b(), qwen2_moe(), tpsim::test::gpt2()})
    for (Precision p : {Precision::kAmpBf16, Precision::kAmpFp8})
      for (bool fused : {false, true}) {
        BlockShape s = block_shape(m, 1, 2048, p);
        s.fused_swiglu = fused;
        s.fp8_weight_cache = fused && p == Precision::kAmpFp8;
        OpList fwd, bwd;
        block_forward_ops(s, fwd);
        block_backward_ops(s, bwd);
        for (const OpList* list : {&fwd, &bwd})
          for (const Op& op : *list) {
            BOOST_TEST_CONTEXT(m.name << " " << op.name) {
              BOOST_TEST((op.role == expected(op.name)));
              BOOST_TEST((op.pass == expected_pass(op)));
            }
            ++roles_seen[static_cast<int>(op.role)];
          }
      }
  for (OpRole r : {OpRole::kQkv, OpRole::kAttnOut, OpRole::kFfnGate, OpRole::kFfnUp, OpRole::kFfnFc1, OpRole::kFfnDown,
                   OpRole::kRouter, OpRole::kRoutedExpert, OpRole::kSharedExpert})
    BOOST_TEST(roles_seen[static_cast<int>(r)] > 0);
}

BOOST_AUTO_TEST_CASE(grouped_query_attention_saves_less_k_and_v_at_the_same_flops) {
  const ModelConfig gqa = llama3_8b();
  ModelConfig mha = gqa;
  mha.n_kv_heads = 32;
  const BlockShape sg = block_shape(gqa, 1, 4096, Precision::kAmpBf16),
                   sm = block_shape(mha, 1, 4096, Precision::kAmpBf16);
  const Op ag = attention_op("a", OpKind::kAttentionFwd, sg), am = attention_op("a", OpKind::kAttentionFwd, sm);
  BOOST_TEST(ag.flops == am.flops);
  // K and V of kv_dim = 1024 instead of 4096, 2 bytes each.
  const double t = d(sg.tokens());
  BOOST_TEST(am.saved_bytes - ag.saved_bytes == 2.0 * t * (4096.0 - 1024.0) * 2.0, tt::tolerance(kExact));
  BOOST_TEST(am.bytes_read - ag.bytes_read == 2.0 * t * (4096.0 - 1024.0) * 2.0, tt::tolerance(kExact));
}

BOOST_AUTO_TEST_CASE(glu_saves_its_input_gate_activation_up_and_product) {
  const BlockShape s = block_shape(llama3_8b(), 2, 2048, Precision::kAmpBf16);
  OpList fwd;
  block_forward_ops(s, fwd);
  double ffn_saved = 0;
  int gemms = 0;
  for (const Op& op : fwd)
    if (starts_with(op, "ffn.")) {
      ffn_saved += op.saved_bytes;
      gemms += op.kind == OpKind::kGemm;
    }
  const double t = d(s.tokens()), a = 2.0;
  BOOST_TEST(gemms == 3);
  BOOST_TEST(ffn_saved == (t * 4096.0 + 4.0 * t * 14336.0) * a, tt::tolerance(kExact));
  // The backward: both input gradients summed (a kAdd), and the product's and SiLU's backwards.
  OpList bwd;
  block_backward_ops(s, bwd);
  int mul_bwd = 0, silu_bwd = 0, dx_sum = 0;
  for (const Op& op : bwd) {
    mul_bwd += op.mem == MemKind::kMulBackward;
    silu_bwd += op.mem == MemKind::kSiluBackward;
    dx_sum += std::string(op.name) == "ffn.dx_sum.bwd";
  }
  BOOST_TEST(mul_bwd == 1);
  BOOST_TEST(silu_bwd == 1);
  BOOST_TEST(dx_sum == 1);
  BOOST_TEST(sum_flops(bwd, is_gemm) == 2.0 * sum_flops(fwd, is_gemm), tt::tolerance(kExact));
}

BOOST_AUTO_TEST_CASE(sliding_window_runs_the_windowed_share_of_causal_attention) {
  ModelConfig mistral = llama(4096, 32, 8, 32, 14336, 32000);
  mistral.sliding_window = 4096;
  ModelConfig full = mistral;
  full.sliding_window = 0;
  const BlockShape sw = block_shape(mistral, 1, 32768, Precision::kAmpBf16);
  const BlockShape sf = block_shape(full, 1, 32768, Precision::kAmpBf16);
  const Op aw = attention_op("a", OpKind::kAttentionFwd, sw), af = attention_op("a", OpKind::kAttentionFwd, sf);
  const double w = 4096, S = 32768;
  // The brief's approximation drops terms of order 1/w: within 0.1%.
  BOOST_TEST(aw.flops / af.flops == (w * S - w * w / 2.0) / (S * S / 2.0), tt::tolerance(1e-3));
  BOOST_TEST(aw.k == 4096);
  BOOST_TEST(af.k == 0);
  // A window as long as the sequence is no window.
  BOOST_TEST(block_shape(mistral, 1, 4096, Precision::kAmpBf16).window == 0);
  // The cost counts the executed blocks: about the FLOPs' share of the time, never less.
  H100 h;
  const CostModel cost(h.device, h.profile.params);
  const double ratio_s = cost.op_seconds(aw) / cost.op_seconds(af);
  BOOST_TEST(ratio_s >= aw.flops / af.flops);
  BOOST_TEST(ratio_s <= 1.1 * aw.flops / af.flops);
}

BOOST_AUTO_TEST_CASE(selective_checkpointing_keeps_all_but_the_log_sum_exp_and_reruns_attention) {
  H100 h;
  const ModelConfig m = llama3_8b();
  Evaluator ev(m, h.device, h.profile.params);
  TrainConfig c{
      .seq_len = 4096, .global_batch = 16, .micro_batch = 1, .n_gpus = 8, .layout = {.sharding = Sharding::kFullShard}};
  BOOST_TEST_REQUIRE(check_config(m, h.device, h.profile.params, c).empty());
  const Prediction none = ev.predict(c);
  c.layout.checkpointing = Checkpointing::kSelective;
  const Prediction sel = ev.predict(c);
  const BlockShape s = block_shape(m, 1, 4096, Precision::kAmpBf16);
  const double lse = d(s.batch) * d(s.n_heads) * d(s.seq) * 4.0, L = 32;
  // Every block drops its log-sum-exp; the block in backward rebuilds its own.
  const double dropped = none.memory.activation_bytes - sel.memory.activation_bytes;
  BOOST_TEST(dropped >= (L - 1.0) * lse * (1.0 - kExact));
  BOOST_TEST(dropped <= L * lse * (1.0 + kExact));
  // One attention forward more per block and micro-batch.
  const CostModel cost(h.device, h.profile.params);
  const double attn_fwd = cost.op_seconds(attention_op("a", OpKind::kAttentionFwd, s));
  const double micro = d(c.grad_accum());
  BOOST_TEST(sel.time.attention_s - none.time.attention_s == L * micro * attn_fwd, tt::tolerance(1e-9));
  BOOST_TEST(sel.step_s > none.step_s);
  // HFU: the attention term 4x and the parameter term 3x.
  const double flops = 6.0 * d(sel.active_params) * 4096.0, attn = 12.0 * L * 4096.0 * 4096.0 * 4096.0;
  BOOST_TEST(sel.hfu / sel.mfu == (flops + 4.0 / 3.0 * attn) / (flops + attn), tt::tolerance(kExact));
  // The replayed step: one attention forward before each block's backward.
  const std::vector<StepOp> step = training_step_ops(m, {.micro_batch = 1,
                                                         .seq_len = 512,
                                                         .layers = 2,
                                                         .checkpointing = Checkpointing::kSelective,
                                                         .precision = Precision::kAmpBf16});
  int recomputed = 0;
  for (const StepOp& o : step)
    if (o.part == StepPart::kBlockRecompute) {
      BOOST_TEST((o.op.kind == OpKind::kAttentionFwd));
      ++recomputed;
    }
  BOOST_TEST(recomputed == 2);
}

BOOST_AUTO_TEST_CASE(llama_3_8b_at_8192_fits_at_micro_batch_1_on_8_h100) {
  H100 h;
  const ModelConfig m = llama3_8b();
  const TrainConfig c{
      .seq_len = 8192, .global_batch = 64, .micro_batch = 1, .n_gpus = 8, .layout = {.sharding = Sharding::kFullShard}};
  BOOST_TEST_REQUIRE(check_config(m, h.device, h.profile.params, c).empty());
  const Prediction p = predict(m, h.device, h.profile.params, c);
  BOOST_TEST(p.fits());
  BOOST_TEST(p.n_params == 8030261248LL);
  BOOST_TEST(p.memory.peak_bytes < h.device.memory_bytes);
  BOOST_TEST(p.mfu > 0.2);
  BOOST_TEST(p.mfu < 0.8);
}

BOOST_AUTO_TEST_CASE(mixtral_keeps_the_state_of_every_expert) {
  H100 h;
  const ModelConfig moe = mixtral_8x7b();
  ModelConfig dense = moe;  // Mistral's width, one dense FFN
  dense.moe = {};
  const TrainConfig c{.seq_len = 4096,
                      .global_batch = 64,
                      .micro_batch = 1,
                      .n_gpus = 64,
                      .layout = {.sharding = Sharding::kFullShard}};
  Evaluator em(moe, h.device, h.profile.params), ed(dense, h.device, h.profile.params);
  const MemoryBreakdown mm = em.memory(c), md = ed.memory(c);
  // fp32 parameters, gradients and Adam moments (16 bytes) of 7 more experts and the router, sharded 64 ways.
  const double ffn = 3.0 * 4096.0 * 14336.0;
  BOOST_TEST(mm.sharded_state_bytes - md.sharded_state_bytes == 16.0 * 32.0 * (7.0 * ffn + 4096.0 * 8.0) / 64.0,
             tt::tolerance(kExact));
  // The feed-forward state is 8x the dense model's (and the router's).
  BOOST_TEST((d(layer_parameter_count(moe)) - d(layer_parameter_count(dense)) + ffn) / ffn == 8.0 + 8.0 * 4096.0 / ffn,
             tt::tolerance(kExact));
  BOOST_TEST(mm.gathered_params_bytes > md.gathered_params_bytes);  // a block is gathered with its experts
  BOOST_TEST(mm.activation_bytes + mm.transient_bytes > md.activation_bytes + md.transient_bytes);
}

BOOST_AUTO_TEST_CASE(mixtral_mfu_counts_the_active_parameters) {
  H100 h;
  const ModelConfig m = mixtral_8x7b();
  const TrainConfig c{.seq_len = 4096,
                      .global_batch = 256,
                      .micro_batch = 1,
                      .n_gpus = 64,
                      .layout = {.sharding = Sharding::kFullShard}};
  BOOST_TEST_REQUIRE(check_config(m, h.device, h.profile.params, c).empty());
  const Prediction p = predict(m, h.device, h.profile.params, c);
  BOOST_TEST(p.n_params == 46702792704LL);
  BOOST_TEST(p.active_params == active_parameter_count(m, 4096));
  BOOST_TEST(p.active_params < p.n_params / 3);
  // llm-foundry's flops_per_batch: (6 * active * S + 12 * L * d * S^2) per sequence.
  const double S = 4096, per_seq = 6.0 * d(p.active_params) * S + 12.0 * 32.0 * 4096.0 * S * S;
  BOOST_TEST(p.mfu == per_seq * p.seq_per_s / (64.0 * h.device.peak(DType::kBf16)), tt::tolerance(kExact));
  BOOST_TEST(p.hfu == p.mfu);
}

BOOST_AUTO_TEST_CASE(untied_logits_gradient_goes_to_lm_head_at_the_same_flops) {
  const ModelConfig untied = llama3_8b();
  ModelConfig tied = untied;
  tied.tie_embeddings = true;
  OpList a, b;
  head_backward_ops(block_shape(untied, 1, 2048, Precision::kAmpBf16), a);
  head_backward_ops(block_shape(tied, 1, 2048, Precision::kAmpBf16), b);
  BOOST_TEST(total_flops(a) == total_flops(b));
  bool lm_head = false;
  for (const Op& op : a) lm_head = lm_head || std::string(op.name) == "lm_head.wgrad";
  BOOST_TEST(lm_head);
}

BOOST_AUTO_TEST_CASE(a_learned_table_refuses_a_longer_sequence) {
  H100 h;
  const ModelConfig gpt2 = test::gpt2();
  TrainConfig c{.seq_len = 2048, .global_batch = 8, .micro_batch = 1, .n_gpus = 8};
  BOOST_TEST(check_config(gpt2, h.device, h.profile.params, c) ==
             "sequence length 2048 exceeds the model's 1024 learned positions");
  c.seq_len = 1024;
  BOOST_TEST(check_config(gpt2, h.device, h.profile.params, c).empty());
}

BOOST_AUTO_TEST_CASE(grouped_gemms_run_at_the_rate_of_their_tiles) {
  H100 h;
  const CostModel cost(h.device, h.profile.params);
  // 8 groups of 2048 x 14336 x 4096: as many full tiles as one GEMM of 8x the rows, without split-K.
  const double grouped = cost.grouped_gemm_efficiency(8, 2048, 14336, 4096);
  BOOST_TEST(grouped == cost.gemm_efficiency(8 * 2048, 14336, 4096), tt::tolerance(0.02));
  // Ragged groups pay their own tile padding: 8 groups of 100 rows waste more than one of 800.
  BOOST_TEST(cost.grouped_gemm_efficiency(8, 100, 14336, 4096) < cost.gemm_efficiency(800, 14336, 4096));
}

BOOST_AUTO_TEST_CASE(qk_norm_adds_an_rms_norm_of_q_and_k_and_keeps_their_inputs) {
  // Qwen3-8B's attention: 32 query heads, 8 K/V heads of 128; q_norm and k_norm per head.
  ModelConfig m = llama(4096, 32, 8, 36, 12288, 151936);
  m.head_dim = 128;
  const BlockShape plain = block_shape(m, 1, 4096, Precision::kAmpBf16);
  m.qk_norm = QkNorm::kPerHead;
  const BlockShape normed = block_shape(m, 1, 4096, Precision::kAmpBf16);
  OpList a, b, ab, bb;
  block_forward_ops(plain, a);
  block_forward_ops(normed, b);
  block_backward_ops(plain, ab);
  block_backward_ops(normed, bb);
  BOOST_TEST(b.size() == a.size() + 2);
  BOOST_TEST(bb.size() == ab.size() + 2);
  // Kept: the pre-norm q and k (4096 tokens x (4096 + 1024) bf16) and an fp32 rstd per head row.
  const double t = 4096, extra = t * (4096 + 1024) * 2.0 + t * (32 + 8) * 4.0;
  BOOST_TEST(total_saved_bytes(b) - total_saved_bytes(a) == extra, boost::test_tools::tolerance(kExact));
  BOOST_TEST(total_flops(b) == total_flops(a));  // memory-bound: no FLOPs counted
}

// torchtitan's eager RMSNorm and RoPE (BlockShape::eager_rms_norm, eager_rope: its norms.py and
// apply_rotary_emb as PyTorch ops) against torch.compile of the block, on Llama 3 8B's shapes at
// 2 x 2048 tokens in bf16 (a = 2 bytes an element), by hand: per element of the [t, 4096] tensor an
// eager RMSNorm reads 2 + 4 + 4 + 4 + 4 + 2 = 20 bytes and writes 4 + 4 + 4 + 2 + 2 = 16 over 8
// kernels, keeps 4 + 2 (x in fp32, the normalised bf16) and the fp32 rstd; its backward reads
// 3a + a + 4 + 8 + 4 + 8 + 4 = 36 and writes 2 + 4 + 4 + 4 + 4 + 2 = 20. Eager RoPE reads and
// writes 2 + 8 = 10 bytes an element of q and k (float(), the complex product, type_as).
BOOST_AUTO_TEST_CASE(torch_compile_fuses_torchtitans_eager_norms_rope_and_glu) {
  BlockShape eager = block_shape(llama3_8b(), 2, 2048, Precision::kAmpBf16);
  eager.eager_rms_norm = eager.eager_rope = true;
  BlockShape compiled = eager;
  compiled.torch_compile = true;
  const double t = d(eager.tokens()), e = t * 4096.0, rstd = t * 4.0, qk = t * (4096.0 + 1024.0);
  const auto named = [](const OpList& ops, const std::string& name) -> const Op& {
    for (const Op& op : ops)
      if (name == op.name) return op;
    BOOST_FAIL("no op " << name);
    return *ops.begin();
  };
  OpList ef, cf, eb, cb;
  block_forward_ops(eager, ef);
  block_forward_ops(compiled, cf);
  block_backward_ops(eager, eb);
  block_backward_ops(compiled, cb);
  const Op& norm = named(ef, "norm_1.fwd");
  BOOST_TEST(norm.bytes_read == 20.0 * e + 4096.0 * 2.0, tt::tolerance(kExact));
  BOOST_TEST(norm.bytes_written == 16.0 * e + rstd, tt::tolerance(kExact));
  BOOST_TEST(norm.kernels == 8);
  BOOST_TEST(norm.saved_bytes == 6.0 * e + rstd, tt::tolerance(kExact));
  const Op& norm_bwd = named(eb, "norm_1.bwd");
  BOOST_TEST(norm_bwd.bytes_read == 36.0 * e + rstd, tt::tolerance(kExact));
  BOOST_TEST(norm_bwd.bytes_written == 20.0 * e + 4096.0 * 4.0, tt::tolerance(kExact));
  BOOST_TEST(named(ef, "attn.rope.fwd").bytes_written == 10.0 * qk, tt::tolerance(kExact));
  BOOST_TEST(named(cf, "attn.rope.fwd").bytes_written == 2.0 * qk, tt::tolerance(kExact));
  // Compiled: norm_1 is one kernel (x and w in, y and rstd out); norm_2 is inside the residual add's
  // kernel (its input never read back); each norm's backward writes no input gradient for the
  // residual sum after it, which reads only the skip's gradient; the GLU's SiLU and product are one
  // kernel each way, keeping the gate's and up's outputs (not SiLU's too).
  BOOST_TEST(named(cf, "norm_1.fwd").bytes_read == 2.0 * e + 4096.0 * 2.0, tt::tolerance(kExact));
  BOOST_TEST(named(cf, "norm_2.fwd").bytes_read == 4096.0 * 2.0, tt::tolerance(kExact));
  BOOST_TEST(named(cf, "norm_2.fwd").kernels == 0);
  BOOST_TEST(named(cb, "norm_2.bwd").bytes_written == 4096.0 * 4.0, tt::tolerance(kExact));
  BOOST_TEST(named(cb, "resid_attn.bwd").bytes_read == 2.0 * e, tt::tolerance(kExact));
  BOOST_TEST(named(cb, "resid_attn.bwd").kernels == 0);
  const auto count = [](const OpList& ops, MemKind k) {
    int n = 0;
    for (const Op& op : ops) n += op.mem == k && op.kind == OpKind::kMemoryBound;
    return n;
  };
  BOOST_TEST(count(ef, MemKind::kSilu) == 1);
  BOOST_TEST(count(cf, MemKind::kSilu) == 0);
  BOOST_TEST(count(cb, MemKind::kSiluBackward) == 0);
  BOOST_TEST(total_saved_bytes(ef) - total_saved_bytes(cf) ==
                 2.0 * (4.0 * e) + t * 14336.0 * 2.0,  // two norms' fp32 x and normalised copy; SiLU's input
             tt::tolerance(kExact));
  // The GEMMs and the attention are Inductor's to leave alone.
  BOOST_TEST(sum_flops(cf, is_gemm) == sum_flops(ef, is_gemm), tt::tolerance(kExact));
  BOOST_TEST(sum_flops(cb, is_gemm) == sum_flops(eb, is_gemm), tt::tolerance(kExact));
}
