// llm-foundry training YAMLs: the examples, ${...} references, and bad input.
#define BOOST_TEST_MODULE train_yaml
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>

#include "common.hpp"
#include "io/error.hpp"
#include "io/train_yaml.hpp"

using namespace tpsim;

namespace {
using namespace tpsim::test;
std::string example(const char* name) { return std::string(TPSIM_DATA) + "/examples/" + name; }
}  // namespace

BOOST_AUTO_TEST_CASE(the_shipped_examples_read) {
  const TrainYaml a = read_train_yaml(example("mpt-7b-pretrain.yaml"));
  BOOST_TEST(a.model.d_model == 4096);
  BOOST_TEST(*a.seq_len == 2048);
  BOOST_TEST(*a.global_batch == 1024);
  BOOST_TEST(a.micro_batch_auto);
  BOOST_TEST((*a.precision == Precision::kAmpBf16));
  BOOST_TEST((*a.checkpointing == Checkpointing::kFull));
  BOOST_TEST(contains(a.ignored.front(), "variables"));
  const TrainYaml b = read_train_yaml(example("mpt-1b-long-context.yaml"));
  BOOST_TEST(*b.seq_len == 8192);              // through ${variables.context}
  BOOST_TEST(b.model.expansion_ratio == 4.0);  // ffn_config.expansion_ratio
  BOOST_TEST(*b.micro_batch == 2);
  const TrainYaml c = read_train_yaml(example("mpt-30b-fp8.yaml"));
  BOOST_TEST((*c.precision == Precision::kAmpFp8));
  BOOST_TEST((*c.sharding == Sharding::kHybridShard));
}

BOOST_AUTO_TEST_CASE(references_resolve_with_their_types) {
  ::setenv("TPSIM_TEST_SEQ", "4096", 1);
  const TrainYaml t = parse_train_yaml(
      "variables: {a: {b: 1024}, seq: '${oc.env:TPSIM_TEST_SEQ}'}\n"  // issue 14: own values under variables
      "max_seq_len: ${variables.seq}\n"
      "run_name: run-${variables.a.b}-${variables.seq}\n"
      "model:\n  d_model: ${variables.a.b}\n  n_heads: 8\n  n_layers: 2\n  max_seq_len: ${max_seq_len}\n"
      "device_train_microbatch_size: ${oc.env:TPSIM_TEST_UNSET,3}\n",
      "t.yaml");
  BOOST_TEST(t.model.d_model == 1024);
  BOOST_TEST(*t.seq_len == 4096);
  BOOST_TEST(*t.micro_batch == 3);
}

BOOST_AUTO_TEST_CASE(bad_training_yamls_name_the_line) {
  BOOST_TEST(contains(
      error_of([] { parse_train_yaml("model:\n  d_model: ${nope}\n  n_heads: 8\n  n_layers: 2\n", "t.yaml"); }),
      "t.yaml:2: ${nope}: no key 'nope'"));
  BOOST_TEST(contains(
      error_of([] { parse_train_yaml("a: ${b}\nb: ${a}\nmodel: {d_model: 8, n_heads: 1, n_layers: 1}\n", "t.yaml"); }),
      "circular reference"));
  BOOST_TEST(contains(error_of([] { parse_train_yaml("max_seq_len: 2048\n", "t.yaml"); }), "missing the model: block"));
  BOOST_TEST(contains(error_of([] { parse_train_yaml("model: {d_model: 512, n_layers: 2}\n", "t.yaml"); }),
                      "missing the required key n_heads"));
  BOOST_TEST(contains(
      error_of([] { parse_train_yaml("model: {d_model: 512, n_heads: 8, n_layers: 2}\nprecision: fp4\n", "t.yaml"); }),
      "t.yaml:2: precision 'fp4'"));
  BOOST_TEST(contains(error_of([] {
                        parse_train_yaml(
                            "model: {d_model: 512, n_heads: 8, n_layers: 2}\nfsdp_config: {sharding_strategy: HALF}\n",
                            "t.yaml");
                      }),
                      "fsdp_config.sharding_strategy 'HALF'"));
  BOOST_TEST(contains(error_of([] { parse_train_yaml("model: [1, 2\n", "t.yaml"); }), "not valid YAML"));
  BOOST_TEST(contains(error_of([] {
                        parse_train_yaml(
                            "model: {d_model: 512, n_heads: 8, n_layers: 2}\ndevice_train_microbatch_size: lots\n",
                            "t.yaml");
                      }),
                      "must be an integer"));
}

