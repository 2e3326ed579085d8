// The one search (model/search.hpp) against the slow, obvious one: predict() of every layout and
// every micro-batch from 1 to the per-device batch. Its pruning (the memory bound, equivalent and
// dominated choices) must never change what it finds.
#define BOOST_TEST_MODULE search
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <fstream>
#include <set>
#include <span>
#include <tuple>

#include "common.hpp"
#include "model/framework.hpp"
#include "model/model_parallel.hpp"
#include "model/plan.hpp"
#include "model/rules.hpp"
#include "model/search.hpp"

using namespace tpsim;
using tpsim::test::contains;

namespace {

struct Case {
  const char* device;
  const char* model;
  int64_t seq, gpus, global_batch;
  Precision precision = Precision::kAmpBf16;
};

// Points where memory, checkpointing and sharding all matter: small models whose every micro-batch
// fits, large ones where only checkpointing does, and nothing fitting at all.
const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"h100_80gb", "125m", 2048, 8, 512},
      {"h100_80gb", "1b", 2048, 8, 1024},
      {"h100_80gb", "7b", 4096, 16, 256},
      {"h100_80gb", "30b", 8192, 64, 128},
      {"a100_40gb", "3b", 2048, 8, 256},
      {"a100_40gb", "13b", 8192, 8, 64},
      {"a100_40gb", "70b", 65536, 8, 16},
      {"a100_80gb", "7b", 512, 32, 2048},
      {"h100_80gb", "13b", 2048, 16, 512, Precision::kAmpFp8},
      {"mi300x", "30b", 4096, 8, 64},
      {"v100_32gb", "1b", 2048, 8, 128, Precision::kAmpFp16},
  };
  return c;
}

struct Brute {
  bool found = false;
  TrainConfig best;
  Prediction best_prediction;
  std::vector<Candidate> fitting;
  int64_t largest_no_ckpt_full_shard = 0;
};

Brute brute_force(const ModelConfig& model, const DeviceSpec& d, const CostParams& params, const TrainConfig& base,
                  const SearchSpace& space) {
  Brute b;
  std::tuple<double, int, int64_t> best_rank{};
  const std::vector<Layout> layouts = space.layouts();
  for (size_t i = 0; i < layouts.size(); ++i)
    for (int64_t mb = 1; mb <= base.per_device_batch(); ++mb) {
      TrainConfig cfg = with_layout(base, layouts[i]);
      cfg.micro_batch = mb;
      if (!check_config(model, d, params, cfg).empty()) continue;
      const Prediction p = predict(model, d, params, cfg);
      if (!p.fits()) continue;
      b.fitting.push_back({cfg, p});
      if (i == 0) b.largest_no_ckpt_full_shard = mb;
      const std::tuple<double, int, int64_t> rank{p.step_s, static_cast<int>(i), mb};
      if (!b.found || rank < best_rank) {
        b.found = true;
        b.best = cfg;
        b.best_prediction = p;
        best_rank = rank;
      }
    }
  return b;
}

TrainConfig base_of(const Case& c) {
  TrainConfig base;
  base.seq_len = c.seq;
  base.n_gpus = c.gpus;
  base.global_batch = c.global_batch;
  base.precision = c.precision;
  base.micro_batch = 1;
  return base;
}

// A run of `gpus` GPUs at `seq` tokens a sequence and `global_batch` sequences a step.
TrainConfig run_of(int64_t seq, int64_t gpus, int64_t global_batch) {
  TrainConfig run;
  run.seq_len = seq;
  run.n_gpus = gpus;
  run.global_batch = global_batch;
  return run;
}

// A model of the shipped catalogue, loaded once.
const ModelConfig& model_named(const std::string& name) {
  static const ModelCatalog catalog = ModelCatalog::load_default();
  return catalog.get(name);
}

SearchSpace megatron_space() {
  SearchSpace space;
  space.asked.framework = Framework::kMegatron;
  return space;
}

bool same(const TrainConfig& a, const TrainConfig& b) {
  return a.micro_batch == b.micro_batch && a.layout.sharding == b.layout.sharding &&
         a.layout.checkpointing == b.layout.checkpointing && a.global_batch == b.global_batch;
}

