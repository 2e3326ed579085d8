// Multi-head latent attention (DeepSeek-V3, Kimi-K2): parameter counts of the shipped configs by
// hand, the FLOPs and bytes of a block's ops against the hand formula, and a rank's shapes and
// collectives under tensor parallelism.
#define BOOST_TEST_MODULE mla
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <string>

#include "common.hpp"
#include "io/hf_config.hpp"
#include "model/architecture.hpp"
#include "model/ops.hpp"
#include "model/simulator.hpp"

using namespace tpsim;
using tpsim::test::contains;
using tpsim::test::shipped_hf;
namespace tt = boost::test_tools;
namespace fs = std::filesystem;

namespace {

constexpr double kExact = 1e-12;  // sums of products of whole numbers below 2^53

double d(int64_t x) { return static_cast<double>(x); }

// One latent-attention block's parameters: q_down (d x q_rank) and its norm, q_up (q_rank x h(nope
// + rope)), kv_down (d x (kv_rank + rope)) and its norm, kv_up (kv_rank x h(nope + v)), out
// (h v x d), the two block norms.
int64_t mla_attention(int64_t dm, int64_t h, int64_t q_rank, int64_t kv_rank, int64_t nope, int64_t rope, int64_t v) {
  return dm * q_rank + q_rank + q_rank * h * (nope + rope) + dm * (kv_rank + rope) + kv_rank +
         kv_rank * h * (nope + v) + h * v * dm + 2 * dm;
}

double sum_flops(const OpList& ops, OpKind kind) {
  double f = 0;
  for (const Op& op : ops)
    if (op.kind == kind) f += op.flops;
  return f;
}

}  // namespace

BOOST_AUTO_TEST_CASE(deepseek_v3_and_kimi_k2_count_by_hand) {
  // DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json): 61 layers, the first 3 dense (18,432), then
  // 256 routed experts of 2,048 (top 8) with one shared expert of 2,048 and a per-expert score
  // bias; 128 heads; vocabulary 129,280, untied. The model card: 671B total, 37B activated (its
  // checkpoint's 685B adds the multi-token prediction module, which the model costed leaves out).
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  const int64_t dm = 7168, expert = 3 * dm * 2048;
  const int64_t attn = mla_attention(dm, 128, 1536, 512, 128, 64, 128);
  BOOST_TEST(attn == 187107328 + 2 * dm);
  const int64_t dense_layer = attn + 3 * dm * 18432;
  const int64_t moe_layer = attn + (256 * dm + 256) + 256 * expert + expert;
  const int64_t embedding = 129280 * dm;
  const int64_t total = 3 * dense_layer + 58 * moe_layer + 2 * embedding + dm;
  BOOST_TEST(total == 671026419200);
  BOOST_TEST(parameter_count(v3, 4096) == total);
  const int64_t moe_active = attn + (256 * dm + 256) + 8 * expert + expert;
  BOOST_TEST(active_parameter_count(v3, 4096) == 3 * dense_layer + 58 * moe_active + embedding + dm);
  BOOST_TEST(active_parameter_count(v3, 4096) + embedding == 37552297472);  // with the input table: 37.6B
  // Kimi-K2 (moonshotai/Kimi-K2-Base): 64 heads, 384 experts, one dense layer, vocabulary 163,840.
  // The model card: 1T total, 32B activated.
  const ModelConfig k2 = shipped_hf("kimi-k2");
  const int64_t k_attn = mla_attention(dm, 64, 1536, 512, 128, 64, 128);
  const int64_t k_total =
      (k_attn + 3 * dm * 18432) + 60 * (k_attn + 384 * dm + 384 + 385 * expert) + 2 * 163840 * dm + dm;
  BOOST_TEST(parameter_count(k2, 4096) == k_total);
  BOOST_TEST(std::abs(d(k_total) - 1.0e12) < 0.05e12);
  const int64_t k_active = active_parameter_count(k2, 4096) + 163840 * dm;
  BOOST_TEST(std::abs(d(k_active) - 32e9) < 1.5e9);
}