namespace {
const std::string kModel = "model:\n  name: mpt_causal_lm\n  d_model: 512\n  n_heads: 8\n  n_layers: 2\n";
}  // namespace

BOOST_AUTO_TEST_CASE(model_blocks_read_strictly_as_models_files_do) {
  // Known and irrelevant: listed as ignored; ALiBi drops the learned positions.
  const TrainYaml t =
      parse_train_yaml(kModel +
                           "  loss_fn: torch_crossentropy\n  attn_config: {alibi: true, attn_pdrop: 0.1}\n"
                           "  init_config: {name: kaiming_normal_}\n",
                       "t.yaml");
  BOOST_TEST(!t.model.learned_positions());
  BOOST_TEST(t.ignored ==
             (std::vector<std::string>{"model.loss_fn", "model.attn_config.attn_pdrop", "model.init_config.name"}));
  // Grouped-query attention, mixtures of experts and untied embeddings are modelled (issue 14).
  const TrainYaml g = parse_train_yaml(
      kModel + "  attn_config:\n    attn_type: grouped_query_attention\n    kv_n_heads: 2\n", "t.yaml");
  BOOST_TEST(g.model.kv_heads() == 2);
  BOOST_TEST(parse_train_yaml(kModel + "  ffn_config: {ffn_type: mb_dmoe, moe_num_experts: 4}\n", "t.yaml")
                 .model.moe.experts == 4);
  BOOST_TEST(!parse_train_yaml(kModel + "  tie_word_embeddings: false\n", "t.yaml").model.tie_embeddings);
  // Known, matters, not modelled yet: an error naming file:line, key and value.
  BOOST_TEST(
      error_of([] { parse_train_yaml(kModel + "  attn_config:\n    prefix_lm: true\n", "t.yaml"); }) ==
      "t.yaml:7: model.attn_config.prefix_lm: true -- prefix-LM (partly bidirectional) attention: tpsim cannot model it yet");
  BOOST_TEST(contains(
      error_of([] { parse_train_yaml("model: {name: hf_causal_lm, pretrained_model_name_or_path: x}\n", "t.yaml"); }),
      "t.yaml:1: model.pretrained_model_name_or_path 'x': no config.json"));
  // Unknown: the nearest known key.
  BOOST_TEST(error_of([] { parse_train_yaml(kModel + "  n_layer: 2\n", "t.yaml"); }) ==
             "t.yaml:6: model: unknown key 'n_layer' (did you mean n_layers?)");
  // A key of attn_config at the top of the block: a note, as llm-foundry leaves it unread.
  const TrainYaml r = parse_train_yaml(kModel + "  rope: true\n", "t.yaml");
  BOOST_TEST(r.model.learned_positions());
  BOOST_TEST_REQUIRE(r.notes.size() == 2u);  // and device_train_microbatch_size's default, auto
  BOOST_TEST(contains(r.notes[0], "model: 'rope' belongs in attn_config"));
}

BOOST_AUTO_TEST_CASE(fsdp_config_keys_are_composers) {
  const TrainYaml t = parse_train_yaml(kModel +
                                           "fsdp_config:\n  activation_checkpointing: true\n  verbose: false\n"
                                           "  state_dict_type: sharded\n  data_parallel_shard_degree: -1\n",
                                       "t.yaml");
  BOOST_TEST((*t.checkpointing == Checkpointing::kFull));
  BOOST_TEST(t.ignored == (std::vector<std::string>{"fsdp_config.verbose", "fsdp_config.state_dict_type"}));
  // Issue 16 item 3: a misspelt key was accepted; Composer refuses it.
  BOOST_TEST(error_of([] { parse_train_yaml(kModel + "fsdp_config:\n  activation_checkpointng: true\n", "t.yaml"); }) ==
             "t.yaml:7: unknown key 'fsdp_config.activation_checkpointng' (did you mean activation_checkpointing?) "
             "(Composer's FSDPConfig)");
  BOOST_TEST(contains(error_of([] { parse_train_yaml(kModel + "fsdp_config: {cpu_offload: true}\n", "t.yaml"); }),
                      "t.yaml:6: fsdp_config.cpu_offload: true is not modelled"));
  // HSDP's mesh degrees are read (issue 15; they were refused before it): docs/model.md.
  BOOST_TEST(*parse_train_yaml(kModel + "fsdp_config: {data_parallel_shard_degree: 8}\n", "t.yaml").shard_degree == 8);
}

