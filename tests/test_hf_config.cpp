#define BOOST_TEST_MODULE hf_config
#include <boost/test/unit_test.hpp>
#include <algorithm>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common.hpp"
#include "io/hf_config.hpp"
#include "io/train_yaml.hpp"
#include "model/architecture.hpp"
#include "model/ops.hpp"

using namespace tpsim;
using test::contains;
using test::error_of;
namespace fs = std::filesystem;

namespace {

// The publishers' configs (tests/data/hf-configs) and llm-foundry's YAMLs (tests/data/llm-foundry),
// with their sources and licences beside them.
fs::path test_data() { return fs::path(TPSIM_TEST_DATA); }
fs::path shipped(const std::string& name) { return fs::path(TPSIM_DATA) / "models" / "hf" / (name + ".json"); }

int64_t count_of(const fs::path& p, int64_t seq = 2048) { return parameter_count(read_hf_config_file(p).model, seq); }

}  // namespace

BOOST_AUTO_TEST_CASE(the_seven_published_configs_count_exactly) {
  // tests/data/hf-configs/published_parameter_counts.json, each held exactly.
  const fs::path dir = test_data() / "hf-configs";
  BOOST_TEST_REQUIRE(fs::is_directory(dir));
  const std::vector<std::pair<std::string, int64_t>> published = {
      {"llama-3-8b", 8030261248LL},    {"llama-3.1-70b", 70553706496LL}, {"mistral-7b", 7241732096LL},
      {"mixtral-8x7b", 46702792704LL}, {"qwen2.5-7b", 7615616512LL},     {"gpt2", 124439808LL},
      {"mpt-7b", 6649286656LL}};
  for (const auto& [name, count] : published) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST(count_of(dir / name) == count);                        // the folder
      BOOST_TEST(count_of(dir / name / "config.json", 8192) == count);  // the file; no learned table grows with S
      BOOST_TEST(count_of(shipped(name)) == count);                     // the shipped copy
    }
  }
  const HfConfig mistral = read_hf_config_file(dir / "mistral-7b");
  BOOST_TEST(mistral.model.sliding_window == 4096);
  BOOST_TEST(mistral.model.kv_heads() == 8);
  const HfConfig mixtral = read_hf_config_file(dir / "mixtral-8x7b");
  BOOST_TEST(mixtral.model.moe.experts == 8);
  BOOST_TEST(mixtral.model.moe.top_k == 2);
  const HfConfig mpt = read_hf_config_file(dir / "mpt-7b");
  BOOST_TEST(!mpt.model.learned_positions());
  BOOST_TEST(mpt.max_seq_len.value_or(0) == 2048);
  // mosaicml/mpt-7b's attn_impl is torch: costed as PyTorch's unfused attention, and its note says so.
  BOOST_TEST(mpt.model.torch_attention);
  bool said = false;
  for (const auto& n : mpt.notes)
    said = said ||
           n.find("attn_impl: torch -- attention is costed as llm-foundry's PyTorch attention") != std::string::npos;
  BOOST_TEST(said);
}

