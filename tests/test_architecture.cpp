#define BOOST_TEST_MODULE architecture
#include <boost/test/unit_test.hpp>

#include "common.hpp"
#include "model/architecture.hpp"

using namespace tpsim;
using tpsim::test::add_models;

BOOST_AUTO_TEST_CASE(parameter_count_matches_every_seed_row_exactly) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const auto rows = test::all_seed_rows();
  BOOST_TEST(rows.size() == 198u);
  for (const auto& r : rows) {
    BOOST_TEST_CONTEXT(r.where()) {
      BOOST_TEST_REQUIRE(r.num_params > 0);
      BOOST_TEST(parameter_count(catalog.get(r.model), r.seq_len) == r.num_params);
    }
  }
}

BOOST_AUTO_TEST_CASE(parameter_count_is_the_mpt_formula) {
  // L(12d^2 + 13d) + d(V + S + 2) for MPT defaults (biases, learned positions, expansion 4).
  const ModelConfig m{.name = "x", .d_model = 1024, .n_heads = 16, .n_layers = 24, .vocab_size = 50368, .moe = {}};
  const int64_t d = 1024, L = 24, V = 50368, S = 2048;
  BOOST_TEST(parameter_count(m, S) == L * (12 * d * d + 13 * d) + d * (V + S + 2));
  // no_bias removes the linear and norm biases; learned_pos_emb=false removes S*d.
  ModelConfig nb = m;
  nb.norm_bias = nb.qkv_bias = nb.linear_bias = false;
  nb.positions = PositionKind::kAlibi;
  BOOST_TEST(parameter_count(nb, S) == L * (12 * d * d + 2 * d) + d * (V + 1));
}

BOOST_AUTO_TEST_CASE(architecture_checks_name_the_problem) {
  ModelConfig m{.name = "x", .d_model = 1000, .n_heads = 16, .n_layers = 24, .vocab_size = 50368, .moe = {}};
  BOOST_TEST(check_architecture(m).find("does not divide") != std::string::npos);
  m.d_model = 1024;
  BOOST_TEST(check_architecture(m).empty());
  m.n_layers = 0;
  BOOST_TEST(!check_architecture(m).empty());
}

BOOST_AUTO_TEST_CASE(alibi_and_rope_drop_the_learned_positions_as_llm_foundry_counts) {
  // mosaicml/mpt-7b's config.json (tests/data/hf-configs/mpt-7b) as a --models entry: ALiBi turns the
  // learned positions off though learned_pos_emb says true; no_bias; vocabulary 50432. Its published
  // count (mpt_get_total_params, the sum of parameter sizes) is 6,649,286,656.
  ModelCatalog catalog;
  const std::string yaml =
      "mpt-7b-hf:\n  d_model: 4096\n  n_heads: 32\n  n_layers: 32\n  expansion_ratio: 4\n  max_seq_len: 2048\n"
      "  vocab_size: 50432\n  no_bias: true\n  learned_pos_emb: true\n"
      "  attn_config: {alibi: true, attn_impl: torch, qk_ln: false, clip_qkv: null, softmax_scale: null,\n"
      "                prefix_lm: false, attn_uses_sequence_id: false, alibi_bias_max: 8, attn_pdrop: 0}\n"
      "  emb_pdrop: 0\n  resid_pdrop: 0\n  logit_scale: null\n  norm_type: low_precision_layernorm\n";
  BOOST_TEST(add_models(catalog, yaml, "mpt-7b.yaml").empty());
  const ModelConfig& m = catalog.get("mpt-7b-hf");
  BOOST_TEST(!m.learned_positions());
  BOOST_TEST(parameter_count(m, 2048) == 6649286656LL);
  BOOST_TEST(parameter_count(m, 65536) == 6649286656LL);  // no row per position: the count does not grow with S
}

using tpsim::test::llama;

BOOST_AUTO_TEST_CASE(parameter_counts_match_the_published_hugging_face_counts) {
  // tests/data/hf-configs/published_parameter_counts.json; the counts do not depend on the run's
  // sequence length (no learned positions, or GPT-2's fixed table of 1024).
  for (int64_t seq : {2048, 8192}) {
    BOOST_TEST(parameter_count(llama(4096, 32, 8, 32, 14336, 128256), seq) == 8030261248LL);   // Llama-3-8B
    BOOST_TEST(parameter_count(llama(8192, 64, 8, 80, 28672, 128256), seq) == 70553706496LL);  // Llama-3.1-70B
    ModelConfig mistral = llama(4096, 32, 8, 32, 14336, 32000);
    mistral.sliding_window = 4096;
    BOOST_TEST(parameter_count(mistral, seq) == 7241732096LL);  // Mistral-7B-v0.1
    ModelConfig qwen = llama(3584, 28, 4, 28, 18944, 152064);
    qwen.qkv_bias = true;                                    // Qwen2: biases on Q, K and V only
    BOOST_TEST(parameter_count(qwen, seq) == 7615616512LL);  // Qwen2.5-7B
    ModelConfig mixtral = llama(4096, 32, 8, 32, 14336, 32000);
    mixtral.moe = {.experts = 8, .top_k = 2, .d_expert = 14336};
    BOOST_TEST(parameter_count(mixtral, seq) == 46702792704LL);  // Mixtral-8x7B
    const ModelConfig gpt2 = test::gpt2();
    BOOST_TEST(parameter_count(gpt2, std::min<int64_t>(seq, 1024)) == 124439808LL);  // GPT-2
  }
}

BOOST_AUTO_TEST_CASE(active_parameters_follow_mpt_get_active_params) {
  // Routed experts count top_k / experts of their weights; an untied token embedding is a lookup
  // table and is left out. Dense tied MPT models: the total.
  ModelConfig mixtral = llama(4096, 32, 8, 32, 14336, 32000);
  mixtral.moe = {.experts = 8, .top_k = 2, .d_expert = 14336};
  const int64_t expert = 3LL * 4096 * 14336;
  const int64_t total = parameter_count(mixtral, 4096);
  BOOST_TEST(active_parameter_count(mixtral, 4096) == total - 32 * 6 * expert - 32000LL * 4096);
  const ModelConfig mpt{.name = "x", .d_model = 1024, .n_heads = 16, .n_layers = 24, .vocab_size = 50368, .moe = {}};
  BOOST_TEST(active_parameter_count(mpt, 2048) == parameter_count(mpt, 2048));
}

BOOST_AUTO_TEST_CASE(grouped_query_heads_must_divide_the_query_heads) {
  ModelConfig m = llama(4096, 32, 6, 32, 14336, 32000);
  BOOST_TEST(check_architecture(m).find("must divide the query heads") != std::string::npos);
  m.n_kv_heads = 8;
  BOOST_TEST(check_architecture(m).empty());
  m.moe = {.experts = 8, .top_k = 9, .d_expert = 1024};
  BOOST_TEST(check_architecture(m).find("top_k") != std::string::npos);
}
