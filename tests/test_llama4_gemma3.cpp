// Llama 4 (chunked attention, layers without RoPE, interleaved experts with a shared expert, QK-norm
// without a weight) and the image-text configs of Gemma 3 and Llama 4 (the text_config's language
// model): parameter counts by hand against the published ones, the layer kinds the readers make,
// chunked attention's op against attention over the chunks as sequences, and the refusals.
#define BOOST_TEST_MODULE llama4_gemma3
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
namespace tt = boost::test_tools;
namespace fs = std::filesystem;

namespace {

double d(int64_t x) { return static_cast<double>(x); }

HfConfig shipped_config(const std::string& name) {
  return read_hf_config_file(fs::path(TPSIM_DATA) / "models" / "hf" / (name + ".json"));
}
ModelConfig shipped(const std::string& name) { return shipped_config(name).model; }

// A Llama 4 block's attention (q and o of 40 x 128, k and v of 8 x 128 over 5,120; no biases, no
// QK-norm weights) and a SwiGLU of width f.
constexpr int64_t kDm = 5120;
constexpr int64_t kAttention = 2 * kDm * 40 * 128 + 2 * kDm * 8 * 128;
constexpr int64_t swiglu(int64_t f) { return 3 * kDm * f; }

}  // namespace

BOOST_AUTO_TEST_CASE(llama_4_scout_and_maverick_count_by_hand) {
  // Scout (meta-llama/Llama-4-Scout-17B-16E): 48 layers, each 16 routed experts and one shared
  // expert of 8,192, top 1; vocabulary 202,048, untied. Meta's model card: 109B total, 17B active,
  // for the checkpoint with its vision encoder, adapter and projector (871,932,416 parameters by
  // hand from modeling_llama4.py's modules: not part of the model costed).
  const ModelConfig scout = shipped("llama-4-scout");
  const int64_t norms = 2 * kDm, embedding = 202048 * kDm, vision = 871932416;
  const int64_t scout_layer = kAttention + norms + 16 * kDm + 17 * swiglu(8192);
  const int64_t scout_total = 48 * scout_layer + 2 * embedding + kDm;
  BOOST_TEST(scout_total == 107769861120);
  BOOST_TEST(parameter_count(scout, 8192) == scout_total);
  BOOST_TEST(std::abs(d(scout_total + vision) - 109e9) <= 0.5e9);
  // Active per token: attention, router, one routed and the shared expert; with the input table 17B.
  const int64_t scout_active = 48 * (kAttention + norms + 16 * kDm + 2 * swiglu(8192)) + embedding + kDm;
  BOOST_TEST(active_parameter_count(scout, 8192) == scout_active);
  BOOST_TEST(std::abs(d(scout_active + embedding) - 17e9) <= 0.5e9);
  // Maverick (meta-llama/Llama-4-Maverick-17B-128E): experts in every other layer (128 and the
  // shared one), a dense SwiGLU of 16,384 in the others. The model card's 400B total is a name (the
  // text model is 400.71B, 401.58B with the vision parts); 17B active.
  const ModelConfig maverick = shipped("llama-4-maverick");
  const int64_t dense_layer = kAttention + norms + swiglu(16384);
  const int64_t moe_layer = kAttention + norms + 128 * kDm + 129 * swiglu(8192);
  const int64_t maverick_total = 24 * dense_layer + 24 * moe_layer + 2 * embedding + kDm;
  BOOST_TEST(maverick_total == 400711848960);
  BOOST_TEST(parameter_count(maverick, 8192) == maverick_total);
  BOOST_TEST(std::abs(d(maverick_total) - 400e9) <= 1e9);
  const int64_t maverick_active =
      24 * dense_layer + 24 * (kAttention + norms + 128 * kDm + 2 * swiglu(8192)) + embedding + kDm;
  BOOST_TEST(active_parameter_count(maverick, 8192) == maverick_active);
  BOOST_TEST(std::abs(d(maverick_active + embedding) - 17e9) <= 0.5e9);
}

