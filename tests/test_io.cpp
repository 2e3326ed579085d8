// Readers on the real data files and on malformed ones: every error names the input and the place.
#define BOOST_TEST_MODULE io
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>

#include "common.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/output.hpp"

using namespace tpsim;
namespace fs = std::filesystem;

namespace {
using namespace tpsim::test;

const std::string kHeader =
    "| Model | SeqLen (T) | # GPUs | GPU | MFU | HFU | MicroBatchSize | GradAccum | GlobalBatchSize | Throughput (S/s) | "
    "Throughput (T/s) | Precision | MP Mode | Sharding Strategy | Activation Checkpointing | NumParams |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
const std::string kRow =
    "| 1b | 2048 | 8 | a100_80gb | 59.86 | 59.86 | 14 | 4 | 448 | 80 | 164109 | amp_bf16 | DEFAULT | FULL_SHARD | False | "
    "1315950592 |\n";
}  // namespace

BOOST_AUTO_TEST_CASE(seed_tables_read_with_the_a100_40gb_header_repaired) {
  std::size_t rows = 0;
  for (const auto& path : test::seed_tables()) {
    const MeasuredTable t = read_measured_table(path);
    rows += t.rows.size();
    if (contains(path, "a100_40gb")) {
      BOOST_TEST_REQUIRE(t.warnings.size() == 1u);
      BOOST_TEST(contains(t.warnings[0], "Model TFLOP"));
      BOOST_TEST(contains(t.warnings[0], path + ":"));
    } else {
      BOOST_TEST(t.warnings.empty());
    }
  }
  BOOST_TEST(rows == 198u);
  const MeasuredTable h = read_measured_table(test::seed_tables()[0]);
  BOOST_TEST(h.rows[0].model == "70b");
  BOOST_TEST(h.rows[0].tokens_per_s == 66523.0);
  BOOST_TEST(h.rows[0].line == 3);
}

BOOST_AUTO_TEST_CASE(csv_tables_as_collect_results_writes_them) {
  const std::string csv =
      "Model,SeqLen (T),# GPUs,GPU,MFU,HFU,Model TFLOP,MicroBatchSize,GradAccum,GlobalBatchSize,Throughput (S/s),"
      "Throughput (T/s),Throughput (T/s/GPU),GlobalBatchSize (T),Precision,MP Mode,Sharding Strategy,"
      "Activation Checkpointing,Activation CPUOffload,NumParams,Extra\n"
      "1b,2048,8,a100_80gb,59.86,59.86, 1.867501E+14,14,4,448,80,164109,20513,917504,amp_bf16,DEFAULT,FULL_SHARD,"
      "False,False,1315950592,\"x, y\"\n";
  const MeasuredTable t = parse_measured_table(csv, "r.csv");
  BOOST_TEST_REQUIRE(t.rows.size() == 1u);
  BOOST_TEST(t.rows[0].tokens_per_s == 164109.0);
  BOOST_TEST(t.rows[0].model_tflop == 1.867501e14);
  BOOST_TEST(t.rows[0].cells.back().second == "x, y");
}

BOOST_AUTO_TEST_CASE(malformed_tables_are_errors_naming_the_line) {
  BOOST_TEST(contains(error_of([] { parse_measured_table(kHeader + kRow, "t.md"); }), ""));
  // Missing required column.
  std::string no_tput = kHeader;
  no_tput.replace(no_tput.find("Throughput (T/s)"), 16, "Throughput (X/s)");
  BOOST_TEST(contains(error_of([&] { parse_measured_table(no_tput + kRow, "t.md"); }),
                      "t.md:1: required column 'Throughput (T/s)'"));
  // Duplicated column.
  std::string dup = kHeader;
  dup.replace(dup.find("| NumParams |"), 13, "| Model |");
  BOOST_TEST(contains(error_of([&] { parse_measured_table(dup + kRow, "t.md"); }), "appears twice"));
  // Bad cells, on line 3.
  for (const auto& [from, to, why] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"164109", "nan", "must be finite"},
           {"164109", "inf", "must be finite"},
           {"164109", "-5", "must not be negative"},
           {"164109", "fast", "must be a number"},
           {"| 448 |", "| 44.8 |", "must be a whole number"},
           {"amp_bf16", "amp_bf17", "unknown Precision"},
           {"FULL_SHARD", "HALF_SHARD", "unknown Sharding Strategy"},
           {"| False |", "| Maybe |", "must be True or False"}}) {
    std::string row = kRow;
    row.replace(row.find(from), from.size(), to);
    const std::string e = error_of([&] { parse_measured_table(kHeader + row, "t.md"); });
    BOOST_TEST_CONTEXT(to) {
      BOOST_TEST(contains(e, "t.md:3:"));
      BOOST_TEST(contains(e, why));
    }
  }
  // A row two cells short is not repairable.
  std::string short_row = kRow;
  short_row.replace(short_row.find("| 59.86 | 59.86 |"), 17, "|");
  BOOST_TEST(
      contains(error_of([&] { parse_measured_table(kHeader + short_row, "t.md"); }), "t.md:3: row has 14 cells"));
  BOOST_TEST(
      contains(error_of([&] { parse_measured_table("no table here\n", "t.md"); }), "t.md:1: required column 'Model'"));
  BOOST_TEST(contains(error_of([&] { parse_measured_table("\n\n", "t.md"); }), "no table found"));
  BOOST_TEST(contains(error_of([&] { parse_measured_table(kHeader, "t.md"); }), "no rows"));
}

