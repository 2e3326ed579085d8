// llm-foundry's own training YAMLs (tests/data/llm-foundry, copied unchanged from mosaicml/llm-foundry at
// 8c8dd48f, Apache 2.0): each one either reads as the model it describes, with the parameter count
// llm-foundry's mpt_get_total_params gives (derived by hand below from the file's keys, at the YAML's
// max_seq_len), or is an error naming what tpsim does not model or what llm-foundry itself refuses.
#define BOOST_TEST_MODULE foundry_yamls
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "common.hpp"
#include "io/error.hpp"
#include "io/train_yaml.hpp"
#include "model/architecture.hpp"
#include "model/ops.hpp"

using namespace tpsim;

namespace {
using namespace tpsim::test;

const std::filesystem::path kDir = std::filesystem::path(TPSIM_TEST_DATA) / "llm-foundry";

TrainYaml read(const std::string& file) { return read_train_yaml(kDir / file); }

// An MPT model at llm-foundry's defaults (MHA, LayerNorm and biases everywhere, GELU MLP of width
// 4d, learned positions for max_seq_len S, tied embeddings):
//   per block: attention 4d^2 + 4d (Wqkv 3d^2 + 3d, out_proj d^2 + d), two LayerNorms 4d,
//              MLP 8d^2 + 5d (up d x 4d + 4d, down 4d x d + d)          = 12d^2 + 13d
//   outside:   wte V*d, wpe S*d, norm_f 2d                             = d(V + S + 2)
int64_t mpt_default_count(int64_t d, int64_t layers, int64_t vocab, int64_t seq) {
  return layers * (12 * d * d + 13 * d) + d * (vocab + seq + 2);
}
}  // namespace

// The MPT pretraining YAMLs and the MPT fine-tuning YAML: V = 50368, S = 2048 (128 for the small
// testing ones), d and L as written.
BOOST_AUTO_TEST_CASE(mpt_yamls_read_with_their_exact_parameter_counts) {
  const std::map<std::string, int64_t> expected = {
      // L * (12 d^2 + 13 d) + d * (50368 + 2048 + 2), d * 52418 outside the blocks.
      {"pretrain/mpt-125m.yaml", 125311488},       // d 768,  L 12: 12 * 7087872 + 40257024
      {"pretrain/mpt-350m.yaml", 355985408},       // d 1024, L 24: 24 * 12596224 + 53676032
      {"pretrain/mpt-760m.yaml", 760470528},       // d 1536, L 24: 24 * 28331520 + 80514048
      {"pretrain/mpt-1b.yaml", 1315950592},        // d 2048, L 24: 24 * 50358272 + 107352064
      {"pretrain/mpt-3b.yaml", 2651837440},        // d 2560, L 32: 32 * 78676480 + 134190080
      {"pretrain/mpt-7b.yaml", 6658859008},        // d 4096, L 32: 32 * 201379840 + 214704128
      {"pretrain/mpt-13b.yaml", 12853954560},      // d 5120, L 40: 40 * 314639360 + 268380160
      {"pretrain/mpt-30b.yaml", 29975214080},      // d 7168, L 48: 48 * 616655872 + 375732224
      {"pretrain/mpt-70b.yaml", 64862437376},      // d 8192, L 80: 80 * 805412864 + 429408256
      {"finetune/7b_dolly_sft.yaml", 6658859008},  // mpt-7b's shape, attn_uses_sequence_id: false
      // d 128, L 2, S 128: 2 * (196608 + 1664) + 128 * (50368 + 128 + 2) = 396544 + 6463744
      {"pretrain/testing.yaml", 6860288},
      // d 16, h 4, L 4, expansion_ratio 5 (f = 80), S 128: per block 4d^2 + 4d = 1088, norms 4d = 64,
      // MLP 2 * 16 * 80 + 80 + 16 = 2656, so 3808; 4 * 3808 + 50368 * 16 + 128 * 16 + 32 = 823200
      {"pretrain/mpt-small-cpu.yaml", 823200},
  };
  for (const auto& [file, count] : expected) {
    BOOST_TEST_CONTEXT(file) {
      const TrainYaml t = read(file);
      BOOST_TEST_REQUIRE(t.seq_len.has_value());
      // attn_impl: torch (the two test YAMLs) materialises the scores: MPT's architecture, not the
      // flash-attention runs the seed tables measured.
      const bool torch = file == "pretrain/testing.yaml" || file == "pretrain/mpt-small-cpu.yaml";
      BOOST_TEST(t.model.torch_attention == torch);
      BOOST_TEST(t.model.is_mpt_default() == !torch);
      BOOST_TEST(parameter_count(t.model, *t.seq_len) == count);
      if (t.model.expansion_ratio == 4.0)
        BOOST_TEST(parameter_count(t.model, *t.seq_len) ==
                   mpt_default_count(t.model.d_model, t.model.n_layers, t.model.vocab_size, *t.seq_len));
    }
  }
}