BOOST_AUTO_TEST_CASE(hsdp_degrees_are_read_and_bad_ones_refused) {
  const TrainYaml t =
      parse_train_yaml(kModel +
                           "fsdp_config:\n  sharding_strategy: HYBRID_SHARD\n  data_parallel_shard_degree: 16\n"
                           "  data_parallel_replicate_degree: -1\n",
                       "t.yaml");
  BOOST_TEST(*t.shard_degree == 16);
  BOOST_TEST(*t.replicate_degree == -1);
  BOOST_TEST(t.has_fsdp_config);
  // Composer's defaults (-1, None) and null leave the strategy's own groups: -1 is kept, null unset.
  const TrainYaml d = parse_train_yaml(
      kModel + "fsdp_config:\n  data_parallel_shard_degree: -1\n  data_parallel_replicate_degree: null\n", "t.yaml");
  BOOST_TEST(*d.shard_degree == -1);
  BOOST_TEST(!d.replicate_degree);
  for (const char* bad : {"0", "-2", "two", "2.5", "2000000"}) BOOST_TEST_CONTEXT(bad) {
      const std::string e = error_of(
          [&] { parse_train_yaml(kModel + "fsdp_config: {data_parallel_replicate_degree: " + bad + "}\n", "t.yaml"); });
      BOOST_TEST(contains(e, "t.yaml:6: fsdp_config.data_parallel_replicate_degree"), e);
      BOOST_TEST(e.find('\n') == std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(no_fsdp_config_is_plain_ddp) {
  // llm-foundry runs plain DDP without fsdp_config (issue 16 item 1): the run resolves it (cli/run_settings).
  BOOST_TEST(!parse_train_yaml(kModel, "t.yaml").has_fsdp_config);
  BOOST_TEST(!parse_train_yaml(kModel + "fsdp_config: null\n", "t.yaml").has_fsdp_config);
  BOOST_TEST(parse_train_yaml(kModel + "fsdp_config: {}\n", "t.yaml").has_fsdp_config);
  BOOST_TEST(parse_train_yaml(kModel + "fsdp_config: {verbose: true}\n", "t.yaml").has_fsdp_config);
  BOOST_TEST(to_string(Sharding::kDdp) == "DDP");
  BOOST_TEST(!parse_sharding("DDP"));  // not an FSDP sharding_strategy
}

BOOST_AUTO_TEST_CASE(llm_foundrys_own_mpt_yamls_read) {
  // llm-foundry's own YAMLs, copied with their licence (tests/data/llm-foundry).
  const std::filesystem::path dir = std::filesystem::path(TPSIM_TEST_DATA) / "llm-foundry" / "pretrain";
  BOOST_TEST_REQUIRE(std::filesystem::is_directory(dir));
  int read = 0;
  for (const char* name : {"mpt-125m", "mpt-350m", "mpt-760m", "mpt-1b", "mpt-3b", "mpt-7b", "mpt-13b", "mpt-30b",
                           "mpt-70b", "mpt-small-cpu", "testing"}) {
    BOOST_TEST_CONTEXT(name) {
      const TrainYaml t = read_train_yaml(dir / (std::string(name) + ".yaml"));
      BOOST_TEST(t.model.learned_positions());
      ++read;
    }
  }
  BOOST_TEST(read == 11);
  BOOST_TEST(read_train_yaml(dir / "testing-moe.yaml").model.moe.experts == 4);  // issue 14: modelled
  BOOST_TEST(read_train_yaml(dir / "hf-llama-3.1-8B.yaml").model.n_kv_heads ==
             8);  // hf_causal_lm: tests/test_hf_config.cpp
}

// Issue 14: llm-foundry's activation_checkpointing_target (act_ckpt.py) beside
// fsdp_config.activation_checkpointing. Whole blocks (null, [], MPTBlock) are full checkpointing;
// anything else is an error naming the value when the run checkpoints, and ignored when it does not.
BOOST_AUTO_TEST_CASE(checkpointing_targets_map_onto_full_or_are_errors) {
  const std::string ckpt = "fsdp_config: {activation_checkpointing: true}\n";
  for (const char* target : {"null", "MPTBlock", "mptblock", "[]", "[MPTBlock]"}) {
    const TrainYaml t =
        parse_train_yaml(kModel + "  activation_checkpointing_target: " + target + "\n" + ckpt, "t.yaml");
    BOOST_TEST((*t.checkpointing == Checkpointing::kFull), target);
  }
  BOOST_TEST(
      error_of([&] {
        parse_train_yaml(kModel + "  activation_checkpointing_target: grouped_query_attention\n" + ckpt, "t.yaml");
      }) ==
      "t.yaml:6: model.activation_checkpointing_target: grouped_query_attention -- tpsim models checkpointing of whole "
      "blocks (full) or of the attention core (selective); checkpointing grouped_query_attention is neither "
      "(grouped_query_attention checkpoints the whole attention module, its Q, K, V and out projections with the "
      "core; selective recomputes only the core)");
  for (
      const auto& [target, named] : std::vector<std::pair<std::string, std::string>>{
          {"mptmlp", "checkpointing mptmlp is neither (mptmlp checkpoints the feed-forward alone)"},
          {"norm_attn_norm", "checkpointing norm_attn_norm is neither"},
          {"[MPTBlock, mptglu]",
           "checkpointing [MPTBlock, mptglu] is neither (mptglu checkpoints the feed-forward alone)"},
          {"{MPTBlock: first-4}",
           "checkpointing {MPTBlock: first-4} is neither (llm-foundry checkpoints the modules it names in the chosen blocks only"},
          {"blocks", "blocks is not a module llm-foundry checkpoints"}}) {
    const std::string yaml = kModel + "  activation_checkpointing_target: " + target + "\n" + ckpt;
    const std::string e = error_of([&] { parse_train_yaml(yaml, "t.yaml"); });
    BOOST_TEST(contains(e, "t.yaml:6: model.activation_checkpointing_target: "), target);
    BOOST_TEST(contains(e, named), e);
  }
  // A run that does not checkpoint never reads the target: listed as ignored.
  const TrainYaml off = parse_train_yaml(
      kModel + "  activation_checkpointing_target: mptmlp\nfsdp_config: {activation_checkpointing: false}\n", "t.yaml");
  BOOST_TEST((*off.checkpointing == Checkpointing::kNone));
  BOOST_TEST(off.ignored.back() == "model.activation_checkpointing_target");
  // Without fsdp_config the run may checkpoint (--ckpt, a sweep): the target is an error.
  BOOST_TEST(
      contains(error_of([&] { parse_train_yaml(kModel + "  activation_checkpointing_target: mptmlp\n", "t.yaml"); }),
               "is neither"));
  // A --models entry serves runs that may checkpoint: the same error.
  std::vector<std::string> warnings;
  ModelCatalog c;
  BOOST_TEST(contains(error_of([&] {
                        c.add_yaml(
                            "m: {d_model: 512, n_heads: 8, n_layers: 2, activation_checkpointing_target: mptmlp}\n",
                            "m.yaml", warnings);
                      }),
                      "m.yaml:1: model 'm' activation_checkpointing_target: mptmlp -- tpsim models checkpointing"));
}

// Issue 14: the top-level keys are llm-foundry's TrainConfig fields (config_utils.py); train.py
// refuses any other. Those that change the speed and are not modelled are refused by name.
BOOST_AUTO_TEST_CASE(top_level_keys_are_llm_foundrys_train_config) {
  const TrainYaml t = parse_train_yaml(kModel +
                                           "variables: {x: 1}\ntokenizer: {name: gpt2}\noptimizer: {name: adamw}\n"
                                           "eval_first: false\ncompile_config: null\nseed: 17\n",
                                       "t.yaml");
  BOOST_TEST(t.ignored == (std::vector<std::string>{"variables", "tokenizer", "optimizer", "eval_first", "seed"}));
  BOOST_TEST(
      error_of([] { parse_train_yaml(kModel + "optimiser: {name: adamw}\n", "t.yaml"); }) ==
      "t.yaml:6: unknown top-level key 'optimiser' (did you mean optimizer?): llm-foundry's train.py refuses keys "
      "outside its TrainConfig (values of your own go under variables)");
  BOOST_TEST(error_of([] { parse_train_yaml(kModel + "compile_config: {mode: max-autotune}\n", "t.yaml"); }) ==
             "t.yaml:6: compile_config.mode 'max-autotune' -- tpsim models torch.compile's default mode with Inductor "
             "only");
  BOOST_TEST(
      error_of([] { parse_train_yaml(kModel + "compile_config: {backend: eager}\n", "t.yaml"); }) ==
      "t.yaml:6: compile_config.backend 'eager' -- tpsim models torch.compile's default mode with Inductor only");
  BOOST_TEST(error_of([] { parse_train_yaml(kModel + "compile_config: [1]\n", "t.yaml"); }) ==
             "t.yaml:6: compile_config must be a map of torch.compile's arguments");
  // compile_config: {} is torch.compile with its defaults (Composer compiles whenever it is not
  // None); null is no compile.
  BOOST_TEST(parse_train_yaml(kModel + "compile_config: {}\n", "t.yaml").torch_compile);
  BOOST_TEST(parse_train_yaml(kModel + "compile_config: {mode: default, dynamic: false, fullgraph: true}\n", "t.yaml")
                 .torch_compile);
  BOOST_TEST(!parse_train_yaml(kModel + "compile_config: null\n", "t.yaml").torch_compile);
  BOOST_TEST(contains(error_of([] { parse_train_yaml(kModel + "tp_config: {tensor_parallel_degree: 2}\n", "t.yaml"); }),
                      "t.yaml:6: tp_config -- tensor parallelism: tpsim cannot model it yet"));
  BOOST_TEST(contains(
      error_of([] { parse_train_yaml(kModel + "parallelism_config: {tp: {tensor_parallel_degree: 2}}\n", "t.yaml"); }),
      "t.yaml:6: parallelism_config -- parallelism settings beyond fsdp_config"));
  // Model kinds: hf_t5 is an encoder-decoder; an unregistered name is refused.
  BOOST_TEST(contains(
      error_of([] { parse_train_yaml("model: {name: hf_t5, pretrained_model_name_or_path: t5-small}\n", "t.yaml"); }),
      "t.yaml:1: model.name: hf_t5 -- an encoder-decoder model (T5)"));
  BOOST_TEST(contains(
      error_of([] { parse_train_yaml("model: {name: bert, d_model: 8, n_heads: 1, n_layers: 1}\n", "t.yaml"); }),
      "model.name: bert -- a model other than llm-foundry's mpt_causal_lm"));
}

// Issue 39: Composer's fsdp_config.mixed_precision may be a map of dtypes (get_mixed_precision);
// it is read as the FSDP mixed precision it equals, or refused as not modelled, never as malformed.
BOOST_AUTO_TEST_CASE(a_mixed_precision_map_reads_as_the_mode_it_equals) {
  const auto mp = [](const std::string& map, const std::string& precision = "amp_bf16") {
    return parse_train_yaml(kModel + "precision: " + precision + "\nfsdp_config:\n  mixed_precision: " + map + "\n",
                            "t.yaml");
  };
  // DEFAULT: parameters in the precision's dtype, gradients reduced in fp32; buffers not costed.
  const TrainYaml d = mp("{param_dtype: bf16, reduce_dtype: fp32, buffer_dtype: bf16}");
  BOOST_TEST((d.mp_mode == MpMode::kDefault));
  BOOST_TEST(d.ignored == (std::vector<std::string>{"fsdp_config.mixed_precision.buffer_dtype"}));
  // PURE: both in the precision's dtype, by any of torch's names; FULL: neither cast (not given).
  BOOST_TEST((mp("{param_dtype: torch.bfloat16, reduce_dtype: bfloat16}").mp_mode == MpMode::kPure));
  BOOST_TEST((mp("{}").mp_mode == MpMode::kFull));
  BOOST_TEST((mp("{param_dtype: fp16, reduce_dtype: fp16}", "amp_fp16").mp_mode == MpMode::kPure));
  // A pair none of the three is refused naming it; an unknown dtype or key is malformed.
  BOOST_TEST(contains(error_of([&] { mp("{param_dtype: fp32, reduce_dtype: bf16}"); }),
                      "param_dtype fp32 with reduce_dtype bf16 under amp_bf16 is none of Composer's"));
  BOOST_TEST(contains(error_of([&] { mp("{param_dtype: int8}"); }),
                      "fsdp_config.mixed_precision.param_dtype 'int8' is not a dtype Composer reads"));
  BOOST_TEST(
      contains(error_of([&] { mp("{param_type: bf16}"); }), "unknown key 'fsdp_config.mixed_precision.param_type'"));
}

// Issue 39: without device_train_microbatch_size llm-foundry's TrainConfig runs auto.
BOOST_AUTO_TEST_CASE(no_micro_batch_is_llm_foundrys_auto) {
  const TrainYaml t = parse_train_yaml(kModel + "global_train_batch_size: 64\n", "t.yaml");
  BOOST_TEST(t.micro_batch_auto);
  BOOST_TEST(!t.micro_batch.has_value());
  BOOST_TEST(t.notes ==
             (std::vector<std::string>{"device_train_microbatch_size not written: auto, llm-foundry's default"}));
}