BOOST_AUTO_TEST_CASE(models_files_report_unknown_keys_and_refuse_missing_ones) {
  ModelCatalog c = ModelCatalog::load_default();
  BOOST_TEST(c.models().size() >= 9u);
  std::vector<std::string> warnings;
  c.add_yaml("mine:\n  d_model: 512\n  n_heads: 8\n  n_layers: 4\n  rope: true\n", "m.yaml", warnings);
  BOOST_TEST(c.get("mine").vocab_size == 50368);
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(contains(warnings[0], "m.yaml:5"));
  BOOST_TEST(contains(warnings[0], "'rope'"));
  BOOST_TEST(contains(error_of([&] { c.add_yaml("bad:\n  d_model: 512\n  n_layers: 4\n", "m.yaml", warnings); }),
                      "missing the required key n_heads"));
  BOOST_TEST(
      contains(error_of([&] { c.add_yaml("bad:\n  d_model: 5x\n  n_heads: 8\n  n_layers: 4\n", "m.yaml", warnings); }),
               "m.yaml:2"));
  BOOST_TEST(
      contains(error_of([&] { c.add_yaml("bad:\n  d_model: 500\n  n_heads: 8\n  n_layers: 4\n", "m.yaml", warnings); }),
               "does not divide"));
  BOOST_TEST(contains(error_of([&] { c.add_yaml("a: [1, 2\n", "m.yaml", warnings); }), "not valid YAML"));
  BOOST_TEST(contains(error_of([&] { c.get("nope"); }), "unknown model 'nope'"));
  BOOST_TEST(c.expand("125m..1b", "--models").size() == 4u);
  BOOST_TEST(contains(error_of([&] { c.expand("1b..125m", "--models"); }), "reversed range"));
}

namespace {
// A --models file of one model m1 whose block is a 1024-wide, 8-head, 4-layer MPT plus `extra`
// lines (each indented two spaces), read into a fresh catalogue; the first extra line is line 5.
std::string add_m1(const std::string& extra, std::vector<std::string>& warnings) {
  ModelCatalog c;
  return error_of(
      [&] { c.add_yaml("m1:\n  d_model: 1024\n  n_heads: 8\n  n_layers: 4\n" + extra, "m.yaml", warnings); });
}
}  // namespace

BOOST_AUTO_TEST_CASE(models_files_accept_keys_at_their_modelled_defaults_and_irrelevant_ones) {
  std::vector<std::string> warnings;
  ModelCatalog c;
  const std::string yaml =
      "m1:\n  name: mpt_causal_lm\n  d_model: 1024\n  n_heads: 8\n  n_layers: 4\n  init_device: meta\n"
      "  max_seq_len: 2048\n  emb_pdrop: 0.1\n  resid_pdrop: 0\n  norm_type: low_precision_layernorm\n"
      "  tie_word_embeddings: true\n  head_dim: 128\n  attention_bias: true\n  fc_type: {name: torch}\n"
      "  logit_scale: null\n  loss_fn: fused_crossentropy\n  block_overrides: null\n"
      "  attn_config: {attn_type: multihead_attention, kv_n_heads: 8, attn_impl: flash, attn_pdrop: 0,\n"
      "                qk_ln: false, clip_qkv: null, softmax_scale: null, sliding_window_size: -1, prefix_lm: false,\n"
      "                alibi: false, rope: false, rope_theta: 10000, fused_qkv: true}\n"
      "  ffn_config: {ffn_type: mptmlp, expansion_ratio: 4, ffn_hidden_size: 4096, ffn_act_fn: {name: gelu}}\n"
      "  init_config: {name: kaiming_normal_, init_div_is_residual: true, emb_init_std: null}\n";
  BOOST_TEST(add_models(c, yaml).empty());
  const ModelConfig& m = c.get("m1");
  BOOST_TEST(m.learned_positions());
  BOOST_TEST(m.d_ffn() == 4096);
  // ALiBi or RoPE turns learned positions off, as MPTConfig does, whatever learned_pos_emb says.
  for (const char* position : {"alibi", "rope"}) {
    c.add_yaml(std::string("m2: {d_model: 1024, n_heads: 8, n_layers: 4, learned_pos_emb: true, attn_config: {") +
                   position + ": true}}\n",
               "m.yaml", warnings);
    BOOST_TEST(!c.get("m2").learned_positions(), position);
  }
  BOOST_TEST(warnings.empty());
  // The shipped catalogue reads without a warning.
  std::vector<std::string> shipped;
  ModelCatalog::load_default().add_file(std::string(TPSIM_DATA) + "/models/mpt.yaml", shipped);
  BOOST_TEST(shipped.empty());
}