// llm-foundry's attn_impl: torch (scaled_multihead_dot_product_attention): q.matmul(k) scaled, the
// causal masked_fill, softmax in fp32 under autocast, the cast back, .matmul(v); each a PyTorch
// kernel. testing.yaml (d 128, 2 heads, S 128) at micro-batch 2 in amp_bf16: 2 x 2 x 128 x 128 =
// 65,536 scores; per score the softmax's kernels read and write 3 x 2 + 2 x 4 = 14 bytes forward,
// read 3 x 2 + 3 x 4 = 18 and write 3 x 2 + 2 x 4 = 14 backward, and keep 4 + 2 = 6.
BOOST_AUTO_TEST_CASE(attn_impl_torch_materialises_the_scores_as_llm_foundry_runs_them) {
  const TrainYaml t = read("pretrain/testing.yaml");
  BOOST_TEST_REQUIRE(t.model.unfused_attention);
  const BlockShape s = block_shape(t.model, 2, 128, Precision::kAmpBf16);
  const double scores = 2.0 * 2 * 128 * 128;
  OpList fwd, bwd;
  block_forward_ops(s, fwd);
  block_backward_ops(s, bwd);
  const auto find = [](const OpList& ops, const std::string& name) -> const Op* {
    for (const Op& op : ops)
      if (name == op.name) return &op;
    return nullptr;
  };
  BOOST_TEST(find(fwd, "attn.flash.fwd") == nullptr);
  const Op* scores_gemm = find(fwd, "attn.scores.fwd");
  const Op* softmax = find(fwd, "attn.softmax.fwd");
  const Op* softmax_bwd = find(bwd, "attn.softmax.bwd");
  BOOST_TEST_REQUIRE((scores_gemm && softmax && softmax_bwd));
  BOOST_TEST(softmax->bytes_read == 14.0 * scores);
  BOOST_TEST(softmax->bytes_written == 14.0 * scores);
  BOOST_TEST(softmax->saved_bytes == 6.0 * scores);
  BOOST_TEST(softmax->kernels == 5);
  BOOST_TEST(softmax_bwd->bytes_read == 18.0 * scores);
  BOOST_TEST(softmax_bwd->bytes_written == 14.0 * scores);
  // The same model with flash attention keeps none of the scores.
  ModelConfig flash = t.model;
  flash.unfused_attention = flash.torch_attention = false;
  OpList flash_fwd;
  block_forward_ops(block_shape(flash, 2, 128, Precision::kAmpBf16), flash_fwd);
  BOOST_TEST(find(flash_fwd, "attn.flash.fwd") != nullptr);
  // flash and triton are flash attention; any other implementation is an error naming the three.
  const std::string yaml =
      "model:\n  name: mpt_causal_lm\n  d_model: 128\n  n_heads: 4\n  n_layers: 2\n"
      "  expansion_ratio: 4\n  max_seq_len: 128\n  vocab_size: 50368\n"
      "  attn_config: {attn_impl: IMPL}\n";
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tpsim_attn_impl_" + std::to_string(::getpid()) + ".yaml");
  const auto with = [&](const std::string& impl) {
    std::string text = yaml;
    text.replace(text.find("IMPL"), 4, impl);
    std::ofstream(path) << text;
    return read_train_yaml(path);
  };
  BOOST_TEST(!with("triton").model.unfused_attention);
  BOOST_TEST(with("torch").model.torch_attention);
  BOOST_TEST(contains(error_of([&] { with("sdpa"); }), "flash, triton and torch"));
  std::filesystem::remove(path);
}

