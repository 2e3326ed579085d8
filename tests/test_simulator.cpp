// The whole simulator: finite everywhere, physically ordered, and fitting every measured run.
#define BOOST_TEST_MODULE simulator
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "common.hpp"
#include "model/search.hpp"
#include "model/simulator.hpp"

using namespace tpsim;
using tpsim::test::contains;
namespace tt = boost::test_tools;

namespace {
bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

struct Fixture {
  ModelCatalog catalog = ModelCatalog::load_default();
  const ModelConfig& model(const char* name) { return catalog.get(name); }
};
}  // namespace

BOOST_FIXTURE_TEST_CASE(every_measured_configuration_is_predicted_to_fit, Fixture) {
  for (const auto& r : test::all_seed_rows()) {
    BOOST_TEST_CONTEXT(r.where()) {
      const DeviceSpec d = load_device(r.gpu);
      const DeviceProfile prof = load_shipped_profile(r.gpu);
      const TrainConfig cfg = r.config();
      BOOST_TEST_REQUIRE(check_config(catalog.get(r.model), d, prof.params, cfg).empty());
      const Prediction p = predict(catalog.get(r.model), d, prof.params, cfg);
      BOOST_TEST(p.fits());
      BOOST_TEST(p.memory.peak_bytes <= d.memory_bytes);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(predictions_are_finite_and_positive_over_the_sweep_range, Fixture) {
  int64_t checked = 0;
  for (const char* dev : {"a100_40gb", "a100_80gb", "h100_80gb", "h200_141gb", "mi250x", "mi300x", "v100_32gb"}) {
    const DeviceSpec d = load_device(dev);
    const DeviceProfile prof = load_shipped_profile(dev);
    const Precision prec = std::string(dev) == "v100_32gb" ? Precision::kAmpFp16 : Precision::kAmpBf16;
    for (const ModelConfig& m : catalog.models())
      for (int64_t seq = 512; seq <= 65536; seq *= 2)
        for (int64_t gpus : {8, 64, 512})
          for (int64_t mb : {1, 3, 16})
            for (Sharding sh : kAllShardings)
              for (bool ckpt : {false, true}) {
                const TrainConfig c{
                    .seq_len = seq,
                    .global_batch = gpus * 16,
                    .micro_batch = mb,
                    .n_gpus = gpus,
                    .precision = prec,
                    .layout = {.sharding = sh, .checkpointing = ckpt ? Checkpointing::kFull : Checkpointing::kNone}};
                if (m.max_positions > 0 && seq > m.max_positions) {  // GPT-2, OPT: a learned table of positions
                  BOOST_TEST(contains(check_config(m, d, prof.params, c), "learned positions"));
                  ++checked;
                  continue;
                }
                BOOST_TEST_REQUIRE(check_config(m, d, prof.params, c).empty());
                const Prediction p = predict(m, d, prof.params, c);
                const StepBreakdown& b = p.time;
                const double parts = b.gemm_s + b.attention_s + b.other_compute_s + b.exposed_comm_s + b.optimizer_s +
                                     b.overhead_s + b.allocator_s;
                const bool ok = finite_positive(p.step_s) && finite_positive(p.tokens_per_s) &&
                                finite_positive(p.mfu) && finite_positive(p.hfu) &&
                                finite_positive(p.memory.peak_bytes) && std::isfinite(parts) &&
                                std::abs(parts - p.step_s) <= 1e-9 * p.step_s + 1e-12 &&
                                // llm-foundry's MFU counts attention over the whole sequence; a model
                                // attending within a shorter window or chunk can pass 100% (docs/models.md).
                                (p.mfu < 1.0 || (m.sliding_window > 0 && m.sliding_window < seq) ||
                                 (m.attention_chunk > 0 && m.attention_chunk < seq));
                if (!ok) BOOST_ERROR(dev << " " << m.name << " seq " << seq << " gpus " << gpus << " mb " << mb);
                ++checked;
              }
  }
  BOOST_TEST(checked == 7 * static_cast<int64_t>(catalog.models().size()) * 8 * 3 * 3 * 4 * 2);
}

BOOST_FIXTURE_TEST_CASE(checkpointing_trades_time_for_memory, Fixture) {
  const DeviceSpec d = load_device("a100_80gb");
  const DeviceProfile prof = load_shipped_profile("a100_80gb");
  TrainConfig c{.seq_len = 2048, .global_batch = 256, .micro_batch = 4, .n_gpus = 8};
  const Prediction off = predict(model("7b"), d, prof.params, c);
  c.layout.checkpointing = Checkpointing::kFull;
  const Prediction on = predict(model("7b"), d, prof.params, c);
  BOOST_TEST(on.memory.peak_bytes < off.memory.peak_bytes);
  BOOST_TEST(on.step_s > off.step_s);
  // The recompute reruns recompute_fraction of the forward, whose GEMMs are a third of the step's.
  const double r = prof.params.recompute_fraction;
  BOOST_TEST(on.time.gemm_s == off.time.gemm_s * (3.0 + r) / 3.0, tt::tolerance(0.02));
}

BOOST_FIXTURE_TEST_CASE(sharding_divides_the_state, Fixture) {
  const DeviceSpec d = load_device("h100_80gb");
  const DeviceProfile prof = load_shipped_profile("h100_80gb");
  TrainConfig c{
      .seq_len = 2048, .global_batch = 64, .micro_batch = 2, .n_gpus = 16, .layout = {.sharding = Sharding::kNoShard}};
  const Prediction none = predict(model("1b"), d, prof.params, c);
  c.layout.sharding = Sharding::kFullShard;
  const Prediction full = predict(model("1b"), d, prof.params, c);
  c.layout.sharding = Sharding::kHybridShard;
  const Prediction hybrid = predict(model("1b"), d, prof.params, c);
  BOOST_TEST(full.memory.sharded_state_bytes == none.memory.sharded_state_bytes / 16, tt::tolerance(1e-12));
  BOOST_TEST(hybrid.memory.sharded_state_bytes == none.memory.sharded_state_bytes / 8, tt::tolerance(1e-12));
  // At 512 GPUs FULL_SHARD's rings span 64 nodes and pay 511 steps of cross-node latency per
  // collective; HYBRID_SHARD's gathers stay in a node and only its all-reduce crosses nodes.
  c.n_gpus = 512;
  c.global_batch = 1024;
  c.layout.sharding = Sharding::kFullShard;
  const Prediction full512 = predict(model("1b"), d, prof.params, c);
  c.layout.sharding = Sharding::kHybridShard;
  const Prediction hybrid512 = predict(model("1b"), d, prof.params, c);
  BOOST_TEST(full512.timeline.comm_s > hybrid512.timeline.comm_s);
}

BOOST_FIXTURE_TEST_CASE(search_keeps_the_fastest_configuration_that_fits, Fixture) {
  const DeviceSpec d = load_device("a100_40gb");
  const DeviceProfile prof = load_shipped_profile("a100_40gb");
  const TrainConfig base{.seq_len = 2048, .global_batch = 256, .n_gpus = 8};
  const SearchResult r = search_fastest(model("13b"), d, prof.params, base, SearchSpace{});
  BOOST_TEST_REQUIRE(r.found);
  BOOST_TEST(r.best_prediction.fits());
  // Nothing that fits is faster.
  for (int64_t mb = 1; mb <= 32; ++mb)
    for (bool ckpt : {false, true}) {
      TrainConfig c = base;
      c.micro_batch = mb;
      c.layout.checkpointing = ckpt ? Checkpointing::kFull : Checkpointing::kNone;
      const Prediction p = predict(model("13b"), d, prof.params, c);
      if (p.fits()) BOOST_TEST(p.step_s >= r.best_prediction.step_s);
    }
  // 70b does not fit on 8 A100 40GB in any configuration: the leanest is reported.
  const SearchResult none = search_fastest(model("70b"), d, prof.params, base, SearchSpace{});
  BOOST_TEST(!none.found);
  BOOST_TEST(none.leanest_prediction.memory.peak_bytes > d.memory_bytes);
}