// The shipped Hugging Face configs are read when their model is first asked for: in catalogue order
// after the MPT models, each the model that reading its file gives, names found ignoring case.
BOOST_AUTO_TEST_CASE(shipped_hugging_face_configs_are_read_on_first_use_as_their_files_read) {
  const ModelCatalog shipped = ModelCatalog::load_default();
  ModelCatalog direct;
  std::vector<std::string> warnings;
  direct.add_file(std::string(TPSIM_DATA) + "/models/hf/qwen3-30b-a3b.json", warnings);
  const ModelConfig& lazy = shipped.get("Qwen3-30B-A3B");
  const ModelConfig& read = direct.get("qwen3-30b-a3b");
  BOOST_TEST(lazy.name == "qwen3-30b-a3b");
  BOOST_TEST((lazy.d_model == read.d_model && lazy.n_layers == read.n_layers && lazy.moe.experts == read.moe.experts));
  BOOST_TEST(parameter_count(lazy, 4096) == parameter_count(read, 4096));
  // A range reaches across them by name, and every model of the catalogue reads.
  const std::vector<std::string> range = {"70b",         "dbrx",        "deepseek-v3",  "gemma-3-12b",  "gemma-3-1b",
                                          "gemma-3-27b", "gemma-3-4b",  "gpt-neo-125m", "gpt-oss-120b", "gpt-oss-20b",
                                          "gpt2-large",  "gpt2-medium", "gpt2-xl",      "gpt2"};
  BOOST_TEST(shipped.expand("70b..gpt2", "--models") == range, boost::test_tools::per_element());
  for (const ModelConfig& m : shipped.models()) BOOST_TEST(m.d_model > 0, m.name);
}

BOOST_AUTO_TEST_CASE(models_files_refuse_what_tpsim_cannot_model_yet_naming_key_and_value) {
  std::vector<std::string> warnings;
  // Issue 14 models grouped-query and multi-query attention, sliding windows, GLU feed-forwards and
  // their activations and widths, mixtures of experts, untied embeddings, RMSNorm, head_dim and
  // attention_bias (models_files_model_llama_mistral_qwen_and_mixtral_exactly); what remains:
  for (const auto& [extra, named] : std::vector<std::pair<std::string, std::string>>{
           {"  attn_config: {prefix_lm: true}\n", "attn_config.prefix_lm: true"},
           {"  attn_config: {qk_ln: true}\n", "attn_config.qk_ln: true"},
           {"  attn_config: {attn_uses_sequence_id: true}\n", "attn_config.attn_uses_sequence_id: true"},
           {"  attn_config: {seq_parallel_world_size: 2}\n", "attn_config.seq_parallel_world_size: 2"},
           {"  attn_config: {attn_type: flex_attention}\n",
            "attn_config.attn_type: flex_attention -- an attention llm-foundry does not register"},
           {"  ffn_config: {ffn_type: moe_mlp}\n",
            "ffn_config.ffn_type: moe_mlp -- a feed-forward llm-foundry does not register"},
           {"  ffn_config: {ffn_act_fn: {name: mish}}\n",
            "m.yaml:5: model 'm1' ffn_config.ffn_act_fn.name: mish -- an activation other than GELU, SiLU and ReLU"},
           {"  ffn_config: {ffn_type: mb_moe, shared_expert: true}\n",
            "ffn_config.shared_expert: true -- MegaBlocks' shared expert"},
           {"  ffn_config: {ffn_type: mb_moe, moe_weight_parallelism: true}\n",
            "ffn_config.moe_weight_parallelism: true"},
           {"  ffn_config: {ffn_type: te_ln_mlp}\n  no_bias: true\n",
            "ffn_config.ffn_type: te_ln_mlp -- TransformerEngine's LayerNormMLP"},
           {"  ffn_config: {bias: false}\n", "ffn_config.bias: false -- a feed-forward without biases"},
           {"  norm_type: low_precision_groupnorm\n",
            "norm_type: low_precision_groupnorm -- a norm llm-foundry does not register"},
           {"  name: hf_causal_lm\n", "name: hf_causal_lm"},
           {"  block_overrides: {order: []}\n", "block_overrides: a map"}}) {
    const std::string e = add_m1(extra, warnings);
    BOOST_TEST_CONTEXT(extra) {
      BOOST_TEST(contains(e, "m.yaml:"));
      BOOST_TEST(contains(e, named));
      BOOST_TEST(contains(e, "tpsim cannot model it yet"));
    }
  }
  BOOST_TEST(warnings.empty());
}