// testing-moe.yaml: d 128, 2 heads, 2 layers, expansion_ratio 1, ffn_type mb_dmoe with 4 experts,
// top-2, moe_world_size 1, S 128, biases on (no_bias unset).
BOOST_AUTO_TEST_CASE(the_moe_testing_yaml_reads_as_a_dropless_mixture_of_experts) {
  const TrainYaml t = read("pretrain/testing-moe.yaml");
  const ModelConfig& m = t.model;
  BOOST_TEST(m.moe.experts == 4);
  BOOST_TEST(m.moe.top_k == 2);
  BOOST_TEST(m.moe.d_expert == 128);
  BOOST_TEST(m.moe.capacity_factor == 0.0);  // dMoE: dropless
  BOOST_TEST(m.moe.output_bias);             // MegaBlocks' bias after the experts (bias = not no_bias)
  BOOST_TEST((m.ffn == FfnKind::kMlp));      // mlp_type defaults to mlp
  BOOST_TEST(*t.seq_len == 128);
  // Per block: attention 4d^2 + 4d = 66048; two LayerNorms 4d = 512; router d x 4 = 512; experts
  // 4 * (d x 128 + 128 x d) = 131072; the output bias d = 128: 198272 (as the dense block: the router
  // and bias, 5d, stand where the dense MLP's biases were).
  // Outside: wte 50368 * 128 = 6447104, wpe 128 * 128 = 16384, norm_f 256.
  BOOST_TEST(layer_parameter_count(m) == 198272);
  BOOST_TEST(parameter_count(m, 128) == 2 * 198272 + 6447104 + 16384 + 256);  // 6,860,288
  // Active (mpt_get_active_params): the experts' 131072 counted top_k / experts = 1/2.
  BOOST_TEST(active_parameter_count(m, 128) == 2 * (198272 - 65536) + 6447104 + 16384 + 256);
  // Its MegaBlocks kernel settings and load-balancing loss are listed as ignored.
  for (const char* key :
       {"model.ffn_config.memory_optimized_mlp", "model.ffn_config.mlp_impl", "model.ffn_config.moe_lbl_in_fp32",
        "model.ffn_config.moe_loss_weight", "model.ffn_config.uniform_expert_assignment"})
    BOOST_TEST((std::find(t.ignored.begin(), t.ignored.end(), key) != t.ignored.end()), key);
}

// What llm-foundry's own train.py refuses, or tpsim cannot model: an error naming it.
BOOST_AUTO_TEST_CASE(the_others_are_errors_naming_what_is_not_modelled) {
  // Top-level keys outside llm-foundry's TrainConfig: train.py raises "Unused parameter ... found in cfg".
  const std::string sft = error_of([] { read("finetune/1b_local_data_sft.yaml"); });
  BOOST_TEST(contains(sft, "1b_local_data_sft.yaml:39: unknown top-level key 'dataset'"));
  // T5 is an encoder-decoder.
  const std::string t5 = error_of([] { read("finetune/t5-small_dolly_sft.yaml"); });
  BOOST_TEST(contains(t5, "t5-small_dolly_sft.yaml:15: model.name: hf_t5 -- an encoder-decoder model (T5)"));
}