// Runs check(model, d, params, base, brute) for every case, under the case's name, brute-forcing `space`.
template <class Check>
void for_each_case(Check check, const SearchSpace& space = SearchSpace{}) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  for (const Case& c : cases()) {
    BOOST_TEST_CONTEXT(c.device << " " << c.model << " seq " << c.seq << " gpus " << c.gpus) {
      const DeviceSpec d = load_device(c.device);
      const CostParams params = load_shipped_profile(c.device).params;
      const ModelConfig& model = catalog.get(c.model);
      check(model, d, params, base_of(c), brute_force(model, d, params, base_of(c), space));
    }
  }
}

}  // namespace

// The framework definitions the rest of the program asks (model/framework.hpp): each is found
// under its own id, every framework-only option has exactly one owner, and the data parallelism
// each runs is the one its documentation names.
BOOST_AUTO_TEST_CASE(every_framework_is_found_under_its_id_and_every_option_has_one_owner) {
  for (Framework f : kAllFrameworks) {
    BOOST_TEST((framework_def(f).id == f));
    BOOST_TEST(framework_def(f).name == to_string(f));
    BOOST_TEST(parse_framework(framework_def(f).name).has_value());
    // Without sharding strategies the definition says why --sharding does not apply.
    BOOST_TEST(framework_def(f).sharding_strategies == framework_def(f).no_sharding_strategies.empty());
  }
  for (int o = 0; o <= static_cast<int>(FrameworkOption::kSelectiveAcLayers); ++o) {
    const auto option = static_cast<FrameworkOption>(o);
    int owners = 0;
    for (Framework f : kAllFrameworks) owners += framework_def(f).owns(option) ? 1 : 0;
    BOOST_TEST_CONTEXT("option " << o) { BOOST_TEST(owners == 1); }
    BOOST_TEST(option_owner(option).owns(option));
  }
  BOOST_TEST((framework_sharding(Framework::kComposer) == Sharding::kFullShard));
  BOOST_TEST((framework_sharding(Framework::kComposer, Sharding::kHybridShard) == Sharding::kHybridShard));
  BOOST_TEST((framework_sharding(Framework::kMegatron, Sharding::kHybridShard) == Sharding::kNoShard));
  BOOST_TEST((framework_sharding(Framework::kTorchtitan) == Sharding::kFullShard));
  BOOST_TEST((kDefaultFramework == Framework::kComposer));
}

// The rulebook: every rule has a name of its own and a line in docs/rules.md.
BOOST_AUTO_TEST_CASE(every_rule_is_named_once_and_documented) {
  std::ifstream in(std::string(TPSIM_DATA) + "/../docs/rules.md");
  BOOST_TEST_REQUIRE(in.good());
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string_view> names;
  std::set<const Rule*> seen;  // a rule two frameworks share sits in both books
  const auto check = [&](std::span<const Rule* const> rules) {
    for (const Rule* r : rules) {
      if (!seen.insert(r).second) continue;
      BOOST_TEST(names.insert(r->name).second, r->name);
      BOOST_TEST(!r->concerns.empty(), r->name);
      BOOST_TEST(contains(doc, "| `" + std::string(r->name) + "` |"), r->name);
    }
  };
  check(general_rules());
  for (const FrameworkDef* def : kFrameworkDefs) check(def->rules);
  BOOST_TEST(names.size() == seen.size());
}

BOOST_AUTO_TEST_CASE(the_fastest_is_the_brute_force_fastest_and_prediction_for_prediction_the_same) {
  for_each_case([](const ModelConfig& model, const DeviceSpec& d, const CostParams& params, const TrainConfig& base,
                   const Brute& b) {
    const SearchResult r = search(model, d, params, base, SearchSpace{}, SearchGoal::kFastest);
    BOOST_TEST(r.found == b.found);
    if (!b.found) {
      BOOST_TEST(r.has_leanest);
      BOOST_TEST(!r.leanest_prediction.fits());
      return;
    }
    BOOST_TEST(same(r.best, b.best));
    BOOST_TEST(r.best_prediction.step_s == b.best_prediction.step_s);  // bit for bit
    BOOST_TEST(r.best_prediction.memory.peak_bytes == b.best_prediction.memory.peak_bytes);
    // It times fewer configurations than there are that fit (dominated ones are skipped), never more.
    BOOST_TEST(r.evaluated <= static_cast<int64_t>(b.fitting.size()));
  });
}