// What llm-foundry itself refuses (MPTConfig, its attention classes and FFN builders), or tpsim
// refuses in words of its own (expert parallelism): one line naming the key and value.
BOOST_AUTO_TEST_CASE(models_files_refuse_what_llm_foundry_refuses) {
  std::vector<std::string> warnings;
  for (const auto& [extra, named] : std::vector<std::pair<std::string, std::string>>{
           {"  attn_config:\n    kv_n_heads: 2\n",
            "m.yaml:6: model 'm1' attn_config.kv_n_heads: 2 -- multihead_attention has as many K and V heads"},
           {"  attn_config: {attn_type: grouped_query_attention}\n", "grouped_query_attention needs kv_n_heads"},
           {"  attn_config: {attn_type: multiquery_attention, kv_n_heads: 2}\n",
            "multiquery_attention has one K and V head"},
           {"  attn_config: {alibi: true, rope: true}\n", "attn_config.rope: true -- ALiBi and RoPE together"},
           {"  attn_config: {nope: true}\n",
            "attn_config.nope: true -- llm-foundry refuses nope as the default position encoding"},
           {"  attn_config: {sliding_window_size: 0}\n",
            "attn_config.sliding_window_size must be -1 (no window) or positive"},
           {"  ffn_config: {ffn_type: mptgeglu}\n", "ffn_config.ffn_type: mptgeglu -- llm-foundry renamed it mptglu"},
           {"  ffn_config: {ffn_type: te_ln_mlp, ffn_act_fn: {name: gelu}}\n",
            "llm-foundry refuses custom activations for te_ln_mlp"},
           {"  ffn_config: {moe_num_experts: 8}\n",
            "ffn_config.moe_num_experts: 8 -- a mixture-of-experts setting beside ffn_type mptmlp"},
           {"  ffn_config: {ffn_type: mb_dmoe, moe_world_size: 8}\n",
            "ffn_config.moe_world_size: 8 -- tpsim cannot model expert parallelism yet"},
           {"  ffn_config: {ffn_type: torch_dmoe, moe_num_experts: 8, moe_top_k: 2}\n", "torch_dmoe needs mlp_type"},
           {"  ffn_config: {ffn_type: mb_moe, moe_num_experts: 4, moe_top_k: 8}\n",
            "top_k (8) must be between 1 and the number of experts (4)"},
           {"  ffn_config: {ffn_act_fn: {name: relu, approximate: tanh}}\n",
            "an argument torch.nn.functional.relu does not take"}}) {
    const std::string e = add_m1(extra, warnings);
    BOOST_TEST_CONTEXT(extra) {
      BOOST_TEST(contains(e, "m.yaml:"));
      BOOST_TEST(contains(e, named), e);
    }
  }
  ModelCatalog c;
  BOOST_TEST(contains(
      error_of([&] { c.add_yaml("m: {d_model: 1024, n_heads: 7, n_layers: 2, head_dim: 96}\n", "m.yaml", warnings); }),
      "n_heads (7) does not divide d_model (1024), which llm-foundry requires also with head_dim"));
}