BOOST_AUTO_TEST_CASE(shipped_configs_match_their_published_counts) {
  // data/models/hf/README.md: `exact` where the publisher states the exact count, else the figure
  // as published and the half-unit of its last digit (or the share stated there) as the tolerance.
  struct Row {
    const char* name;
    double published;
    double tolerance;  // absolute, in parameters
  };
  const Row rows[] = {
      {"llama-2-7b", 7e9, 0.5e9},
      {"llama-2-13b", 13e9, 0.5e9},
      {"llama-2-70b", 70e9, 0.015 * 70e9},
      {"llama-3-70b", 70e9, 1e9},
      {"llama-3.1-8b", 8e9, 0.5e9},
      {"llama-3.1-405b", 405e9, 1e9},
      {"llama-3.2-1b", 1.23e9, 0.01e9},
      {"llama-3.2-3b", 3.21e9, 0.005e9},
      {"llama-3.3-70b", 70e9, 1e9},
      {"mixtral-8x22b", 141e9, 0.5e9},
      {"qwen2.5-14b", 14.7e9, 0.1e9},
      {"qwen2.5-32b", 32.5e9, 0.01 * 32.5e9},
      {"qwen2.5-72b", 72.7e9, 0.05e9},
      {"qwen3-8b", 8.2e9, 0.05e9},
      {"qwen3-32b", 32.8e9, 0.05e9},
      {"qwen3-30b-a3b", 30.5e9, 0.05e9},
      {"qwen3-235b-a22b", 235e9, 0.5e9},
      {"qwen1.5-moe-a2.7b", 14.3e9, 0.05e9},
      {"dbrx", 132e9, 0.5e9},
      {"olmo-2-7b", 7.3e9, 0.05e9},
      {"gpt2-medium", 355e6, 0.5e6},
      {"gpt2-large", 774e6, 0.5e6},
      {"gpt2-xl", 1.5e9, 0.06e9},
      {"opt-1.3b", 1.3e9, 0.05e9},
      {"opt-2.7b", 2.7e9, 0.05e9},
      {"opt-6.7b", 6.7e9, 0.05e9},
      {"opt-13b", 13e9, 0.5e9},
      {"opt-30b", 30e9, 0.5e9},
      {"pythia-1.4b", 1414647808, 0},
      {"pythia-6.9b", 6857302016, 0},
      {"pythia-12b", 11846072320, 0},
      {"mpt-30b", 30e9, 0.5e9},
      {"mpt-7b-8k", 6649286656, 0},
      {"gpt-neo-125m", 125e6, 0.5e6},
      {"deepseek-v3", 671e9, 0.5e9},  // the main model; the checkpoint adds its MTP module
      {"kimi-k2", 1e12, 0.05e12},
      // OpenAI's gpt-oss model card, Table 1: 116.83B and 20.91B total (the MXFP4
      // release's experts counted as parameters), to the 0.01B printed.
      {"gpt-oss-120b", 116.83e9, 0.005e9},
      {"gpt-oss-20b", 20.91e9, 0.005e9},
      {"gemma-3-1b", 1e9, 0.005e9},  // Google's model card: 1B
      // The text models of the image-text releases: Meta's 400B for Maverick's checkpoint is a name;
      // Scout's 109B and Gemma 3's counts are held in tests/test_llama4_gemma3.cpp with their
      // vision parts.
      {"llama-4-maverick", 400e9, 1e9},
      {"gemma-3-27b", 27e9,
       0.05e9}};  // Google's model card: 1B  // mpt-7b's shape at max_seq_len 8192 (ALiBi: no table grows)
  for (const Row& r : rows) {
    BOOST_TEST_CONTEXT(r.name) {
      const double count = static_cast<double>(count_of(shipped(r.name)));
      BOOST_TEST(std::abs(count - r.published) <= r.tolerance);
    }
  }
}

BOOST_AUTO_TEST_CASE(every_shipped_config_reads_and_the_catalogue_keeps_mpt_first) {
  const ModelCatalog c = ModelCatalog::load_default();
  BOOST_TEST(c.expand("125m..70b", "--models").size() == 9u);  // the MPT range as before
  BOOST_TEST(c.get("llama-3.1-8b").n_kv_heads == 8);
  BOOST_TEST(c.get("mixtral-8x7b").moe.experts == 8);
  BOOST_TEST((c.get("qwen3-8b").qk_norm == QkNorm::kPerHead));
  BOOST_TEST((c.get("olmo-2-7b").qk_norm == QkNorm::kWhole));
  // GPT-Neo: global and local (a window of 256) attention layers alternate.
  const ModelConfig& neo = c.get("gpt-neo-125m");
  BOOST_TEST(neo.layers.size() == 12u);
  BOOST_TEST(!neo.layers[0].sliding);
  BOOST_TEST(neo.layers[1].sliding);
  BOOST_TEST(neo.sliding_window == 256);
}