// The hf_causal_lm files: the model is pretrained_model_name_or_path's config.json (here the copies
// shipped in data/models/hf, since the test machine has no Hugging Face cache), with the YAML's
// config_overrides; its count is the sum of parameter sizes (data/models/hf/README.md), or the file
// is an error naming what is not modelled or what llm-foundry itself refuses.
BOOST_AUTO_TEST_CASE(hf_causal_lm_yamls_read_their_config_json_or_name_what_is_refused) {
  const std::map<std::string, int64_t> counts = {
      {"pretrain/hf-llama-3.1-8B.yaml", 8030261248},  // meta-llama/Meta-Llama-3.1-8B (exact, as Llama-3-8B)
      // openai-community/gpt2 is 124,439,808 with its 1024 learned positions; the YAML's
      // config_overrides set n_positions to 2048: 1024 more rows of 768.
      {"pretrain/gpt2-small.yaml", 124439808 + 1024 * 768},
      {"pretrain/opt-3b.yaml", 2651596800},                              // facebook/opt-2.7b
      {"finetune/dbrx-full-ft.yaml", 131596523520},                      // databricks/dbrx-instruct
      {"finetune/dbrx-lora-ft.yaml", 131596523520},                      // the same, fine-tuned with LoRA
      {"finetune/gpt2-arc-easy-cpu-streaming-dataset.yaml", 124439808},  // gpt2, no overrides
      {"finetune/mpt-7b_dolly_sft.yaml", 6649286656},                    // mosaicml/mpt-7b (exact)
      // EleutherAI/gpt-neo-125M (global and local attention layers alternate), its 2048 positions.
      {"pretrain/gpt-neo-125m.yaml", 125198592},
      {"pretrain/gpt-neo-125m_eval.yaml", 125198592},
  };
  for (const auto& [file, count] : counts) {
    BOOST_TEST_CONTEXT(file) {
      const TrainYaml t = read(file);
      BOOST_TEST_REQUIRE(t.seq_len.has_value());
      BOOST_TEST(parameter_count(t.model, *t.seq_len) == count);
    }
  }
  const std::map<std::string, std::string> refused = {
      // Its config_overrides name MPT keys LlamaConfig lacks; llm-foundry raises on them too.
      {"finetune/llama-3-8b_domain_adapt.yaml", "unknown key 'attn_config' for model_type llama"},
      // A top-level key outside llm-foundry's TrainConfig (its train.py uses icl_seq_len).
      {"finetune/mpt-30b-instruct.yaml", "mpt-30b-instruct.yaml:130: unknown top-level key 'icl_max_seq_len'"},
  };
  for (const auto& [file, what] : refused) {
    const std::string path = file;  // a lambda cannot capture a structured binding before C++20's P1091 (clang 14)
    BOOST_TEST(contains(error_of([&] { read(path); }), what), path);
  }
}

// Every file of the copy is one of the cases above: a new file must be given its expectation.
BOOST_AUTO_TEST_CASE(every_copied_yaml_has_an_expectation) {
  const std::set<std::string> covered = {"pretrain/mpt-125m.yaml",
                                         "pretrain/mpt-350m.yaml",
                                         "pretrain/mpt-760m.yaml",
                                         "pretrain/mpt-1b.yaml",
                                         "pretrain/mpt-3b.yaml",
                                         "pretrain/mpt-7b.yaml",
                                         "pretrain/mpt-13b.yaml",
                                         "pretrain/mpt-30b.yaml",
                                         "pretrain/mpt-70b.yaml",
                                         "pretrain/mpt-small-cpu.yaml",
                                         "pretrain/testing.yaml",
                                         "pretrain/testing-moe.yaml",
                                         "pretrain/gpt-neo-125m.yaml",
                                         "pretrain/gpt-neo-125m_eval.yaml",
                                         "pretrain/gpt2-small.yaml",
                                         "pretrain/hf-llama-3.1-8B.yaml",
                                         "pretrain/opt-3b.yaml",
                                         "finetune/7b_dolly_sft.yaml",
                                         "finetune/1b_local_data_sft.yaml",
                                         "finetune/dbrx-full-ft.yaml",
                                         "finetune/dbrx-lora-ft.yaml",
                                         "finetune/gpt2-arc-easy-cpu-streaming-dataset.yaml",
                                         "finetune/llama-3-8b_domain_adapt.yaml",
                                         "finetune/mpt-30b-instruct.yaml",
                                         "finetune/mpt-7b_dolly_sft.yaml",
                                         "finetune/t5-small_dolly_sft.yaml"};
  std::set<std::string> found;
  for (const char* sub : {"pretrain", "finetune"})
    for (const auto& e : std::filesystem::directory_iterator(kDir / sub))
      if (e.path().extension() == ".yaml") found.insert(std::string(sub) + "/" + e.path().filename().string());
  BOOST_TEST(found.size() == 26u);
  for (const auto& f : found) BOOST_TEST(covered.count(f) == 1u, f);
}