// Issue 14: published models written as llm-foundry MPT blocks count exactly as llm-foundry's
// mpt_get_total_params (RMSNorm: a weight; no_bias: no bias anywhere, the LayerNorms' included).
BOOST_AUTO_TEST_CASE(models_files_model_llama_mistral_qwen_and_mixtral_exactly) {
  ModelCatalog c;
  const std::string yaml =
      "llama3:\n  d_model: 4096\n  n_heads: 32\n  n_layers: 32\n  vocab_size: 128256\n  norm_type: rmsnorm\n"
      "  no_bias: true\n  tie_word_embeddings: false\n"
      "  attn_config: {attn_type: grouped_query_attention, kv_n_heads: 8, rope: true, rope_theta: 500000}\n"
      "  ffn_config: {ffn_type: mptglu, ffn_act_fn: {name: silu}, ffn_hidden_size: 14336}\n"
      "mistral:\n  d_model: 4096\n  n_heads: 32\n  n_layers: 32\n  vocab_size: 32000\n  norm_type: low_precision_rmsnorm\n"
      "  no_bias: true\n  tie_word_embeddings: false\n"
      "  attn_config: {attn_type: grouped_query_attention, kv_n_heads: 8, rope: true, sliding_window_size: 4096}\n"
      "  ffn_config: {ffn_type: mptglu, ffn_act_fn: {name: silu}, ffn_hidden_size: 14336}\n"
      "qwen25:\n  d_model: 3584\n  n_heads: 28\n  n_layers: 28\n  vocab_size: 152064\n  norm_type: rmsnorm\n"
      "  no_bias: true\n  attention_bias: true\n  tie_word_embeddings: false\n"
      "  attn_config: {attn_type: grouped_query_attention, kv_n_heads: 4, rope: true}\n"
      "  ffn_config: {ffn_type: mptglu, ffn_act_fn: {name: silu}, ffn_hidden_size: 18944}\n"
      "mixtral:\n  d_model: 4096\n  n_heads: 32\n  n_layers: 32\n  vocab_size: 32000\n  norm_type: rmsnorm\n"
      "  no_bias: true\n  tie_word_embeddings: false\n"
      "  attn_config: {attn_type: grouped_query_attention, kv_n_heads: 8, rope: true}\n"
      "  ffn_config: {ffn_type: mb_dmoe, mlp_type: glu, ffn_act_fn: {name: silu}, ffn_hidden_size: 14336,\n"
      "               moe_num_experts: 8, moe_top_k: 2, moe_world_size: 1, moe_loss_weight: 0.02}\n"
      "mpt7b:\n  d_model: 4096\n  n_heads: 32\n  n_layers: 32\n  vocab_size: 50432\n  no_bias: true\n"
      "  attn_config: {alibi: true}\n"
      "mqa:\n  d_model: 1024\n  n_heads: 8\n  n_layers: 4\n  head_dim: 64\n  attn_config: {attn_type: multiquery_attention}\n";
  BOOST_TEST(add_models(c, yaml).empty());
  // Llama-3-8B: per block Q and out 2 * 4096^2, K and V 2 * 4096 * 1024 (8 heads of 128): 41,943,040;
  // SwiGLU 3 * 4096 * 14336 = 176,160,768; two RMSNorms 8,192: 218,112,000. 32 blocks 6,979,584,000;
  // untied wte and lm_head 2 * 128256 * 4096 = 1,050,673,152; norm_f 4,096. Published: 8,030,261,248.
  const ModelConfig& llama = c.get("llama3");
  BOOST_TEST((llama.positions == PositionKind::kRope));
  BOOST_TEST((llama.norm == NormKind::kRmsNorm && llama.ffn == FfnKind::kGlu && llama.activation == Activation::kSilu));
  BOOST_TEST(parameter_count(llama, 8192) == 8030261248);
  // Mistral-7B-v0.1: Llama-3-8B's blocks, vocabulary 32000: 6,979,584,000 + 2 * 32000 * 4096 + 4096.
  BOOST_TEST(c.get("mistral").sliding_window == 4096);
  BOOST_TEST(parameter_count(c.get("mistral"), 4096) == 7241732096);
  // Qwen2.5-7B: per block Q and out 2 * 3584^2 = 25,690,112, K and V 2 * 3584 * 512 = 3,670,016, QKV
  // biases (attention_bias over no_bias) 3584 + 2 * 512 = 4,608, SwiGLU 3 * 3584 * 18944 = 203,685,888,
  // norms 7,168: 233,057,792; 28 blocks 6,525,618,176; 2 * 152064 * 3584 = 1,089,994,752; 3,584.
  const ModelConfig& qwen = c.get("qwen25");
  BOOST_TEST((qwen.qkv_bias && !qwen.linear_bias && !qwen.norm_bias));
  BOOST_TEST(parameter_count(qwen, 4096) == 7615616512);
  // Mixtral-8x7B: attention 41,943,040, norms 8,192, router 4096 * 8 = 32,768, experts
  // 8 * 3 * 4096 * 14336 = 1,409,286,144 (no output bias under no_bias): 1,451,270,144 per block;
  // 32 blocks 46,440,644,608; 2 * 32000 * 4096 = 262,144,000; 4,096. Published: 46,702,792,704.
  const ModelConfig& mixtral = c.get("mixtral");
  BOOST_TEST((mixtral.moe.experts == 8 && mixtral.moe.top_k == 2 && mixtral.moe.d_expert == 14336));
  BOOST_TEST((mixtral.moe.capacity_factor == 0.0 && !mixtral.moe.output_bias && mixtral.ffn == FfnKind::kGlu));
  BOOST_TEST(parameter_count(mixtral, 4096) == 46702792704);
  // mosaicml/mpt-7b: ALiBi, no_bias (LayerNorms without bias), vocabulary 50432:
  // 32 * (12 * 4096^2 + 2 * 4096) + 50432 * 4096 + 4096 = 6,649,286,656.
  const ModelConfig& mpt = c.get("mpt7b");
  BOOST_TEST((mpt.positions == PositionKind::kAlibi));
  BOOST_TEST(parameter_count(mpt, 2048) == 6649286656);
  // Multi-query attention with head_dim 64 of 8 heads: Q and out 1024 x 512, K and V 1024 x 64 each.
  const ModelConfig& mqa = c.get("mqa");
  BOOST_TEST((mqa.kv_heads() == 1 && mqa.q_dim() == 512 && mqa.kv_dim() == 64));
}