// GPT-OSS by hand: per layer q (2880 x 4096), k and v (2880 x 512 each) and o (4096 x 2880) with
// their biases and 64 sink logits; a router of 128 (32) experts with a bias; each expert's gate_up
// (2880 x 5760) and down (2880 x 2880) with biases; two norms. Its model card's active count (5.13B,
// 3.61B) is the blocks' with top 4 experts plus the unembedding, which active_parameter_count
// gives (the input table, a lookup, is left out).
BOOST_AUTO_TEST_CASE(gpt_oss_counts_by_hand_and_alternates_windows) {
  const int64_t dm = 2880, attention = dm * 4096 + 4096 + 2 * (dm * 512 + 512) + 4096 * dm + dm + 64;
  const int64_t expert = dm * 5760 + 5760 + 2880 * dm + dm, norms = 2 * dm, table = 201088 * dm;
  for (const auto& [name, layers, experts, active_published] :
       {std::tuple{"gpt-oss-120b", 36, 128, 5.13e9}, std::tuple{"gpt-oss-20b", 24, 32, 3.61e9}}) {
    BOOST_TEST_CONTEXT(name) {
      const ModelConfig m = read_hf_config_file(shipped(name)).model;
      const int64_t router = dm * experts + experts;
      BOOST_TEST(parameter_count(m, 4096) == layers * (attention + router + experts * expert + norms) + 2 * table + dm);
      const int64_t active = active_parameter_count(m, 4096);
      BOOST_TEST(active == layers * (attention + router + 4 * expert + norms) + table + dm);
      BOOST_TEST(std::abs(static_cast<double>(active) - active_published) <= 0.005e9);
      BOOST_TEST_REQUIRE(m.layers.size() == static_cast<size_t>(layers));
      BOOST_TEST(m.layers[0].sliding);  // sliding first, then full, alternating
      BOOST_TEST(!m.layers[1].sliding);
      BOOST_TEST(m.sliding_window == 128);
    }
  }
  BOOST_TEST(contains(error_of([] {
                        read_hf_config(R"({"model_type": "gpt_oss", "num_experts_per_tok": 4, "experts_per_token": 2})",
                                       "c.json");
                      }),
                      "c.json:1: experts_per_token: 2 differs from num_experts_per_tok (4)"));
}

// Gemma 3 1B by hand: per layer q (1152 x 1024), k and v (1152 x 256), o (1024 x 1152), q_norm
// and k_norm of 256, GeGLU of 6912 (three matrices), four norms of 1152; the tied table of 262,144
// rows and the final norm: 999,885,952. Layers 5, 11, 17 and 23 attend globally, the others within
// 512 (sliding_window_pattern 6).
BOOST_AUTO_TEST_CASE(gemma_3_counts_by_hand_with_four_norms_and_its_local_global_pattern) {
  const ModelConfig m = read_hf_config_file(shipped("gemma-3-1b")).model;
  const int64_t dm = 1152, layer = dm * 1024 + 2 * dm * 256 + 1024 * dm + 2 * 256 + 3 * dm * 6912 + 4 * dm;
  BOOST_TEST(parameter_count(m, 4096) == 26 * layer + 262144 * dm + dm);
  BOOST_TEST(parameter_count(m, 4096) == 999885952);
  BOOST_TEST_REQUIRE(m.layers.size() == 26u);
  for (size_t i = 0; i < 26; ++i) BOOST_TEST(m.layers[i].sliding == ((i + 1) % 6 != 0), "layer " << i);
  BOOST_TEST(m.sliding_window == 512);
  BOOST_TEST((m.activation == Activation::kGelu && m.ffn == FfnKind::kGlu && m.tie_embeddings));
  const BlockShape s = block_shape(layer_pattern(m).groups.front().model, 1, 4096, Precision::kAmpBf16);
  OpList fwd;
  block_forward_ops(s, fwd);
  int norms = 0;
  for (const Op& op : fwd) norms += op.mem == MemKind::kRmsNorm && op.n == dm;
  BOOST_TEST(norms == 4);  // before and after the attention and the MLP
  BOOST_TEST(contains(
      error_of([] { read_hf_config(R"({"model_type": "gemma3_text", "final_logit_softcapping": 30.0})", "c.json"); }),
      "final_logit_softcapping: 30.0 -- logit soft-capping: tpsim cannot model it yet"));
}