BOOST_AUTO_TEST_CASE(all_that_fit_lists_every_configuration_that_fits_in_the_order_of_the_space) {
  for_each_case([](const ModelConfig& model, const DeviceSpec& d, const CostParams& params, const TrainConfig& base,
                   const Brute& b) {
    const SearchResult r = search(model, d, params, base, SearchSpace{}, SearchGoal::kAllThatFit);
    BOOST_TEST_REQUIRE(r.fitting.size() == b.fitting.size());
    for (size_t i = 0; i < b.fitting.size(); ++i) {
      BOOST_TEST(same(r.fitting[i].cfg, b.fitting[i].cfg));
      BOOST_TEST(r.fitting[i].prediction.step_s == b.fitting[i].prediction.step_s);
    }
    // largest_fitting_micro_batch (predict --micro-batch auto) is the same bound.
    BOOST_TEST(largest_fitting_micro_batch(model, d, params, base) == b.largest_no_ckpt_full_shard);
  });
}

// The three kinds of checkpointing, in the order `--ckpt any` searches them and reversed (rule 2
// may only skip a micro-batch for a layout met earlier that recomputes less), and selective alone.
BOOST_AUTO_TEST_CASE(every_kind_of_checkpointing_searches_as_the_brute_force_does) {
  const std::vector<std::vector<Checkpointing>> kinds = {
      {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kFull},
      {Checkpointing::kFull, Checkpointing::kSelective, Checkpointing::kNone},
      {Checkpointing::kSelective},
  };
  for (const auto& k : kinds) {
    SearchSpace space;
    space.checkpointing = k;
    BOOST_TEST_CONTEXT("checkpointing " << to_string(k.front()) << " first, " << k.size() << " kinds") {
      for_each_case(
          [&](const ModelConfig& model, const DeviceSpec& d, const CostParams& params, const TrainConfig& base,
              const Brute& b) {
            const SearchResult r = search(model, d, params, base, space, SearchGoal::kFastest);
            BOOST_TEST_REQUIRE(r.found == b.found);
            if (b.found) {
              BOOST_TEST(same(r.best, b.best));
              BOOST_TEST(r.best_prediction.step_s == b.best_prediction.step_s);  // bit for bit
            }
            BOOST_TEST(r.evaluated <= static_cast<int64_t>(b.fitting.size()));
            const SearchResult all = search(model, d, params, base, space, SearchGoal::kAllThatFit);
            BOOST_TEST_REQUIRE(all.fitting.size() == b.fitting.size());
            for (size_t i = 0; i < b.fitting.size(); ++i) BOOST_TEST(same(all.fitting[i].cfg, b.fitting[i].cfg));
          },
          space);
    }
  }
}

