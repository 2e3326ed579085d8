// Mamba-2 layers and the Nemotron-H / Nemotron 3 hybrids: parameter counts by hand, a Mamba-2
// layer's ops against the hand formulas (GEMM FLOPs, the scan's FLOPs and bytes, what the forward
// keeps), tensor parallelism of the mixer, the layer kinds nemotron_h's reader makes, and the
// refusals.
#define BOOST_TEST_MODULE mamba
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

constexpr double kExact = 1e-12;
double d(int64_t x) { return static_cast<double>(x); }

// One Mamba-2 layer's parameters (Hugging Face's NemotronHMamba2Mixer and its block norm): in_proj
// h x (2 d_inner + 2 G N + H), the depthwise convolution over d_inner + 2 G N channels (K taps and a
// bias), dt_bias, A_log and D per head, the gated norm's d_inner weight, out_proj d_inner x h.
int64_t mamba_layer(int64_t h, int64_t heads, int64_t head_dim, int64_t groups, int64_t state, int64_t kernel) {
  const int64_t inner = heads * head_dim, conv = inner + 2 * groups * state;
  return h * (2 * inner + 2 * groups * state + heads) + (kernel + 1) * conv + 3 * heads + inner + inner * h + h;
}

double sum(const OpList& ops, OpKind kind) {
  double f = 0;
  for (const Op& op : ops)
    if (op.kind == kind) f += op.flops;
  return f;
}

const Op* find(const OpList& ops, const std::string& name) {
  for (const Op& op : ops)
    if (name == op.name) return &op;
  return nullptr;
}

}  // namespace

BOOST_AUTO_TEST_CASE(nemotron_3_nano_and_nemotron_h_8b_count_by_hand) {
  // Nemotron 3 Nano 30B-A3B (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16): 52 layers, 23 Mamba-2
  // (64 heads of 64, state 128, 8 groups), 23 of 128 experts (top 6) of 1,856 with a shared expert
  // of 3,712, 6 attention (32 heads, 2 key/value heads of 128); hidden 2,688; vocabulary 131,072,
  // untied. NVIDIA: "30B parameters in total", 3.5B active (with the embedding and the head).
  const ModelConfig nano = shipped_hf("nemotron-3-nano");
  const int64_t h = 2688, vocab = 131072;
  const int64_t mamba = mamba_layer(h, 64, 64, 8, 128, 4);
  const int64_t expert = 2 * h * 1856, shared = 2 * h * 3712, router = h * 128 + 128;
  const int64_t moe = router + 128 * expert + shared + h;
  const int64_t attention = h * 32 * 128 * 2 + h * 2 * 128 * 2 + h;
  const int64_t total = 23 * mamba + 23 * moe + 6 * attention + 2 * vocab * h + h;
  BOOST_TEST(total == 31577940288);
  BOOST_TEST(parameter_count(nano, 8192) == total);
  const int64_t active = 23 * mamba + 23 * (router + 6 * expert + shared + h) + 6 * attention + vocab * h + h;
  BOOST_TEST(active_parameter_count(nano, 8192) == active);
  BOOST_TEST(std::abs(d(active + vocab * h) - 3.5e9) <= 0.1e9);
  BOOST_TEST(attention_layer_count(nano) == 6);
  // Nemotron-H 8B (nvidia/Nemotron-H-8B-Base-8K): 24 Mamba-2 layers (128 heads), 24 MLPs of 21,504
  // (squared ReLU, two matrices), 4 attention layers of 32 heads and 8 key/value heads.
  const ModelConfig h8 = shipped_hf("nemotron-h-8b");
  const int64_t d8 = 4096;
  const int64_t h8_total = 24 * mamba_layer(d8, 128, 64, 8, 128, 4) + 24 * (2 * d8 * 21504 + d8) +
                           4 * (d8 * 4096 * 2 + d8 * 1024 * 2 + d8) + 2 * vocab * d8 + d8;
  BOOST_TEST(parameter_count(h8, 8192) == h8_total);
  BOOST_TEST(std::abs(d(h8_total) - 8e9) <= 0.15e9);
}