BOOST_AUTO_TEST_CASE(qk_norm_parameters_count) {
  // Qwen3-8B: per layer q_norm and k_norm of head_dim (2 x 128); OLMo 2: q_dim + kv_dim.
  ModelConfig m = read_hf_config_file(shipped("qwen3-8b")).model;
  const int64_t with = parameter_count(m, 2048);
  m.qk_norm = QkNorm::kNone;
  BOOST_TEST(with - parameter_count(m, 2048) == 36 * 2 * 128);
  ModelConfig o = read_hf_config_file(shipped("olmo-2-7b")).model;
  const int64_t olmo = parameter_count(o, 2048);
  o.qk_norm = QkNorm::kNone;
  BOOST_TEST(olmo - parameter_count(o, 2048) == 32 * (4096 + 4096));
}

BOOST_AUTO_TEST_CASE(unknown_keys_and_types_are_errors_with_file_line_and_hint) {
  const std::string llama = "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 64,\n  \"num_attention_heads\": 4,\n";
  BOOST_TEST(error_of([&] { read_hf_config(llama + "  \"num_kv_heads\": 2\n}", "c.json"); }) ==
             "c.json:5: unknown key 'num_kv_heads' for model_type llama (did you mean num_key_value_heads?)");
  BOOST_TEST(contains(error_of([&] { read_hf_config("{\"model_type\": \"t5\"}", "c.json"); }),
                      "c.json:1: model_type 't5' is not one tpsim models (supported: "));
  BOOST_TEST(contains(error_of([&] { read_hf_config("{\"model_type\": \"llama\", \"a\": 1, \"a\": 2}", "c.json"); }),
                      "c.json: duplicate key 'a'"));
  BOOST_TEST(
      contains(error_of([&] { read_hf_config("{\"model_type\": \"llama\",", "c.json"); }), "c.json: not valid JSON"));
  BOOST_TEST(contains(error_of([&] { read_hf_config(llama + "  \"hidden_act\": \"tanh\"\n}", "c.json"); }),
                      "c.json:5: hidden_act: \"tanh\" -- an activation other than SiLU, GELU, ReLU and squared ReLU"));
  BOOST_TEST(contains(error_of([&] { read_hf_config(llama + "  \"num_hidden_layers\": 1.5\n}", "c.json"); }),
                      "c.json:5: num_hidden_layers: 1.5 must be a whole number"));
  const HfConfig ok = read_hf_config(llama + "  \"rope_theta\": 10000.0, \"bos_token_id\": 1\n}", "c.json");
  BOOST_TEST(ok.ignored == (std::vector<std::string>{"bos_token_id", "rope_theta"}));
}