BOOST_AUTO_TEST_CASE(models_files_refuse_unknown_keys_naming_the_nearest_known_one) {
  std::vector<std::string> warnings;
  BOOST_TEST(add_m1("  expansion_ration: 4\n", warnings) ==
             "m.yaml:5: model 'm1': unknown key 'expansion_ration' (did you mean expansion_ratio?)");
  BOOST_TEST(contains(add_m1("  attn_config:\n    atn_impl: flash\n", warnings),
                      "m.yaml:6: model 'm1': unknown key 'attn_config.atn_impl' (did you mean attn_impl?)"));
  BOOST_TEST(contains(add_m1("  ffn_config: {ffn_typ: mptmlp}\n", warnings), "(did you mean ffn_type?)"));
  BOOST_TEST(contains(add_m1("  init_config: {init_stdd: 0.02}\n", warnings), "(did you mean init_std?)"));
  BOOST_TEST(contains(add_m1("  attn_config: [flash]\n", warnings), "m.yaml:5: model 'm1' attn_config must be a map"));
  BOOST_TEST(
      contains(add_m1("  attn_config: {alibi: true, alibi: false}\n", warnings), "duplicate key attn_config.alibi"));
  // A key of attn_config written at the top of the block is kept unread by llm-foundry too: a warning.
  BOOST_TEST(add_m1("  kv_n_heads: 2\n", warnings).empty());
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(contains(warnings[0], "m.yaml:5: model 'm1': 'kv_n_heads' belongs in attn_config"));
}

BOOST_AUTO_TEST_CASE(device_datasheets_carry_sources) {
  for (const auto& id : known_devices()) {
    const DeviceSpec d = load_device(id);
    BOOST_TEST_CONTEXT(id) {
      BOOST_TEST(d.memory_bytes > 0);
      BOOST_TEST(d.gpus_per_node > 0);
      BOOST_TEST(d.sources.count("memory_gib") == 1u);
      BOOST_TEST(d.sources.count("inter_node_gbps_per_node") == 1u);
    }
  }
  BOOST_TEST(known_devices().size() == 13u);  // seven measured or transferred before issue 16, and its six 2026 devices
  BOOST_TEST(load_device("a100_40gb").inter_node_bytes_per_s == 1600e9 / 8);
  BOOST_TEST(contains(error_of([] { load_device("a100_41gb"); }), "unknown device 'a100_41gb'"));
  BOOST_TEST(contains(error_of([] { parse_device_yaml("device: x\nname: y\n", "d.yaml"); }), "missing required key"));
  // Counts are whole numbers in range, refused before they become ints (1e66 once reached the
  // conversion: undefined behaviour the fuzzer found).
  const std::string a100 = read_text_file(std::string(TPSIM_DATA) + "/devices/a100_40gb.yaml", "device file");
  const auto with_units = [&](const std::string& v) {
    std::string t = a100;
    const size_t at = t.find("{value: 108,");
    t.replace(at, std::string("{value: 108,").size(), "{value: " + v + ",");
    return t;
  };
  BOOST_TEST(parse_device_yaml(with_units("108"), "d.yaml").compute_units == 108);
  for (const char* bad : {"1e66", "2.5", "1e7", "0.5"}) BOOST_TEST_CONTEXT(bad) {
      BOOST_TEST(contains(error_of([&] { parse_device_yaml(with_units(bad), "d.yaml"); }),
                          "compute_units must be a whole number from 1 to 1000000"));
    }
}