BOOST_AUTO_TEST_CASE(a_latent_attention_block_runs_the_hand_formula) {
  ModelConfig m = shipped_hf("deepseek-v3");
  const LayerGroup dense = layer_pattern(m).groups.front();
  BOOST_TEST_REQUIRE(!dense.model.moe.active());
  const BlockShape s = block_shape(dense.model, 2, 4096, Precision::kAmpBf16);
  OpList fwd, bwd;
  block_forward_ops(s, fwd);
  block_backward_ops(s, bwd);
  const double t = d(s.tokens()), dm = 7168, h = 128;
  const double projections = dm * 1536 + 1536 * h * 192 + dm * 576 + 512 * h * 256 + h * 128 * dm;
  const double ffn = 3.0 * dm * 18432;
  BOOST_TEST(sum_flops(fwd, OpKind::kGemm) == 2.0 * t * (projections + ffn), tt::tolerance(kExact));
  BOOST_TEST(sum_flops(bwd, OpKind::kGemm) == 4.0 * t * (projections + ffn), tt::tolerance(kExact));
  // Causal attention with heads of 192 for the scores and 128 for the values.
  const double attention = d(s.batch) * h * 4096.0 * 4096.0 * (192.0 + 128.0);
  BOOST_TEST(sum_flops(fwd, OpKind::kAttentionFwd) == attention, tt::tolerance(kExact));
  BOOST_TEST(sum_flops(bwd, OpKind::kAttentionBwd) == 2.5 * attention, tt::tolerance(kExact));
  for (const Op& op : fwd)
    if (op.kind == OpKind::kAttentionFwd) {
      BOOST_TEST(op.head_dim == 192);
      BOOST_TEST(op.n == 128);  // the value head
      // q and k of 128 x 192, v and o of 128 x 128 per token, 2 bytes each, and the log-sum-exp.
      const double lse = d(s.batch) * h * 4096.0 * 4.0;
      BOOST_TEST(op.saved_bytes == t * h * (192.0 + 192.0 + 128.0 + 128.0) * 2.0 + lse, tt::tolerance(kExact));
    }
  // Two latent norms each way, the block's two; one fused RoPE-and-assembly each way.
  int rms = 0, rope = 0;
  for (const Op& op : fwd) rms += op.mem == MemKind::kRmsNorm, rope += op.mem == MemKind::kRope;
  BOOST_TEST(rms == 4);
  BOOST_TEST(rope == 1);
  // What the forward keeps beyond the attention's: the block norm's input and rstd, the down
  // projections' input once (the norm's output), the latent norms' inputs and rstds, the up
  // projections' inputs, the out projection's input is the attention's output (kept there).
  double kept = 0;
  for (const Op& op : fwd)
    if (op.kind != OpKind::kAttentionFwd && std::string(op.name).rfind("ffn.", 0) != 0) kept += op.saved_bytes;
  const double rstd = t * 4.0;
  const double expected = (t * dm * 2.0 + rstd) + t * dm * 2.0 + (t * 1536 * 2.0 + rstd) + (t * 512 * 2.0 + rstd) +
                          t * 1536 * 2.0 + t * 512 * 2.0 + (t * dm * 2.0 + rstd);  // + norm_2
  BOOST_TEST(kept == expected, tt::tolerance(kExact));
}

BOOST_AUTO_TEST_CASE(tensor_parallel_splits_the_heads_and_keeps_the_down_projections_whole) {
  const LayerGroup dense = layer_pattern(shipped_hf("deepseek-v3")).groups.front();
  const BlockShape whole = block_shape(dense.model, 1, 4096, Precision::kAmpBf16);
  const BlockShape rank = tensor_parallel_shape(whole, 4, /*sequence_parallel=*/true, 129280);
  OpList fwd;
  block_forward_ops(rank, fwd);
  for (const Op& op : fwd) {
    const std::string name = op.name;
    if (name == "attn.q_down.fwd") {  // duplicated on every rank, over its own s/tp rows
      BOOST_TEST(op.m == 1024);
      BOOST_TEST(op.n == 1536);
    }
    if (name == "attn.kv_up.fwd") {  // column-parallel over 128 / 4 heads, every token
      BOOST_TEST(op.m == 4096);
      BOOST_TEST(op.n == 32 * 256);
      BOOST_TEST(op.k == 512);
    }
    if (name == "attn.out_proj.fwd") BOOST_TEST(op.k == 32 * 128);
  }
}

BOOST_AUTO_TEST_CASE(latent_attention_is_read_strictly) {
  const auto read = [](const std::string& extra) {
    return test::error_of(
        [&] { read_hf_config("{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 4" + extra + "}", "c.json"); });
  };
  BOOST_TEST(read("") == "");
  BOOST_TEST(contains(read(", \"attention_bias\": true"), "c.json:1: attention_bias: true -- biases on latent"));
  BOOST_TEST(contains(read(", \"num_key_value_heads\": 8"), "num_key_value_heads: 8 must equal num_attention_heads"));
  BOOST_TEST(contains(read(", \"topk_method\": \"random\""), "topk_method: \"random\" -- a routing method"));
  BOOST_TEST(contains(read(", \"qk_rope_head_dim\": 63"), "qk_rope_head_dim"));
  BOOST_TEST(contains(read(", \"first_k_dense_replace\": 2, \"n_routed_experts\": 0"), "n_routed_experts"));
  // first_k_dense_replace and moe_layer_freq: layers 0, 1 dense, then every other layer experts.
  const ModelConfig m = read_hf_config(
                            "{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 6, \"first_k_dense_replace\": 2, "
                            "\"moe_layer_freq\": 2}",
                            "c.json")
                            .model;
  BOOST_TEST_REQUIRE(m.layers.size() == 6u);
  const bool dense[6] = {true, true, false, true, false, true};
  for (size_t i = 0; i < 6; ++i) BOOST_TEST(m.layers[i].dense_ffn == dense[i], "layer " << i);
}

BOOST_AUTO_TEST_CASE(lora_on_the_latent_projections_is_refused) {
  const ModelConfig m = shipped_hf("deepseek-v3");
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  TrainConfig cfg{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = 64};
  cfg.layout.framework = Framework::kMegatron;
  cfg.lora.rank = 16;
  cfg.lora.target_bits = kLoraQkv;
  BOOST_TEST(contains(check_config(m, device, profile.params, cfg), "latent attention"));
}