BOOST_AUTO_TEST_CASE(llama_4_layers_are_read_as_the_model_builds_them) {
  // Every fourth layer (3, 7, ..., 47) without RoPE and attending to the whole prefix; the others
  // rotate, norm q and k without a weight and attend within chunks of 8,192.
  const ModelConfig scout = shipped("llama-4-scout");
  BOOST_TEST_REQUIRE(scout.layers.size() == 48u);
  BOOST_TEST(scout.attention_chunk == 8192);
  BOOST_TEST((scout.qk_norm == QkNorm::kPerHeadNoWeight));
  for (size_t i = 0; i < 48; ++i) {
    const bool nope = (i + 1) % 4 == 0;
    BOOST_TEST(scout.layers[i].nope == nope, "layer " << i);
    BOOST_TEST(scout.layers[i].chunked == !nope, "layer " << i);
    BOOST_TEST(!scout.layers[i].dense_ffn, "layer " << i);
  }
  const LayerPattern p = layer_pattern(scout);
  BOOST_TEST_REQUIRE(p.groups.size() == 2u);
  const ModelConfig& rope = p.groups[0].model;
  const ModelConfig& nope = p.groups[1].model;
  BOOST_TEST(p.groups[0].layers == 36);
  BOOST_TEST((rope.positions == PositionKind::kRope && rope.qk_norm == QkNorm::kPerHeadNoWeight));
  BOOST_TEST(rope.attention_chunk == 8192);
  BOOST_TEST((nope.positions == PositionKind::kNone && nope.qk_norm == QkNorm::kNone));
  BOOST_TEST(nope.attention_chunk == 0);
  BOOST_TEST(p.runs.size() == 24u);  // 3 rotated, 1 not, twelve times
  // Maverick: dense layers at even indices, experts at odd (interleave_moe_layer_step 2), no QK-norm.
  const ModelConfig maverick = shipped("llama-4-maverick");
  BOOST_TEST_REQUIRE(maverick.layers.size() == 48u);
  BOOST_TEST((maverick.qk_norm == QkNorm::kNone));
  for (size_t i = 0; i < 48; ++i) BOOST_TEST(maverick.layers[i].dense_ffn == (i % 2 == 0), "layer " << i);
  // Dense rotated layers, expert rotated layers and expert layers without RoPE (3, 7, ...: all odd).
  BOOST_TEST(layer_pattern(maverick).groups.size() == 3u);
}

BOOST_AUTO_TEST_CASE(chunked_attention_is_attention_over_the_chunks_as_sequences) {
  const LayerGroup rope = layer_pattern(shipped("llama-4-scout")).groups[0];
  const BlockShape chunked = block_shape(rope.model, 2, 32768, Precision::kAmpBf16);
  BOOST_TEST(chunked.chunk == 8192);
  ModelConfig whole = rope.model;
  whole.attention_chunk = 0;
  const BlockShape full = block_shape(whole, 2, 32768, Precision::kAmpBf16);
  const BlockShape as_sequences = block_shape(whole, 8, 8192, Precision::kAmpBf16);
  for (OpKind kind : {OpKind::kAttentionFwd, OpKind::kAttentionBwd}) {
    const Op a = attention_op("a", kind, chunked), b = attention_op("b", kind, as_sequences);
    const Op f = attention_op("f", kind, full);
    BOOST_TEST(a.batch == 8);
    BOOST_TEST(a.seq == 8192);
    BOOST_TEST(a.flops == b.flops);
    BOOST_TEST(a.bytes_read == b.bytes_read);
    BOOST_TEST(a.bytes_written == b.bytes_written);
    BOOST_TEST(a.saved_bytes == b.saved_bytes);
    BOOST_TEST(a.flops == f.flops / 4.0, tt::tolerance(1e-12));  // a quarter of the pairs of 32,768
    BOOST_TEST(a.bytes_read == f.bytes_read);                    // the same q, k and v
  }
  // At or below the chunk, the whole causal prefix.
  BOOST_TEST(block_shape(rope.model, 1, 8192, Precision::kAmpBf16).chunk == 0);
}