BOOST_AUTO_TEST_CASE(nemotron_3_super_counts_to_its_checkpoint_with_the_mtp_block) {
  // Nemotron 3 Super 120B-A12B: 88 layers (40 Mamba-2 of 128 heads, 40 latent expert layers, 8
  // attention), hidden 4,096; 512 experts (top 22) of 2,688 working at a latent width of 1,024, a
  // shared expert of 5,376. Megatron-Bridge's verification card (examples/model_verification_cards/
  // nemotron-3-super-120b-a12b/card.yaml) counts 123,611,033,088 elements in the bf16 checkpoint, which
  // holds the main model and one multi-token prediction block ("*E": its two norms, the 2h x h
  // projection, an attention and an expert layer, a final norm) that the model costed leaves out.
  const ModelConfig super = shipped_hf("nemotron-3-super");
  const int64_t h = 4096, vocab = 131072;
  const int64_t attention = h * 32 * 128 * 2 + h * 2 * 128 * 2 + h;
  const int64_t moe = (h * 512 + 512) + int64_t{512} * 2 * 1024 * 2688 + 2 * h * 1024 + 2 * h * 5376 + h;
  const int64_t total = 40 * mamba_layer(h, 128, 64, 8, 128, 4) + 40 * moe + 8 * attention + 2 * vocab * h + h;
  BOOST_TEST(parameter_count(super, 8192) == total);
  BOOST_TEST(total == 120668707840);
  const int64_t mtp_block = 2 * h + 2 * h * h + attention + moe + h;
  BOOST_TEST(total + mtp_block == 123611033088);
  // NVIDIA: "12B active", a name (A12B): tpsim's active count with the input table is 12.77B.
  const int64_t active = active_parameter_count(super, 8192) + vocab * h;
  BOOST_TEST(std::abs(d(active) - 12e9) <= 1e9);
  // An expert layer's forward GEMMs: the router at 4,096, the latent projections, the 22 chosen
  // experts at 1,024, the shared expert at 4,096.
  for (const LayerGroup& g : layer_pattern(super).groups) {
    if (!g.model.moe.active()) continue;
    const BlockShape s = block_shape(g.model, 1, 4096, Precision::kAmpBf16);
    OpList fwd;
    block_forward_ops(s, fwd);
    const double t = 4096;
    const double gemm = 2.0 * t * (h * 512.0 + 2.0 * h * 1024 + 22.0 * 2 * 1024 * 2688 + 2.0 * h * 5376);
    BOOST_TEST(sum(fwd, OpKind::kGemm) == gemm, tt::tolerance(kExact));
    BOOST_TEST(find(fwd, "moe.permute.fwd")->n == 1024);  // tokens dispatched at the latent width
  }
}

BOOST_AUTO_TEST_CASE(the_pattern_makes_one_kind_per_symbol) {
  const ModelConfig nano = shipped_hf("nemotron-3-nano");
  const std::string pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
  BOOST_TEST_REQUIRE(nano.layers.size() == pattern.size());
  for (size_t i = 0; i < pattern.size(); ++i) {
    const LayerKind& k = nano.layers[i];
    const Mixer want = pattern[i] == 'M' ? Mixer::kMamba2 : pattern[i] == '*' ? Mixer::kAttention : Mixer::kNone;
    BOOST_TEST((k.mixer == want), "layer " << i);
    BOOST_TEST(k.no_ffn == (pattern[i] != 'E'), "layer " << i);
  }
  const LayerPattern p = layer_pattern(nano);
  BOOST_TEST(p.groups.size() == 3u);
  for (const LayerGroup& g : p.groups) {
    BOOST_TEST(check_architecture(g.model) == "");
    if (g.model.mixer == Mixer::kMamba2) BOOST_TEST((g.layers == 23 && g.model.no_ffn && !g.model.moe.active()));
    if (g.model.mixer == Mixer::kNone) BOOST_TEST((g.layers == 23 && g.model.moe.experts == 128));
    if (g.model.mixer == Mixer::kAttention) BOOST_TEST((g.layers == 6 && !g.model.mamba.active()));
  }
}

