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