BOOST_AUTO_TEST_CASE(architectures_without_a_field_are_refused_naming_the_key) {
  BOOST_TEST(contains(error_of([] { read_hf_config("{\"model_type\": \"olmo\"}", "c.json"); }),
                      "OLMo's non-parametric LayerNorm"));
  BOOST_TEST(
      contains(error_of([] { read_hf_config("{\"model_type\": \"opt\", \"do_layer_norm_before\": false}", "c.json"); }),
               "c.json:1: do_layer_norm_before: false -- OPT's post-norm"));
  BOOST_TEST(
      contains(error_of([] { read_hf_config("{\"model_type\": \"opt\", \"word_embed_proj_dim\": 512}", "c.json"); }),
               "word_embed_proj_dim"));
  BOOST_TEST(
      contains(error_of([] { read_hf_config("{\"model_type\": \"qwen2_moe\", \"mlp_only_layers\": [24]}", "c.json"); }),
               "c.json:1: mlp_only_layers: [24] must list layer indices from 0 to 23"));
  BOOST_TEST(contains(error_of([] {
                        read_hf_config(
                            "{\"model_type\": \"mistral\", \"sliding_window\": null, \"num_hidden_layers\": 2, "
                            "\"layer_types\": [\"full_attention\", \"sliding_attention\"]}",
                            "c.json");
                      }),
                      "layer_types: [\"full_attention\",\"sliding_attention\"] lists sliding_attention layers without "
                      "a sliding_window"));
  BOOST_TEST(contains(error_of([] {
                        read_hf_config(
                            "{\"model_type\": \"mistral\", \"num_hidden_layers\": 2, "
                            "\"layer_types\": [\"full_attention\", \"linear_attention\"]}",
                            "c.json");
                      }),
                      "layer type \"linear_attention\" (layer 1): tpsim cannot model it yet"));
  BOOST_TEST(
      contains(error_of([] { read_hf_config("{\"model_type\": \"llama\", \"attention_bias\": true}", "c.json"); }),
               "attention_bias: true"));
  BOOST_TEST(
      contains(error_of([] { read_hf_config("{\"model_type\": \"gpt2\", \"add_cross_attention\": true}", "c.json"); }),
               "cross-attention"));
  BOOST_TEST(contains(
      error_of([] { read_hf_config("{\"model_type\": \"dbrx\", \"ffn_config\": {\"moe_top_kk\": 2}}", "c.json"); }),
      "c.json:1: unknown key 'ffn_config.moe_top_kk' for model_type dbrx (did you mean moe_top_k?)"));
}

BOOST_AUTO_TEST_CASE(transformers_defaults_fill_absent_keys) {
  // configuration_mistral.py: sliding_window 4096 unless null; configuration_mixtral.py: 8 experts, top 2.
  BOOST_TEST(read_hf_config("{\"model_type\": \"mistral\"}", "c").model.sliding_window == 4096);
  BOOST_TEST(read_hf_config("{\"model_type\": \"mistral\", \"sliding_window\": null}", "c").model.sliding_window == 0);
  const ModelConfig mixtral = read_hf_config("{\"model_type\": \"mixtral\"}", "c").model;
  BOOST_TEST(mixtral.moe.experts == 8);
  BOOST_TEST(mixtral.moe.top_k == 2);
  const ModelConfig opt = read_hf_config("{\"model_type\": \"opt\"}", "c").model;
  BOOST_TEST(opt.max_positions == 2050);  // OPT's learned table: max_position_embeddings + 2
  BOOST_TEST((opt.activation == Activation::kRelu));
  const ModelConfig qwen2 = read_hf_config("{\"model_type\": \"qwen2\"}", "c").model;
  BOOST_TEST(qwen2.qkv_bias);
  BOOST_TEST(!qwen2.linear_bias);
}

namespace {

// A training YAML with an hf_causal_lm block, written to a temporary folder.
std::string hf_yaml(const std::string& model_keys) {
  return "max_seq_len: 4096\nmodel:\n  name: hf_causal_lm\n" + model_keys + "global_train_batch_size: 8\n";
}

}  // namespace

