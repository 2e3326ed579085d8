#define BOOST_TEST_MODULE architecture
#include <boost/test/unit_test.hpp>

#include "common.hpp"
#include "model/architecture.hpp"

using namespace tpsim;

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
  const ModelConfig m{"x", 1024, 16, 24, 4.0, 50368, true, false};
  const int64_t d = 1024, L = 24, V = 50368, S = 2048;
  BOOST_TEST(parameter_count(m, S) == L * (12 * d * d + 13 * d) + d * (V + S + 2));
  // no_bias removes the linear and norm biases; learned_pos_emb=false removes S*d.
  ModelConfig nb = m;
  nb.no_bias = true;
  nb.learned_pos_emb = false;
  BOOST_TEST(parameter_count(nb, S) == L * (12 * d * d + 2 * d) + d * (V + 1));
}

BOOST_AUTO_TEST_CASE(architecture_checks_name_the_problem) {
  ModelConfig m{"x", 1000, 16, 24, 4.0, 50368, true, false};
  BOOST_TEST(check_architecture(m).find("does not divide") != std::string::npos);
  m.d_model = 1024;
  BOOST_TEST(check_architecture(m).empty());
  m.n_layers = 0;
  BOOST_TEST(!check_architecture(m).empty());
}

BOOST_AUTO_TEST_CASE(alibi_and_rope_drop_the_learned_positions_as_llm_foundry_counts) {
  // mosaicml/mpt-7b's config.json (../shared/hf-configs/mpt-7b) as a --models entry: ALiBi turns the
  // learned positions off though learned_pos_emb says true; no_bias; vocabulary 50432. Its published
  // count (mpt_get_total_params, the sum of parameter sizes) is 6,649,286,656.
  ModelCatalog catalog;
  std::vector<std::string> warnings;
  catalog.add_yaml(
      "mpt-7b-hf:\n  d_model: 4096\n  n_heads: 32\n  n_layers: 32\n  expansion_ratio: 4\n  max_seq_len: 2048\n"
      "  vocab_size: 50432\n  no_bias: true\n  learned_pos_emb: true\n"
      "  attn_config: {alibi: true, attn_impl: torch, qk_ln: false, clip_qkv: null, softmax_scale: null,\n"
      "                prefix_lm: false, attn_uses_sequence_id: false, alibi_bias_max: 8, attn_pdrop: 0}\n"
      "  emb_pdrop: 0\n  resid_pdrop: 0\n  logit_scale: null\n  norm_type: low_precision_layernorm\n",
      "mpt-7b.yaml", warnings);
  BOOST_TEST(warnings.empty());
  const ModelConfig& m = catalog.get("mpt-7b-hf");
  BOOST_TEST(!m.learned_pos_emb);
  BOOST_TEST(parameter_count(m, 2048) == 6649286656LL);
  BOOST_TEST(parameter_count(m, 65536) == 6649286656LL);  // no row per position: the count does not grow with S
}