BOOST_AUTO_TEST_CASE(a_mamba_layer_runs_the_hand_formulas) {
  const ModelConfig nano = shipped_hf("nemotron-3-nano");
  const LayerPattern p = layer_pattern(nano);
  const ModelConfig& m = p.groups[0].model;  // the first layer's kind: Mamba-2
  BOOST_TEST_REQUIRE((m.mixer == Mixer::kMamba2));
  const BlockShape s = block_shape(m, 2, 4096, Precision::kAmpBf16);
  OpList fwd, bwd;
  block_forward_ops(s, fwd);
  block_backward_ops(s, bwd);
  const double t = 2.0 * 4096, h = 2688, inner = 4096, in_width = 2 * 4096 + 2 * 8 * 128 + 64;
  BOOST_TEST(sum(fwd, OpKind::kGemm) == 2.0 * t * h * (in_width + inner), tt::tolerance(kExact));
  BOOST_TEST(sum(bwd, OpKind::kGemm) == 4.0 * t * h * (in_width + inner), tt::tolerance(kExact));
  BOOST_TEST(sum(fwd, OpKind::kAttentionFwd) == 0.0);
  // The scan: per token 2QNG + 2Q d_inner + 4N d_inner + 2N d_inner / Q (Q = 128, N = 128, G = 8).
  const double per_token = 2.0 * 128 * 128 * 8 + 2.0 * 128 * inner + 4.0 * 128 * inner + 2.0 * 128 * inner / 128;
  const Op* scan = find(fwd, "mamba.scan.fwd");
  BOOST_TEST_REQUIRE(scan);
  BOOST_TEST(scan->flops == t * per_token, tt::tolerance(kExact));
  BOOST_TEST(find(bwd, "mamba.scan.bwd")->flops == 2.0 * t * per_token, tt::tolerance(kExact));
  // Its bytes: x, B, C and dt read and y written in bf16; the fp32 decay and C B^T written and read;
  // the chunk states (64 chunks of 64 x 64 x 128) written, read and written again, and read.
  const double states = 64.0 * inner * 128 * 4.0, decay = t * 64 * 4.0, cb = t * 128 * 8 * 4.0;
  BOOST_TEST(scan->bytes_read == t * (inner + 2 * 8 * 128 + 64) * 2.0 + decay + cb + 2.0 * states,
             tt::tolerance(kExact));
  BOOST_TEST(scan->bytes_written == t * inner * 2.0 + decay + cb + 2.0 * states, tt::tolerance(kExact));
  // Kept for the backward: the norm's input and rstd, the in projection's input and output, the
  // gated norm's rstd (per token and group), the out projection's input.
  double kept = 0;
  for (const Op& op : fwd) kept += op.saved_bytes;
  const double rstd = t * 4.0;
  BOOST_TEST(kept == (t * h * 2.0 + rstd) + t * h * 2.0 + t * in_width * 2.0 + t * 8 * 4.0 + t * inner * 2.0,
             tt::tolerance(kExact));
  // One norm and one residual each way: a layer of one sublayer.
  int norms = 0, adds = 0;
  for (const Op& op : fwd) norms += op.mem == MemKind::kRmsNorm, adds += op.mem == MemKind::kAdd;
  BOOST_TEST(norms == 1);
  BOOST_TEST(adds == 1);
}

BOOST_AUTO_TEST_CASE(tensor_parallelism_splits_the_heads_and_groups) {
  const ModelConfig m = layer_pattern(shipped_hf("nemotron-3-nano")).groups[0].model;
  const BlockShape whole = block_shape(m, 1, 4096, Precision::kAmpBf16);
  const BlockShape rank = tensor_parallel_shape(whole, 4, /*sequence_parallel=*/true, 131072);
  BOOST_TEST(rank.mamba.heads == 16);
  BOOST_TEST(rank.mamba.groups == 2);
  OpList fwd;
  block_forward_ops(rank, fwd);
  const Op* in = find(fwd, "mamba.in_proj.fwd");
  const Op* out = find(fwd, "mamba.out_proj.fwd");
  BOOST_TEST_REQUIRE((in && out));
  BOOST_TEST(in->n == (2 * 4096 + 2 * 8 * 128 + 64) / 4);
  BOOST_TEST(in->m == 4096);  // every token, gathered
  BOOST_TEST(out->k == 4096 / 4);
  BOOST_TEST(find(fwd, "norm_1.fwd")->m == 1024);  // the rank's own rows
}