// model.peft_config: Hugging Face PEFT's LoraConfig as llm-foundry passes it; what tpsim does not model
// is refused naming file:line and key.
BOOST_AUTO_TEST_CASE(peft_config_is_read_as_lora_or_refused_by_key) {
  const auto yaml = [](const std::string& peft) {
    return hf_yaml("  pretrained_model_name_or_path: meta-llama/Llama-3.1-8B\n  peft_config:\n" + peft);
  };
  const TrainYaml t = parse_train_yaml(
      yaml("    r: 16\n    lora_alpha: 32\n    target_modules: all-linear\n    init_lora_weights: gaussian\n"),
      "l.yaml");
  BOOST_TEST(t.lora.rank == 16);
  BOOST_TEST(t.lora.target_bits == kLoraAll);
  BOOST_TEST(!t.lora.fused_qkv);  // Llama's q_proj, k_proj, v_proj: one adapter each
  BOOST_TEST(std::count(t.ignored.begin(), t.ignored.end(), "model.peft_config.init_lora_weights") == 1);
  const auto error = [&](const std::string& peft) { return error_of([&] { parse_train_yaml(yaml(peft), "l.yaml"); }); };
  BOOST_TEST(contains(error("    target_modules: '.*proj'\n"),
                      "l.yaml:6: model.peft_config.target_modules: '.*proj' is a regular expression"));
  BOOST_TEST(contains(error("    target_modules: [q_proj]\n    use_dora: true\n"),
                      "l.yaml:7: model.peft_config.use_dora: true (DoRA"));
  BOOST_TEST(contains(error("    target_modules: [q_proj]\n    modules_to_save: [lm_head]\n"),
                      "model.peft_config.modules_to_save: modules trained or adapted beyond target_modules"));
  BOOST_TEST(error("    target_modules: [q_proj]\n    lora_rank: 8\n") ==
             "l.yaml:7: model.peft_config: unknown key 'lora_rank' (did you mean lora_bias?) (Hugging Face PEFT's "
             "LoraConfig)");
  BOOST_TEST(contains(error("    target_modules: [q_proj]\n    peft_type: PREFIX_TUNING\n"),
                      "PREFIX_TUNING -- llm-foundry takes only LORA"));
  BOOST_TEST(contains(error("    target_modules: [c_attn]\n"), "'c_attn' is not a linear tpsim knows"));
}

BOOST_AUTO_TEST_CASE(hf_causal_lm_resolves_shipped_configs_and_applies_overrides) {
  const TrainYaml t = parse_train_yaml(hf_yaml("  pretrained_model_name_or_path: meta-llama/Llama-3.1-8B\n"
                                               "  pretrained: false\n  use_flash_attention_2: true\n"),
                                       "run.yaml");
  BOOST_TEST(parameter_count(t.model, 4096) == 8030261248LL);
  BOOST_TEST(t.model.name == "run");
  BOOST_TEST(contains(t.notes.at(0),
                      "use_flash_attention_2: true -- tpsim costs attention as the profile's causal flash attention"));
  const TrainYaml gpt2 = parse_train_yaml(
      hf_yaml("  pretrained_model_name_or_path: gpt2\n  config_overrides:\n    n_positions: 2048\n"), "g.yaml");
  BOOST_TEST(gpt2.model.max_positions == 2048);
  BOOST_TEST(error_of([] {
               parse_train_yaml(
                   hf_yaml("  pretrained_model_name_or_path: gpt2\n  config_overrides:\n    n_positons: 2048\n"),
                   "g.yaml");
             }) == "g.yaml:6: unknown key 'n_positons' for model_type gpt2 (did you mean n_positions?)");
  BOOST_TEST(error_of([] {
               parse_train_yaml(hf_yaml("  pretrained_model_name_or_path: gpt2\n  peft_config: {r: 8}\n"), "g.yaml");
             }) ==
             "g.yaml:5: model.peft_config: no target_modules -- PEFT then picks them by model type; name them "
             "(q_proj, v_proj, ..., or all-linear)");
  BOOST_TEST(contains(error_of([] {
                        parse_train_yaml(hf_yaml("  pretrained_model_name_or_path: gpt2\n  load_in_8bit: true\n"),
                                         "g.yaml");
                      }),
                      "g.yaml:5: model.load_in_8bit: true"));
  BOOST_TEST(
      error_of([] {
        parse_train_yaml(hf_yaml("  pretrained_model_name_or_path: gpt2\n  use_flash_attention: true\n"), "g.yaml");
      }) ==
      "g.yaml:5: model: unknown key 'use_flash_attention' (did you mean use_flash_attention_2?) (llm-foundry's hf_causal_lm)");
  const std::string missing =
      error_of([] { parse_train_yaml(hf_yaml("  pretrained_model_name_or_path: nobody/none\n"), "g.yaml"); });
  BOOST_TEST(contains(missing,
                      "g.yaml:4: model.pretrained_model_name_or_path 'nobody/none': no config.json in a local folder"));
  BOOST_TEST(contains(missing, "Hugging Face cache"));
  BOOST_TEST(contains(missing, "tpsim never downloads"));
}

