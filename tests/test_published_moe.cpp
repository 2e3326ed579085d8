// Megatron-Bridge's mixture-of-experts and hybrid rows (data/measured/literature_megatron_moe.csv,
// docs/accuracy.md): how many tpsim predicts and refuses, that each refusal names what the recipe
// runs that tpsim does not model (never a row predicted without it), and that every predicted run
// fits the memory of the device it ran on (a run that exists is not predicted out of memory), but
// the one row whose published batch contradicts itself.
#define BOOST_TEST_MODULE published_moe
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common.hpp"
#include "run_tpsim.hpp"

using namespace tpsim;
using tpsim::test::contains;
using tpsim::testing::run_tpsim;

namespace {
double number(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : std::stod(v.get<std::string>()); }
}  // namespace

BOOST_AUTO_TEST_CASE(every_row_is_predicted_or_refused_by_name_and_fits_where_it_ran) {
  const std::string table = std::string(TPSIM_DATA) + "/measured/literature_megatron_moe.csv";
  const auto run = run_tpsim("validate --skip-refused --format json --table " + table);
  BOOST_TEST_REQUIRE(run.status == 0, run.err);
  const nlohmann::json rows = nlohmann::json::parse(run.out).at("rows");
  BOOST_TEST(rows.size() == 104u);

  // Each refusal: the first thing its recipe runs that tpsim does not model yet (fp8 attention,
  // the Muon optimizer), or a published pipeline shape its recipe cannot run.
  std::istringstream err(run.err);
  int refused = 0;
  for (std::string line; std::getline(err, line);) {
    if (!contains(line, "not predicted (--skip-refused)")) continue;
    ++refused;
    const bool named =
        contains(line, "fp8 attention") || contains(line, "the optimizer 'muon'") || contains(line, "pipeline");
    BOOST_TEST(named, line);
  }
  BOOST_TEST(refused == 24);

  for (const nlohmann::json& r : rows) {
    const std::string id = r.at("Source").get<std::string>() + " " + r.at("Model").get<std::string>() + " " +
                           r.at("GPU").get<std::string>() + " " + r.at("Precision").get<std::string>();
    const double tokens = number(r.at("Predicted Throughput (T/s)"));
    BOOST_TEST((std::isfinite(tokens) && tokens > 0), id);
    const double gib = number(r.at("Predicted Memory (GiB)"));
    const double capacity = load_device(r.at("GPU").get<std::string>()).memory_bytes / (1024.0 * 1024.0 * 1024.0);
    // 25.11's H100 GPT-OSS row: its published gradient accumulation (2) contradicts its batch
    // (512 / (4 x 16) = 8), and it is kept as published (data/published/README.md).
    const bool contradicted = id == "mbridge-25.11 gpt-oss-120b h100_80gb amp_bf16";
    BOOST_TEST((contradicted ? gib > capacity : gib <= capacity), id << ": " << gib << " GiB of " << capacity);
  }
}