BOOST_AUTO_TEST_CASE(rejections_say_why) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const DeviceSpec d = load_device("a100_40gb");
  const CostParams params = load_shipped_profile("a100_40gb").params;
  TrainConfig base = base_of({"a100_40gb", "13b", 2048, 8, 256});
  // Within one node HYBRID_SHARD is FULL_SHARD: skipped when searching for the fastest, listed
  // when listing all.
  const SearchResult fastest = search(catalog.get("13b"), d, params, base, SearchSpace{}, SearchGoal::kFastest);
  int equivalent = 0;
  for (const Rejection& r : fastest.rejections)
    if (r.kind == RejectionKind::kEquivalent) {
      ++equivalent;
      BOOST_TEST((r.layout.sharding == Sharding::kHybridShard && r.same_as.sharding == Sharding::kFullShard));
    }
  BOOST_TEST(equivalent == 2);
  const SearchResult all = search(catalog.get("13b"), d, params, base, SearchSpace{}, SearchGoal::kAllThatFit);
  for (const Rejection& r : all.rejections) BOOST_TEST((r.kind != RejectionKind::kEquivalent));

  // 12 GPUs are not whole nodes for HYBRID_SHARD; under NO_SHARD 13b does not fit a micro-batch of 1
  // (its 16 bytes of weights, gradients and Adam state per parameter are five times the memory).
  base.n_gpus = 12;
  base.global_batch = 96;
  SearchSpace space;
  space.shardings = {Sharding::kHybridShard, Sharding::kNoShard};
  const SearchResult r = search(catalog.get("13b"), d, params, base, space, SearchGoal::kAllThatFit);
  BOOST_TEST_REQUIRE(r.rejections.size() >= 3u);
  BOOST_TEST((r.rejections[0].kind == RejectionKind::kInvalid));
  BOOST_TEST(test::contains(r.rejections[0].reason, "HYBRID_SHARD needs whole nodes"));
  BOOST_TEST((r.rejections[2].kind == RejectionKind::kOutOfMemory));
  BOOST_TEST(r.rejections[2].micro_batch == 1);
  BOOST_TEST(r.rejections[2].peak_bytes > d.memory_bytes);

  // A listed micro-batch above the per-device batch: composer lowers it to that batch, as
  // llm-foundry does; megatron rejects it (Megatron-LM asserts), not searched.
  space = SearchSpace{};
  space.micro_batches = {64};
  const SearchResult listed =
      search(catalog.get("1b"), d, params, base_of({"a100_40gb", "1b", 2048, 8, 64}), space, SearchGoal::kAllThatFit);
  BOOST_TEST_REQUIRE(!listed.fitting.empty());
  for (const Candidate& c : listed.fitting) BOOST_TEST(c.cfg.micro_batch == 8);
  SearchSpace megatron = megatron_space();
  megatron.micro_batches = {64};
  megatron.asked.tensor = 1, megatron.asked.pipeline = 1, megatron.asked.context = 1;
  const SearchResult refused = search(catalog.get("1b"), d, params, base_of({"a100_40gb", "1b", 2048, 8, 64}), megatron,
                                      SearchGoal::kAllThatFit);
  BOOST_TEST_REQUIRE(!refused.rejections.empty());
  BOOST_TEST((refused.rejections[0].kind == RejectionKind::kMicroBatchTooLarge));
  BOOST_TEST(refused.rejections[0].per_device_batch == 8);
}

BOOST_AUTO_TEST_CASE(a_plan_ranks_every_fitting_configuration_by_score) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const DeviceSpec h100 = load_device("h100_80gb"), a100 = load_device("a100_80gb");
  const CostParams ph = load_shipped_profile("h100_80gb").params, pa = load_shipped_profile("a100_80gb").params;
  PlanQuery q;
  q.model = &catalog.get("7b");
  q.devices = {{&h100, &ph}, {&a100, &pa}};
  q.gpu_counts = {8, 16};
  q.seq_len = 2048;
  q.global_batch = 3;  // not a multiple of 8 or 16 GPUs (llm-foundry): every count rejected
  BOOST_TEST(plan_runs(q).ranked.empty());
  BOOST_TEST(plan_runs(q).rejected.size() == 4u);
  q.global_batch = 512;
  q.objective = Objective::kCost;
  const PlanResult plan = plan_runs(q);
  BOOST_TEST_REQUIRE(!plan.ranked.empty());
  for (size_t i = 1; i < plan.ranked.size(); ++i) BOOST_TEST(plan.ranked[i - 1].score <= plan.ranked[i].score);
  const PlannedConfig& top = plan.ranked.front();
  // The cost score is dollars per token: GPU-seconds per token at the device's price per GPU-hour
  // (1 when not set: GPU-hours).
  BOOST_TEST(top.score == static_cast<double>(top.cfg.n_gpus) / top.prediction.tokens_per_s / 3600.0,
             boost::test_tools::tolerance(1e-12));
  q.devices[0].price_per_gpu_hour = 2.5;
  q.devices[1].price_per_gpu_hour = 100.0;  // the A100s priced out of the top
  const PlanResult priced = plan_runs(q);
  BOOST_TEST(priced.top.chosen.device->id == "h100_80gb");
  BOOST_TEST(priced.top.chosen.score == 2.5 * static_cast<double>(priced.top.chosen.cfg.n_gpus) /
                                            priced.top.chosen.prediction.tokens_per_s / 3600.0,
             boost::test_tools::tolerance(1e-12));
}