BOOST_AUTO_TEST_CASE(hybrids_are_refused_where_they_are_not_modelled) {
  const ModelConfig nano = shipped_hf("nemotron-3-nano");
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  TrainConfig cfg{.seq_len = 8192, .global_batch = 256, .micro_batch = 1, .n_gpus = 16};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.expert = 8;
  BOOST_TEST(check_config(nano, device, profile.params, cfg) == "");
  const Prediction p = predict(nano, device, profile.params, cfg);
  BOOST_TEST(p.tokens_per_s > 0);
  BOOST_TEST(p.mfu < 1.0);
  cfg.layout.context = 2;
  BOOST_TEST(contains(check_config(nano, device, profile.params, cfg), "with context parallel 2 are not modelled"));
  cfg.layout.context = 1;
  cfg.layout.tensor = 16;
  cfg.layout.sequence_parallel = true;
  cfg.n_gpus = 128;
  ModelConfig wide_kv = nano;  // so that the key/value heads divide and the groups are what is refused
  wide_kv.n_kv_heads = 32;
  BOOST_TEST(contains(check_config(wide_kv, device, profile.params, cfg), "64 Mamba-2 heads and 8 groups"));
  TrainConfig titan{.seq_len = 8192, .global_batch = 64, .micro_batch = 1, .n_gpus = 8};
  titan.layout.framework = Framework::kTorchtitan;
  titan.layout.sharding = Sharding::kFullShard;
  BOOST_TEST(contains(check_config(shipped_hf("nemotron-h-8b"), device, profile.params, titan), "under torchtitan"));
}

BOOST_AUTO_TEST_CASE(nemotron_h_is_read_strictly) {
  const auto read = [](const std::string& extra) {
    return test::error_of([&] {
      read_hf_config("{\"model_type\": \"nemotron_h\", \"hybrid_override_pattern\": \"M*-E\"" + extra + "}", "c.json");
    });
  };
  BOOST_TEST(read("") == "");
  BOOST_TEST(contains(read(", \"num_hidden_layers\": 5"), "c.json:1: num_hidden_layers: 5 differs from the 4 layers"));
  BOOST_TEST(contains(read(", \"moe_latent_size\": 0"), "moe_latent_size: 0 must be a whole number from 1"));
  BOOST_TEST(contains(read(", \"mamba_proj_bias\": true"), "mamba_proj_bias: true -- biases"));
  BOOST_TEST(contains(read(", \"mamba_num_heads\": 12"), "groups (8) must divide its heads (12)"));
  BOOST_TEST(contains(read(", \"ssm_state\": 12"), "unknown key 'ssm_state' for model_type nemotron_h"));
  BOOST_TEST(contains(test::error_of([] {
                        read_hf_config("{\"model_type\": \"nemotron_h\", \"hybrid_override_pattern\": \"M|E\"}",
                                       "c.json");
                      }),
                      "layer symbol '|'"));
  // The list form, with the legacy names, makes the same kinds as the string.
  const ModelConfig a =
      read_hf_config(
          "{\"model_type\": \"nemotron_h\", \"layers_block_type\": [\"mamba\", \"attention\", \"mlp\", \"moe\"]}",
          "c.json")
          .model;
  const ModelConfig b =
      read_hf_config("{\"model_type\": \"nemotron_h\", \"hybrid_override_pattern\": \"M*-E\"}", "c.json").model;
  BOOST_TEST_REQUIRE(a.layers.size() == 4u);
  BOOST_TEST((a.layers == b.layers));
  BOOST_TEST((a.layers[2].mixer == Mixer::kNone && a.layers[2].dense_ffn));
}