BOOST_AUTO_TEST_CASE(profiles_name_every_parameter_and_refuse_gaps) {
  const DeviceProfile p = load_shipped_profile("h100_80gb");
  BOOST_TEST(p.sources.size() == cost_param_registry().size());
  for (const auto& [name, src] : p.sources) BOOST_TEST(!to_string(src.kind).empty());
  const std::string good = profile_to_json(p);
  BOOST_TEST(parse_profile_json(good, "p.json").params.gemm_flops_per_s(DType::kBf16) ==
             p.params.gemm_flops_per_s(DType::kBf16));
  std::string missing = good;
  const size_t at = missing.find("\"step_overhead_s\": {");
  BOOST_TEST_REQUIRE(at != std::string::npos);
  missing.replace(at, std::string("\"step_overhead_s\"").size(), "\"step_overhead_x\"");
  BOOST_TEST(contains(error_of([&] { parse_profile_json(missing, "p.json"); }), "unknown parameter"));
  std::string version = good;
  version.replace(version.find("\"version\": 1"), 12, "\"version\": 9");
  BOOST_TEST(contains(error_of([&] { parse_profile_json(version, "p.json"); }), "version 9 is not supported"));
  BOOST_TEST(contains(error_of([&] { parse_profile_json("{\"format\": ", "p.json"); }), "not valid JSON"));
  // A profile written before the native attention kernels existed knows none: 0, and says so.
  std::string before = good;
  for (const char* name : {"\"attn_native_fwd_efficiency\": {", "\"attn_native_bwd_efficiency\": {"}) {
    const size_t from = before.find(name);
    BOOST_TEST_REQUIRE(from != std::string::npos);
    before.erase(from, before.find("},", from) + 2 - from);
  }
  const DeviceProfile old = parse_profile_json(before, "p.json");
  BOOST_TEST(p.params.attn_native_fwd_efficiency > 0);
  BOOST_TEST(old.params.attn_native_fwd_efficiency == 0.0);
  BOOST_TEST(old.params.attn_native_bwd_efficiency == 0.0);
  BOOST_TEST(contains(old.sources.at("attn_native_fwd_efficiency").detail, "written before the parameter existed"));
  // Nor the allocator's retries near full memory: the seed tables' values, and says so.
  std::string no_allocator = good;
  for (const char* name : {"\"allocator_headroom_bytes\": {", "\"allocator_retry_slowdown\": {"}) {
    const size_t from = no_allocator.find(name);
    BOOST_TEST_REQUIRE(from != std::string::npos);
    const size_t to = no_allocator.find('}', from) + 1;
    const size_t comma = no_allocator.find_first_not_of(" \n", to);
    if (no_allocator[comma] == ',') no_allocator.erase(from, comma + 1 - from);  // then the next entry's indent stays
    else no_allocator.erase(no_allocator.rfind(',', from), to - no_allocator.rfind(',', from));  // the last entry
  }
  const DeviceProfile no_term = parse_profile_json(no_allocator, "p.json");
  BOOST_TEST(no_term.params.allocator_headroom_bytes == 4.0 * kGiB);
  BOOST_TEST(no_term.params.allocator_retry_slowdown == 0.19);
  BOOST_TEST(contains(no_term.sources.at("allocator_retry_slowdown").detail, "written before the parameter existed"));
  std::string other = before;  // any other parameter missing is still an error
  const size_t at2 = other.find("\"xent_efficiency\": {");
  other.erase(at2, other.find("},", at2) + 2 - at2);
  BOOST_TEST(contains(error_of([&] { parse_profile_json(other, "p.json"); }), "missing parameter \"xent_efficiency\""));
}

BOOST_AUTO_TEST_CASE(registry_ids_reach_distinct_values_and_keep_the_file_spelling) {
  // Each registry entry reaches its own CostParams value: set them all to their index and read back.
  CostParams p;
  const auto registry = cost_param_registry();
  for (size_t i = 0; i < registry.size(); ++i) registry[i].value(p) = static_cast<double>(i);
  for (size_t i = 0; i < registry.size(); ++i) BOOST_TEST_CONTEXT(registry[i].name) {
      BOOST_TEST(registry[i].value(p) == static_cast<double>(i));
      BOOST_TEST(find_param(registry[i].name) == &registry[i]);
    }
  // GEMM rates by format, named as profiles spell them; scalars by member.
  for (int t = 0; t < kNumDTypes; ++t) {
    const ParamInfo& rate = gemm_rate_param(DType(t));
    BOOST_TEST(rate.name == "gemm_" + std::string(kDTypeNames[t]) + "_flops_per_s");
    BOOST_TEST(to_string(rate.unit) == "FLOP/s");
    BOOST_TEST(&rate.value(p) == &p.gemm_flops_per_s_by_dtype[t]);
  }
  BOOST_TEST(&param_of(&CostParams::step_overhead_s) == find_param("step_overhead_s"));
  BOOST_TEST(to_string(param_of(&CostParams::step_overhead_s).unit) == "s");
  // Source kinds round-trip through their file spelling; other text is refused.
  for (const char* kind : {"datasheet", "kernel", "table-fit", "comm", "assumed", "derived"})
    BOOST_TEST(to_string(*parse_source_kind(kind)) == kind);
  BOOST_TEST(!parse_source_kind("measured").has_value());
}

BOOST_AUTO_TEST_CASE(profiles_can_carry_the_spec_of_a_device_without_a_datasheet_file) {
  DeviceProfile p = load_shipped_profile("a100_80gb");
  DeviceSpec cpu = load_device("a100_80gb");
  cpu.id = "cpu_test";
  cpu.name = "a test CPU";
  p.device = "cpu_test";
  p.device_spec = cpu;
  const DeviceProfile back = parse_profile_json(profile_to_json(p), "p.json");
  BOOST_TEST_REQUIRE(back.device_spec.has_value());
  BOOST_TEST(back.device_spec->compute_units == 108);
  BOOST_TEST(back.device_spec->memory_bytes == cpu.memory_bytes);
  BOOST_TEST(back.device_spec->sources.at("memory_gib") == cpu.sources.at("memory_gib"));
  p.device = "other";
  BOOST_TEST(contains(error_of([&] { parse_profile_json(profile_to_json(p), "p.json"); }),
                      "device_spec describes 'cpu_test'"));
}