// Megatron's space for MPT 125m (12 heads, 12 layers, FFN 3072) on 8 H100s (8 per node), counted
// by hand: tensor 1, 2, 4 (8 does not divide 12 heads); pipeline from the divisors of 12 with
// tensor x pipeline dividing 8: tp 1 and 2 with pp 1, 2, 4; tp 4 with pp 1, 2; virtual stages 1,
// and 2 at pp 2 (12 / (2 x 2) is whole; 2 x 4 and 4 x 2 are not): 4 + 4 + 3 = 11 layouts, each
// without and with checkpointing. A global batch of 4 rules out data parallel 8 (tp 1, pp 1): 10.
BOOST_AUTO_TEST_CASE(megatron_enumerates_exactly_the_valid_layouts) {
  const ModelConfig& model = model_named("125m");  // 12 layers, 12 heads
  const DeviceSpec d = load_device("h100_80gb");
  SearchSpace space = megatron_space();
  TrainConfig base = run_of(2048, 8, 16);
  const std::vector<Layout> layouts = space.layouts(model, d, base);
  // tp 1, 2, 4 (8 does not divide 12 heads); pp divides the GPUs left. The splits of 12 layers, by
  // hand: pp 1: vp 1. pp 2: even with vp 1, 2, 3, 6 (6 layers a stage); vp 4 has no even or counted
  // split (12 / 8, 14 / 8, 13 / 8), so fixed ends: first 8, last 4 (2 and 1 layers a chunk); vp 5
  // has none (its ends would hold 10 and 2 layers: 2 is under a layer a chunk); vp 7 with the
  // embedding and loss counted (14 over 14 chunks: the first chunk holds the embedding alone, the
  // last the loss). pp 4: even with vp 1 and 3; vp 2 with fixed ends first 2, last 2 (the middle
  // stages 4). pp 8: none (12 layers leave the ends none once the middle stages hold 2). So 1 + 6 +
  // 3 splits under tp 1 and 2 (pp 1, 2, 4 and, under tp 1, 8 with none), 1 + 6 under tp 4 (pp 1,
  // 2): 27 layouts. The three on one stage (tp 1, 2, 4: data parallel 8, 4, 2) each again under
  // Megatron-FSDP's optim_grads and optim_grads_params: 33, each without and with full checkpointing.
  BOOST_TEST(layouts.size() == 66u);
  int fsdp = 0;
  int fixed_ends = 0, counted = 0;
  for (const Layout& l : layouts) {
    const Layout& p = l;
    BOOST_TEST((p.framework == Framework::kMegatron));
    BOOST_TEST(p.sequence_parallel == (p.tensor > 1));
    BOOST_TEST(p.distributed_optimizer);
    BOOST_TEST((p.context == 1 && p.expert == 1));
    if (p.megatron_fsdp == MegatronFsdp::kOff) {
      BOOST_TEST((l.sharding == Sharding::kNoShard));
    } else {
      ++fsdp;
      BOOST_TEST(p.pipeline == 1);
      BOOST_TEST((l.sharding == (p.fsdp_shards_params() ? Sharding::kFullShard : Sharding::kShardGradOp)));
    }
    BOOST_TEST(base.n_gpus % p.model_parallel() == 0);
    std::vector<int64_t> chunks;
    BOOST_TEST(split_layers(model.n_layers, p, chunks).empty());
    if (p.first_stage_layers > 0) {
      ++fixed_ends;
      const bool pp2 =
          p.pipeline == 2 && p.virtual_stages == 4 && p.first_stage_layers == 8 && p.last_stage_layers == 4;
      const bool pp4 =
          p.pipeline == 4 && p.virtual_stages == 2 && p.first_stage_layers == 2 && p.last_stage_layers == 2;
      BOOST_TEST((pp2 || pp4));
    }
    if (p.account_for_embedding) {
      ++counted;
      BOOST_TEST((p.account_for_loss && p.pipeline == 2 && p.virtual_stages == 7));
    }
  }
  BOOST_TEST(counted == 2 * 3);
  BOOST_TEST(fsdp == 2 * 3 * 2);
  BOOST_TEST(fixed_ends == 2 * (3 + 2));  // pp 2 under the three tp, pp 4 under tp 1 and 2; x 2 checkpointing
  BOOST_TEST((layouts[0].tensor == 1 && layouts[0].pipeline == 1));  // tensor outermost
  BOOST_TEST((layouts.back().tensor == 4 && layouts.back().pipeline == 2));
  // A global batch of 4: data parallel 8 (tp 1, pp 1) does not divide it, and says so.
  base.global_batch = 4;
  std::vector<Rejection> rejected;
  BOOST_TEST(space.layouts(model, d, base, &rejected).size() == 60u);
  BOOST_TEST_REQUIRE(rejected.size() == 1u);
  BOOST_TEST(rejected[0].reason == "global batch 4 is not a multiple of data parallel 8");
  BOOST_TEST(rejected[0].count == 3);  // one layout under DDP and two strategies, before checkpointing
  // A fixed axis fixes it: tensor 2 leaves pipeline 1 (and its two strategies), 2 (six splits), 4
  // (three).
  base.global_batch = 16;
  space.asked.tensor = 2;
  BOOST_TEST(space.layouts(model, d, base).size() == 24u);
  space.asked.sequence_parallel = false;
  for (const Layout& l : space.layouts(model, d, base)) BOOST_TEST(!l.sequence_parallel);
  // Composer's space does not depend on the model.
  BOOST_TEST((SearchSpace{}.layouts(model, d, base) == SearchSpace{}.layouts()));
}