BOOST_AUTO_TEST_CASE(a_norm_without_a_weight_reads_and_writes_no_weight) {
  const LayerGroup rope = layer_pattern(shipped("llama-4-scout")).groups[0];
  BlockShape s = block_shape(rope.model, 1, 4096, Precision::kAmpBf16);
  OpList fwd, bwd;
  block_forward_ops(s, fwd);
  block_backward_ops(s, bwd);
  const double e = d(s.tokens()) * 40 * 128, rstd = d(s.tokens()) * 40 * 4.0;
  int seen = 0;
  for (const Op& op : fwd)
    if (std::string(op.name) == "attn.q_norm.fwd") {
      ++seen;
      BOOST_TEST(op.bytes_read == e * 2.0);  // q, no weight
      BOOST_TEST(op.bytes_written == e * 2.0 + rstd);
    }
  for (const Op& op : bwd)
    if (std::string(op.name) == "attn.q_norm.bwd") {
      ++seen;
      BOOST_TEST(op.kernels == 1);  // no weight gradient to reduce
      BOOST_TEST(op.bytes_written == e * 2.0);
    }
  BOOST_TEST(seen == 2);
}

BOOST_AUTO_TEST_CASE(chunked_attention_is_refused_where_it_is_not_modelled) {
  const ModelConfig scout = shipped("llama-4-scout");
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  TrainConfig cfg{.seq_len = 16384, .global_batch = 128, .micro_batch = 1, .n_gpus = 128};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.tensor = 4;
  cfg.layout.sequence_parallel = true;
  cfg.layout.expert = 16;
  cfg.layout.pipeline = 2;
  BOOST_TEST(check_config(scout, device, profile.params, cfg) == "");
  const Prediction p = predict(scout, device, profile.params, cfg);
  BOOST_TEST(p.time.attention_s > 0);
  cfg.seq_len = 12288;
  BOOST_TEST(contains(check_config(scout, device, profile.params, cfg), "not a multiple of the chunk"));
  cfg.seq_len = 16384;
  cfg.layout.context = 2;
  BOOST_TEST(contains(check_config(scout, device, profile.params, cfg), "with context parallel 2 is not modelled"));
  // A sequence no longer than the chunk has nothing chunked to refuse.
  cfg.seq_len = 8192;
  BOOST_TEST(!contains(check_config(scout, device, profile.params, cfg), "chunked"));
}