// Qwen3-Next 80B-A3B (Qwen/Qwen3-Next-80B-A3B-Instruct): 48 layers, every fourth gated attention (16
// heads of 256, 2 key/value heads, q_proj twice the query width for the gate, QK-norm), the others a
// Gated DeltaNet (16 key heads and 32 value heads of 128, convolution of 4); every layer 512 experts
// (top 10) of 512 and a gated shared expert of 512; hidden 2,048, vocabulary 151,936, untied. Qwen:
// 80B total, 3B active (tpsim: 79.67B; 3.87B active with the input table and the head, 3.25B without
// them, as Qwen's "3B activated" counts).
BOOST_AUTO_TEST_CASE(qwen3_next_counts_by_hand_and_its_delta_rule_runs_the_formula) {
  const ModelConfig next = shipped_hf("qwen3-next-80b-a3b");
  const int64_t h = 2048, vocab = 151936;
  const int64_t key_dim = 16 * 128, value_dim = 32 * 128;
  const int64_t gdn =
      h * (2 * key_dim + 2 * value_dim + 2 * 32) + 4 * (2 * key_dim + value_dim) + 2 * 32 + 128 + value_dim * h;
  const int64_t attention = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256;
  const int64_t moe = h * 512 + 512 * 3 * h * 512 + 3 * h * 512 + h;  // router, experts, shared expert and its gate
  const int64_t total = 36 * (gdn + moe + 2 * h) + 12 * (attention + moe + 2 * h) + 2 * vocab * h + h;
  BOOST_TEST(parameter_count(next, 4096) == total);
  BOOST_TEST(total == 79674391296);
  BOOST_TEST(std::abs(d(total) - 80e9) <= 0.5e9);
  const int64_t active_moe = h * 512 + 10 * 3 * h * 512 + 3 * h * 512 + h;
  const int64_t active = 36 * (gdn + active_moe + 2 * h) + 12 * (attention + active_moe + 2 * h) + h;
  BOOST_TEST(active_parameter_count(next, 4096) == active + vocab * h);
  BOOST_TEST(std::abs(d(active) - 3e9) <= 0.5e9);
  BOOST_TEST(attention_layer_count(next) == 12);
  for (size_t i = 0; i < 48; ++i)
    BOOST_TEST((next.layers[i].mixer == ((i + 1) % 4 == 0 ? Mixer::kAttention : Mixer::kGatedDeltaNet)), "layer " << i);
  // A Gated DeltaNet layer's delta rule: per token and value head 2 (3 C dk + 2 C dv + 3 dk dv + C^2 / 3)
  // with C = 64, dk = dv = 128; its GEMMs the two projections'.
  const LayerPattern kinds = layer_pattern(next);
  const ModelConfig& g = kinds.groups[0].model;
  BOOST_TEST_REQUIRE((g.mixer == Mixer::kGatedDeltaNet));
  const BlockShape s = block_shape(g, 1, 4096, Precision::kAmpBf16);
  OpList fwd;
  block_forward_ops(s, fwd);
  const double t = 4096, per_head = 3.0 * 64 * 128 + 2.0 * 64 * 128 + 3.0 * 128 * 128 + 64.0 * 64 / 3.0;
  BOOST_TEST(find(fwd, "gdn.delta_rule.fwd")->flops == t * 32 * 2.0 * per_head, tt::tolerance(kExact));
  const double mixer_gemm = 2.0 * t * h * ((2 * key_dim + 2 * value_dim + 2 * 32) + value_dim);
  const double moe_gemm = 2.0 * t * (h * 512.0 + 10.0 * 3 * h * 512 + 3.0 * h * 512 + h);
  BOOST_TEST(sum(fwd, OpKind::kGemm) == mixer_gemm + moe_gemm, tt::tolerance(kExact));
  // Gated attention: the gate doubles the query's projection and gates the output elementwise.
  const ModelConfig& a = kinds.groups[1].model;
  BOOST_TEST_REQUIRE((a.mixer == Mixer::kAttention && a.attention_output_gate));
  OpList afwd;
  block_forward_ops(block_shape(a, 1, 4096, Precision::kAmpBf16), afwd);
  BOOST_TEST(find(afwd, "attn.Wqkv.fwd")->n == 2 * 16 * 256 + 2 * 2 * 256);
  BOOST_TEST(find(afwd, "attn.output_gate.fwd") != nullptr);
  // Refused where not modelled, and read strictly.
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  TrainConfig cfg{.seq_len = 4096, .global_batch = 256, .micro_batch = 1, .n_gpus = 32};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.expert = 8;
  cfg.layout.pipeline = 4;
  BOOST_TEST(check_config(next, device, profile.params, cfg) == "");
  cfg.layout.tensor = 32;
  cfg.layout.pipeline = 1;
  cfg.layout.sequence_parallel = true;
  BOOST_TEST(contains(check_config(next, device, profile.params, cfg), "does not divide"));
  BOOST_TEST(contains(test::error_of([] {
                        read_hf_config(
                            "{\"model_type\": \"qwen3_next\", \"num_hidden_layers\": 2, \"layer_types\": "
                            "[\"linear_attention\", \"mamba\"]}",
                            "c.json");
                      }),
                      "layer type \"mamba\" (layer 1)"));
}