BOOST_AUTO_TEST_CASE(megatron_fixed_axes_that_leave_no_layout_say_why) {
  const ModelConfig& model = model_named("125m");
  const DeviceSpec d = load_device("h100_80gb");
  const CostParams params = load_shipped_profile("h100_80gb").params;
  SearchSpace space = megatron_space();
  space.asked.tensor = 8;  // 12 heads
  TrainConfig base = run_of(2048, 8, 16);
  base.micro_batch = 1;
  const SearchResult r = search(model, d, params, base, space, SearchGoal::kAllThatFit);
  BOOST_TEST(!r.found);
  BOOST_TEST_REQUIRE(r.rejections.size() == 1u);
  BOOST_TEST((r.rejections[0].kind == RejectionKind::kNoLayout));
  BOOST_TEST(contains(r.rejections[0].reason, "tensor parallel 8 does not divide the 12 attention heads"));
}

// The search's constraints, one by one (check_layout).
BOOST_AUTO_TEST_CASE(check_layout_names_the_broken_constraint) {
  const ModelConfig& model = model_named("7b");  // 32 heads, 32 layers
  TrainConfig cfg;
  cfg.seq_len = 2048;
  cfg.n_gpus = 16;
  cfg.global_batch = 32;
  cfg.layout.tensor = 2;
  BOOST_TEST(contains(check_layout(model, cfg), "composer runs FSDP without model parallelism"));
  cfg.layout.framework = Framework::kMegatron;
  BOOST_TEST(check_layout(model, cfg).empty());
  const auto why = [&](auto change) {
    TrainConfig c = cfg;
    change(c.layout, c);
    return check_layout(model, c);
  };
  BOOST_TEST(contains(why([](Layout& p, TrainConfig&) { p.tensor = 3; }), "tensor parallel 3 does not divide"));
  // The rule each breaks (the wording is the rule's: test_megatron, test_torchtitan).
  const auto rule = [&](auto change) {
    TrainConfig c = cfg;
    change(c.layout, c);
    return std::string(first_broken_layout_rule(model, c).rule);
  };
  BOOST_TEST(rule([](Layout& p, TrainConfig&) { p.pipeline = 64; }) == "pipeline-splits-layers");
  BOOST_TEST(contains(why([](Layout& p, TrainConfig&) { p.virtual_stages = 2; }), "virtual stages need pipeline"));
  BOOST_TEST(rule([](Layout& p, TrainConfig&) { p.context = 3; }) == "context-splits-sequence");
  BOOST_TEST(rule([](Layout& p, TrainConfig&) { p.expert = 2; }) == "expert-divides-experts");
  BOOST_TEST(contains(why([](Layout& p, TrainConfig&) { p.tensor = 1, p.sequence_parallel = true; }),
                      "sequence parallelism needs"));
  BOOST_TEST(contains(why([](Layout& p, TrainConfig&) { p.pipeline = 16; }), "= 32 does not divide the GPU count 16"));
  BOOST_TEST(contains(why([](Layout&, TrainConfig& c) { c.global_batch = 12; }), "not a multiple of data parallel 8"));
  BOOST_TEST(contains(why([](Layout&, TrainConfig& c) { c.micro_batch = 3; }), "micro-batch 3 does not divide the 4"));
}