BOOST_AUTO_TEST_CASE(gemma_3_image_text_configs_cost_their_language_model) {
  // Gemma 3 4B, 12B and 27B (google/gemma-3-*-pt, model_type gemma3): the text_config's model.
  // The Gemma 3 technical report's Table 1 gives their non-embedding parameters (3,209M, 10,759M,
  // 25,600M) and a 417M vision encoder; the vocabulary is 262,208 rows, tied.
  struct Row {
    const char* name;
    int64_t hidden, ffn, layers, heads, kv_heads, head_dim, total;
    double non_embedding;
  };
  const Row rows[] = {{"gemma-3-4b", 2560, 10240, 34, 8, 4, 256, 3880263168, 3209e6},
                      {"gemma-3-12b", 3840, 15360, 48, 16, 8, 256, 11766034176, 10759e6},
                      {"gemma-3-27b", 5376, 21504, 62, 32, 16, 128, 27009346304, 25600e6}};
  for (const Row& r : rows) {
    BOOST_TEST_CONTEXT(r.name) {
      const HfConfig c = shipped_config(r.name);
      const int64_t dm = r.hidden, q = r.heads * r.head_dim, kv = r.kv_heads * r.head_dim;
      // q, k, v, o; the QK-norms' head_dim weights; four norms; GeGLU; and the final norm.
      const int64_t layer = dm * (2 * q + 2 * kv) + 2 * r.head_dim + 4 * dm + 3 * dm * r.ffn;
      const int64_t total = r.layers * layer + dm + 262208 * dm;
      BOOST_TEST(total == r.total);
      BOOST_TEST(parameter_count(c.model, 8192) == total);
      BOOST_TEST(std::abs(d(total - 262208 * dm) - r.non_embedding) <= 0.5e6);
      // Five sliding layers (1,024) to one global.
      int64_t sliding = 0;
      for (const LayerKind& k : c.model.layers) sliding += k.sliding;
      BOOST_TEST(sliding == r.layers - r.layers / 6);
      BOOST_TEST(c.model.sliding_window == 1024);
      bool said = false;
      for (const std::string& n : c.notes) said = said || contains(n, "vision_config: not costed and not counted");
      BOOST_TEST(said);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_new_readers_are_strict) {
  const auto read = [](const std::string& text) { return test::error_of([&] { read_hf_config(text, "c.json"); }); };
  const std::string llama4 = "{\"model_type\": \"llama4_text\", \"num_hidden_layers\": 4";
  BOOST_TEST(read(llama4 + "}") == "");
  BOOST_TEST(contains(read(llama4 + ", \"no_rope_layers\": [1, 1, 0]}"),
                      "c.json:1: no_rope_layers: [1,1,0] must list 1 (RoPE) or 0 (no RoPE) for each of the 4"));
  BOOST_TEST(contains(read(llama4 + ", \"no_rope_layers\": [1, 2, 1, 0]}"), "no_rope_layers"));
  BOOST_TEST(contains(read(llama4 + ", \"moe_layers\": [4]}"), "moe_layers: [4] must list layer indices from 0 to 3"));
  BOOST_TEST(contains(read(llama4 + ", \"layer_types\": [\"full_attention\", \"chunked_attention\", \"x\", "
                                    "\"full_attention\"]}"),
                      "layer type \"x\" (layer 2)"));
  BOOST_TEST(contains(read(llama4 + ", \"attention_bias\": true}"), "attention_bias: true"));
  BOOST_TEST(
      contains(read(llama4 + ", \"nope_interval\": 4}"), "unknown key 'nope_interval' for model_type llama4_text"));
  // moe_layers and layer_types as given: the listed layers have experts; layer 1 attends in full.
  const ModelConfig m =
      read_hf_config(llama4 +
                         ", \"moe_layers\": [0, 2], \"layer_types\": [\"chunked_attention\", \"full_attention\", "
                         "\"chunked_attention\", \"full_attention\"]}",
                     "c.json")
          .model;
  BOOST_TEST_REQUIRE(m.layers.size() == 4u);
  BOOST_TEST((!m.layers[0].dense_ffn && m.layers[1].dense_ffn && !m.layers[2].dense_ffn && m.layers[3].dense_ffn));
  BOOST_TEST((m.layers[0].chunked && !m.layers[1].chunked && m.layers[2].chunked && !m.layers[3].chunked));
  // Image-text wrappers: the text_config is required, of its own type, and read as strictly.
  BOOST_TEST(contains(read("{\"model_type\": \"gemma3\"}"), "c.json: text_config:  is missing"));
  BOOST_TEST(contains(read("{\"model_type\": \"gemma3\", \"text_config\": {\"model_type\": \"llama4_text\"}}"),
                      "text_config.model_type: \"llama4_text\" must be gemma3_text"));
  BOOST_TEST(contains(read("{\"model_type\": \"llama4\",\n \"text_config\": {\"hidden_sise\": 8}}"),
                      "c.json:2: unknown key 'text_config.hidden_sise' for model_type llama4"));
  BOOST_TEST(contains(read("{\"model_type\": \"llama4\", \"tie_word_embeddings\": true, \"text_config\": {}}"),
                      "tie_word_embeddings: true -- a top-level tie"));
}