BOOST_AUTO_TEST_CASE(files_are_written_whole_or_not_at_all) {
  const fs::path dir = fs::temp_directory_path() / "tpsim_test_io";
  fs::create_directories(dir);
  const fs::path f = dir / "out.csv";
  write_file_atomic(f, "a,b\n1,2\n");
  BOOST_TEST(read_text_file(f, "output") == "a,b\n1,2\n");
  BOOST_TEST(contains(error_of([&] { write_file_atomic(dir / "missing" / "x.csv", "x"); }), "does not exist"));
  BOOST_TEST(contains(error_of([&] { read_text_file(dir, "table"); }), "is a directory"));
  std::ofstream(dir / "empty.md").close();
  BOOST_TEST(contains(error_of([&] { read_text_file(dir / "empty.md", "table"); }), "file is empty"));
  // No temporary files are left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
  BOOST_TEST(files == 2);
  // A link is followed (the file it names is replaced, the link stays); a file that is not a regular
  // file (a pipe, /dev/null) is written through, never renamed over.
  fs::create_symlink(f, dir / "link.csv");
  write_file_atomic(dir / "link.csv", "c\n3\n");
  BOOST_TEST(fs::is_symlink(dir / "link.csv"));
  BOOST_TEST(read_text_file(f, "output") == "c\n3\n");
  write_file_atomic("/dev/null", "x\n");
  BOOST_TEST(fs::is_character_file("/dev/null"));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(tables_render_as_md_csv_and_json) {
  OutputTable t;
  t.title = "x";
  t.columns = {"Model", "MFU", "Activation Checkpointing"};
  t.add_row({Cell::str("7b"), Cell::num(46.444, 2), Cell::flag(true)});
  BOOST_TEST(render({t}, Format::kMarkdown) ==
             "| Model | MFU | Activation Checkpointing |\n| --- | --- | --- |\n| 7b | 46.44 | True |\n");
  BOOST_TEST(render({t}, Format::kCsv) == "Model,MFU,Activation Checkpointing\n7b,46.44,True\n");
  BOOST_TEST(contains(render({t}, Format::kJson), "\"MFU\": 46.44"));
  BOOST_TEST(contains(error_of([] { Cell::num(std::nan(""), 2); }), "non-finite"));
}

// Activation Checkpointing: llm-foundry's booleans as today, tpsim's three kinds, and what tpsim
// prints reads back as the kind it printed.
BOOST_AUTO_TEST_CASE(measured_tables_read_every_kind_of_checkpointing) {
  const auto kind_of = [](const std::string& cell) {
    std::string row = kRow;
    row.replace(row.find("| False |"), 9, "| " + cell + " |");
    return parse_measured_table(kHeader + row, "t.md").rows.at(0).layout.checkpointing;
  };
  for (const auto& [cell, kind] :
       std::vector<std::pair<std::string, Checkpointing>>{{"True", Checkpointing::kFull},
                                                          {"False", Checkpointing::kNone},
                                                          {"true", Checkpointing::kFull},
                                                          {"0", Checkpointing::kNone},
                                                          {"none", Checkpointing::kNone},
                                                          {"selective", Checkpointing::kSelective},
                                                          {"Selective", Checkpointing::kSelective},
                                                          {"full", Checkpointing::kFull}}) {
    BOOST_TEST_CONTEXT(cell) { BOOST_TEST((kind_of(cell) == kind)); }
  }
  for (Checkpointing c : kAllCheckpointings) {
    BOOST_TEST_CONTEXT(to_string(c)) { BOOST_TEST((kind_of(checkpointing_cell(c).plain()) == c)); }
  }
  BOOST_TEST(checkpointing_cell(Checkpointing::kFull).plain() == "True");
  BOOST_TEST(checkpointing_cell(Checkpointing::kNone).plain() == "False");
  BOOST_TEST(checkpointing_cell(Checkpointing::kSelective).plain() == "selective");
  std::string row = kRow;
  row.replace(row.find("| False |"), 9, "| partial |");
  const std::string e = error_of([&] { parse_measured_table(kHeader + row, "t.md"); });
  BOOST_TEST(contains(e, "t.md:3: column 'Activation Checkpointing'"), e);
  BOOST_TEST(contains(e, "none, selective or full), got 'partial'"), e);
  BOOST_TEST(e.find('\n') == std::string::npos);
}