namespace {

// A small mixture of experts (Mixtral's shape, narrowed): d 1024, 16 heads over 8 K/V heads, 8
// layers, 8 experts of SwiGLU width 1024, top 2.
ModelConfig small_moe() {
  ModelConfig m = test::llama(1024, 16, 8, 8, 3584, 32000);
  m.name = "small-moe";
  m.moe = {.experts = 8, .top_k = 2, .d_expert = 1024};
  return m;
}

template <typename Get>
std::vector<int64_t> values_of(const std::vector<Layout>& layouts, Get get) {
  std::vector<int64_t> v;
  for (const Layout& l : layouts)
    if (std::find(v.begin(), v.end(), get(l)) == v.end()) v.push_back(get(l));
  std::sort(v.begin(), v.end());
  return v;
}

// Megatron's search against the brute force over its layouts (kAllThatFit: the same configurations
// in the same order; kFastest: the same step time).
// Returns the search's kAllThatFit result.
SearchResult check_megatron_search(const ModelConfig& model, const DeviceSpec& d, const CostParams& params,
                                   const TrainConfig& base, const SearchSpace& space) {
  std::vector<Candidate> fitting;
  for (const Layout& l : space.layouts(model, d, base))
    for (int64_t mb = 1; mb <= with_layout(base, l).per_device_batch(); ++mb) {
      TrainConfig cfg = with_layout(base, l);
      cfg.micro_batch = mb;
      if (!check_layout(model, cfg).empty() || !check_config(model, d, params, cfg).empty()) continue;
      const Prediction p = predict(model, d, params, cfg);
      if (p.fits()) fitting.push_back({cfg, p});
    }
  const SearchResult all = search(model, d, params, base, space, SearchGoal::kAllThatFit);
  BOOST_TEST_REQUIRE(all.fitting.size() == fitting.size());
  for (size_t i = 0; i < fitting.size(); ++i) {
    BOOST_TEST((all.fitting[i].cfg.layout == fitting[i].cfg.layout));
    BOOST_TEST(all.fitting[i].cfg.micro_batch == fitting[i].cfg.micro_batch);
  }
  const SearchResult fast = search(model, d, params, base, space, SearchGoal::kFastest);
  BOOST_TEST(fast.found == !fitting.empty());
  if (fast.found) {
    const auto best = std::min_element(fitting.begin(), fitting.end(), [](const Candidate& a, const Candidate& b) {
      return a.prediction.step_s < b.prediction.step_s;
    });
    BOOST_TEST(fast.best_prediction.step_s == best->prediction.step_s);
  }
  return all;
}

}  // namespace

// Megatron's search against the brute force over its layouts and the micro-batches dividing the
// per-replica batch: the same configurations fit, in the same order, and the fastest is the same.
BOOST_AUTO_TEST_CASE(megatron_searches_as_the_brute_force_does) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const DeviceSpec d = load_device("h100_80gb");
  const CostParams params = load_shipped_profile("h100_80gb").params;
  const SearchSpace space = megatron_space();
  for (const char* name : {"125m", "1b", "7b"}) {
    BOOST_TEST_CONTEXT(name) {
      const ModelConfig& model = catalog.get(name);
      TrainConfig base = run_of(2048, 16, 96);
      base.micro_batch = 1;
      const SearchResult all = check_megatron_search(model, d, params, base, space);
      for (const Candidate& c : all.fitting) BOOST_TEST(c.cfg.per_device_batch() % c.cfg.micro_batch == 0);
    }
  }
}