BOOST_AUTO_TEST_CASE(hf_causal_lm_prefers_a_local_folder_then_the_cache) {
  const fs::path tmp = fs::temp_directory_path() / ("tpsim_hf_" + std::to_string(::getpid()));
  fs::create_directories(tmp / "local");
  std::ofstream(tmp / "local" / "config.json") << R"({"model_type": "gpt2", "n_layer": 2})";
  const fs::path snap = tmp / "hub" / "models--acme--tiny" / "snapshots" / "abc";
  fs::create_directories(snap);
  std::ofstream(snap / "config.json") << R"({"model_type": "gpt2", "n_layer": 3})";
  ::setenv("HF_HUB_CACHE", (tmp / "hub").c_str(), 1);
  BOOST_TEST(resolve_pretrained_config((tmp / "local").string()) == tmp / "local" / "config.json");
  BOOST_TEST(read_hf_config_file(resolve_pretrained_config("acme/tiny")).model.n_layers == 3);
  BOOST_TEST(resolve_pretrained_config("gpt2").filename() == "gpt2.json");  // not cached: the shipped copy
  ::unsetenv("HF_HUB_CACHE");
  BOOST_TEST(hf_model_name(tmp / "local") == "local");
  BOOST_TEST(hf_model_name(shipped("gpt2")) == "gpt2");
  fs::remove_all(tmp);
}

BOOST_AUTO_TEST_CASE(llm_foundrys_own_hf_causal_lm_yamls_predict_or_name_what_they_cannot) {
  const fs::path dir = test_data() / "llm-foundry";
  BOOST_TEST_REQUIRE(fs::is_directory(dir));
  BOOST_TEST(parameter_count(read_train_yaml(dir / "pretrain" / "hf-llama-3.1-8B.yaml").model, 8192) == 8030261248LL);
  // config_overrides: n_positions: ${variables.max_seq_len} (2048): GPT-2 with a learned table of 2048 rows.
  BOOST_TEST(parameter_count(read_train_yaml(dir / "pretrain" / "gpt2-small.yaml").model, 2048) ==
             124439808LL + 1024 * 768);
  BOOST_TEST(read_train_yaml(dir / "finetune" / "dbrx-full-ft.yaml").model.moe.experts == 16);
  BOOST_TEST((read_train_yaml(dir / "pretrain" / "opt-3b.yaml").model.activation == Activation::kRelu));
  BOOST_TEST(parameter_count(read_train_yaml(dir / "finetune" / "mpt-7b_dolly_sft.yaml").model, 2048) == 6649286656LL);
  // peft_config: r 64, lora_alpha 128, lora_dropout 0.05, target_modules [Wqkv] (DBRX's fused QKV).
  const TrainYaml lora = read_train_yaml(dir / "finetune" / "dbrx-lora-ft.yaml");
  BOOST_TEST(lora.lora.rank == 64);
  BOOST_TEST(lora.lora.alpha == 128.0);
  BOOST_TEST(lora.lora.dropout_per_mille == 50);
  BOOST_TEST(lora.lora.target_bits == kLoraQkv);
  BOOST_TEST(lora.lora.fused_qkv);
  BOOST_TEST(read_train_yaml(dir / "pretrain" / "gpt-neo-125m.yaml").model.layers.size() == 12u);
  // llm-foundry itself refuses this one: LlamaConfig has neither max_seq_len nor attn_config to override.
  const std::string adapt = error_of([&] { read_train_yaml(dir / "finetune" / "llama-3-8b_domain_adapt.yaml"); });
  BOOST_TEST(contains(adapt, "llama-3-8b_domain_adapt.yaml:21: unknown key 'attn_config' for model_type llama"));
}