// Context parallel degrees are searched from 8192 tokens up: powers of two leaving each rank at
// least 4096 tokens and fitting beside tensor parallelism. MPT 7b (32 heads, 32 layers) on 16 H100s.
BOOST_AUTO_TEST_CASE(megatron_searches_context_parallelism_on_long_sequences) {
  const ModelConfig& model = model_named("7b");
  const DeviceSpec d = load_device("h100_80gb");
  SearchSpace space = megatron_space();
  TrainConfig base = run_of(4096, 16, 16);
  const auto cp_of = [](const Layout& p) { return p.context; };
  BOOST_TEST((values_of(space.layouts(model, d, base), cp_of) == std::vector<int64_t>{1}));
  base.seq_len = 8192;
  BOOST_TEST((values_of(space.layouts(model, d, base), cp_of) == std::vector<int64_t>{1, 2}));
  base.seq_len = 32768;
  const std::vector<Layout> layouts = space.layouts(model, d, base);
  BOOST_TEST((values_of(layouts, cp_of) == std::vector<int64_t>{1, 2, 4, 8}));
  for (const Layout& l : layouts) {
    BOOST_TEST(l.expert == 1);  // dense
    BOOST_TEST(base.n_gpus % (l.tensor * l.context * l.pipeline) == 0);
  }
  // A fixed degree is taken as given.
  space.asked.context = 16;
  BOOST_TEST((values_of(space.layouts(model, d, base), cp_of) == std::vector<int64_t>{16}));
}

// Expert parallel degrees: the divisors of the experts whose groups (expert tensor x expert
// parallel ranks) divide a stage's tensor x data x context ranks; only for a mixture of experts.
// Expert tensor parallel: tp's (0), and 1 too where tp > 1. Mixtral (8 experts) on 8 H100s.
BOOST_AUTO_TEST_CASE(megatron_searches_expert_parallelism_for_mixtures_of_experts) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const DeviceSpec d = load_device("h100_80gb");
  SearchSpace space = megatron_space();
  const TrainConfig base = run_of(4096, 8, 64);
  const auto ep_of = [](const Layout& p) { return p.expert; };
  const std::vector<Layout> layouts = space.layouts(catalog.get("mixtral-8x7b"), d, base);
  BOOST_TEST((values_of(layouts, ep_of) == std::vector<int64_t>{1, 2, 4, 8}));
  size_t whole_experts_under_tp = 0;
  for (const Layout& l : layouts) {
    const Layout& p = l;
    const int64_t stage_ranks = base.n_gpus / p.model_parallel() * p.context * p.tensor;
    BOOST_TEST(stage_ranks % (p.expert_tensor_degree() * p.expert) == 0);
    if (p.expert_tensor == 0) BOOST_TEST((base.n_gpus / p.model_parallel() * p.context) % p.expert == 0);
    BOOST_TEST((p.expert_tensor == 0 || (p.expert_tensor == 1 && p.tensor > 1)));
    if (p.expert_tensor == 1) ++whole_experts_under_tp;
    BOOST_TEST(p.sequence_parallel == (p.tensor > 1));  // Megatron needs it for MoE with tp
  }
  BOOST_TEST(whole_experts_under_tp > 0u);
  // tp 8 leaves one data-parallel rank: ep 8 only with the experts whole (etp 1) across the tensor ranks.
  space.asked.tensor = 8;
  const std::vector<Layout> tp8 = space.layouts(catalog.get("mixtral-8x7b"), d, base);
  BOOST_TEST(
      std::any_of(tp8.begin(), tp8.end(), [](const Layout& l) { return l.expert == 8 && l.expert_tensor == 1; }));
  BOOST_TEST(
      std::none_of(tp8.begin(), tp8.end(), [](const Layout& l) { return l.expert > 1 && l.expert_tensor == 0; }));
  space.asked.tensor.reset();
  BOOST_TEST((values_of(space.layouts(catalog.get("7b"), d, base), ep_of) == std::vector<int64_t>{1}));
}

BOOST_AUTO_TEST_CASE(megatron_searches_context_and_expert_parallelism_as_the_brute_force_does) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const DeviceSpec d = load_device("h100_80gb");
  const CostParams params = load_shipped_profile("h100_80gb").params;
  SearchSpace space = megatron_space();
  space.checkpointing = {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kFull};
  TrainConfig base;
  base.n_gpus = 8;
  base.micro_batch = 1;
  BOOST_TEST_CONTEXT("125m at 16384") {
    base.seq_len = 16384;
    base.global_batch = 16;
    check_megatron_search(catalog.get("125m"), d, params, base, space);
  }
  BOOST_TEST_CONTEXT("small MoE at 2048") {
    base.seq_len = 2048;
    base.global_batch = 32;
    check_megatron_search(small_moe(), d, params, base, space);
  }
}
