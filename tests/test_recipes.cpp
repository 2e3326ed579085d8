// Published training recipes (docs/plan.md, "Published recipes"): each one's layout is in the space
// plan searches, and plan's first choice is at least as fast as the recipe, as tpsim predicts both.
// The recipes are NVIDIA's (Megatron-Bridge's performance recipes, NeMo 2's recommended configs and
// performance summary); each row names its source in docs/plan.md.
#define BOOST_TEST_MODULE recipes
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "common.hpp"
#include "model/framework.hpp"
#include "model/layout.hpp"
#include "model/plan.hpp"
#include "model/search.hpp"
#include "model/simulator.hpp"
#include "model/units.hpp"

using namespace tpsim;

namespace {

struct Recipe {
  const char* id;  // the row of docs/plan.md
  const char* model;
  const char* device;
  int64_t gpus, seq, global_batch, micro_batch;
  int64_t tp, pp, vp, cp, ep, etp;  // etp 0: tp's
  Precision precision;
  bool embedding_and_loss_as_layers;       // account_for_embedding/loss_in_pipeline_split
  bool fits;                               // in tpsim's memory model, without checkpointing
  MegatronFsdp fsdp = MegatronFsdp::kOff;  // Megatron-FSDP's strategy (use_megatron_fsdp)
};

// The megatron recipes. Both sources run the gradients reduced in bf16 (Megatron-Bridge's
// _benchmark_common and _perf_precision set grad_reduce_in_fp32 = False), which every row here
// asks of the plan too.
const Recipe kRecipes[] = {
    {"MB4", "llama-3.1-405b", "h100_80gb", 1024, 8192, 1536, 1, 8, 8, 8, 2, 1, 0, Precision::kAmpFp8, true, true},
    {"N5", "llama-3.1-405b", "h100_80gb", 1024, 8192, 512, 1, 8, 8, 8, 2, 1, 0, Precision::kAmpBf16, true, true},
    {"MB20", "llama-3.1-405b", "gb200", 256, 8192, 1536, 1, 4, 16, 4, 1, 1, 0, Precision::kAmpFp8, true, false},
    {"MB34", "llama-3-70b", "h100_80gb", 64, 8192, 256, 1, 4, 4, 5, 2, 1, 0, Precision::kAmpBf16, false, true},
    {"MB35", "llama-3-70b", "h100_80gb", 64, 8192, 256, 1, 4, 8, 5, 1, 1, 0, Precision::kAmpFp8, false, true},
    {"N42", "llama-3-70b", "b200", 64, 8192, 128, 1, 2, 4, 5, 2, 1, 0, Precision::kAmpBf16, false, true},
    {"MB59", "llama-3-8b", "h100_80gb", 8, 8192, 128, 1, 1, 1, 1, 2, 1, 0, Precision::kAmpBf16, false, true},
    {"MB60", "llama-3-8b", "h100_80gb", 8, 8192, 128, 1, 1, 1, 1, 1, 1, 0, Precision::kAmpFp8, false, true,
     MegatronFsdp::kOptimGradsParams},
    {"U6", "llama-2-13b", "h100_80gb", 16, 4096, 128, 1, 1, 4, 10, 1, 1, 0, Precision::kAmpFp8, false, true},
    {"U7", "llama-2-70b", "h100_80gb", 64, 4096, 128, 1, 4, 4, 20, 1, 1, 0, Precision::kAmpFp8, false, true},
    {"U3", "megatron-gpt-175b", "h100_80gb", 128, 2048, 256, 1, 4, 8, 6, 1, 1, 0, Precision::kAmpFp8, false, true},
    {"N36", "megatron-gpt-175b", "b200", 128, 2048, 256, 2, 4, 4, 12, 1, 1, 0, Precision::kAmpBf16, false, true},
    {"N10", "mixtral-8x7b", "h100_80gb", 64, 4096, 256, 1, 1, 4, 8, 1, 8, 0, Precision::kAmpFp8, false, true},
    {"N34", "qwen3-30b-a3b", "h100_80gb", 16, 4096, 512, 1, 1, 2, 24, 1, 8, 0, Precision::kAmpBf16, false, true},
    {"N35", "qwen3-235b-a22b", "h100_80gb", 256, 4096, 2048, 1, 2, 8, 4, 1, 32, 1, Precision::kAmpBf16, true, true},
    {"N65", "qwen3-235b-a22b", "b200", 64, 4096, 1024, 1, 1, 8, 12, 1, 8, 0, Precision::kAmpBf16, true, true},
};

// The shipped catalogue and the literature's Megatron GPT models (GPT-3 175B).
struct Shipped {
  ModelCatalog catalog = [] {
    ModelCatalog c = ModelCatalog::load_default();
    std::ifstream in(std::string(TPSIM_DATA) + "/models/literature_megatron.yaml");
    const std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    BOOST_TEST_REQUIRE(test::add_models(c, yaml).empty());
    return c;
  }();
};

const Shipped& shipped() {
  static const Shipped s;
  return s;
}

LayoutRequest asked() {
  LayoutRequest a;
  a.framework = Framework::kMegatron;
  a.grad_reduce_bf16 = true;
  return a;
}

TrainConfig base_of(const Recipe& r) {
  TrainConfig base;
  base.seq_len = r.seq;
  base.n_gpus = r.gpus;
  base.global_batch = r.global_batch;
  base.precision = r.precision;
  return base;
}

Layout layout_of(const Recipe& r) {
  Layout l = fixed_layout(asked());
  l.tensor = r.tp, l.pipeline = r.pp, l.virtual_stages = r.vp, l.context = r.cp, l.expert = r.ep;
  l.set_expert_tensor(r.etp > 0 ? r.etp : r.tp);
  l.sequence_parallel = r.tp > 1;
  l.account_for_embedding = l.account_for_loss = r.embedding_and_loss_as_layers;
  set_megatron_fsdp(l, r.fsdp);
  return l;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_published_recipe_is_in_the_space_plan_searches) {
  for (const Recipe& r : kRecipes) {
    BOOST_TEST_CONTEXT(r.id << " " << r.model << " on " << r.gpus << " x " << r.device) {
      const ModelConfig& model = shipped().catalog.get(r.model);
      const DeviceSpec device = load_device(r.device);
      SearchSpace space;
      space.asked = asked();
      const std::vector<Layout> layouts = space.layouts(model, device, base_of(r));
      const Layout recipe = layout_of(r);
      BOOST_TEST(std::count(layouts.begin(), layouts.end(), recipe) == 1);
    }
  }
}

BOOST_AUTO_TEST_CASE(plan_picks_a_layout_at_least_as_fast_as_each_published_recipe) {
  for (const Recipe& r : kRecipes) {
    BOOST_TEST_CONTEXT(r.id << " " << r.model << " on " << r.gpus << " x " << r.device) {
      const ModelConfig& model = shipped().catalog.get(r.model);
      const DeviceSpec device = load_device(r.device);
      const CostParams params = load_shipped_profile(r.device).params;
      TrainConfig recipe = with_layout(base_of(r), layout_of(r));
      recipe.micro_batch = r.micro_batch;
      BOOST_TEST_REQUIRE(check_config(model, device, params, recipe) == "");
      const Prediction p = predict(model, device, params, recipe);
      BOOST_TEST(p.fits() == r.fits, "peak " << p.memory.peak_bytes / kGiB << " GiB");
      PlanQuery q;
      q.model = &model;
      q.devices = {{&device, &params, std::nullopt}};
      q.gpu_counts = {r.gpus};
      q.seq_len = r.seq;
      q.precision = r.precision;
      q.global_batch = r.global_batch;
      q.space.asked = asked();
      q.min_headroom_bytes = 0;  // what fits, as the recipe does
      const PlanResult plan = plan_runs(q);
      BOOST_TEST_REQUIRE(!plan.ranked.empty());
      const PlannedConfig& first = plan.top.chosen;
      BOOST_TEST(first.cfg.global_batch == r.global_batch);  // the recipe's batch, kept
      if (r.fits) BOOST_TEST(first.prediction.step_s <= p.step_s * (1 + 1e-12));
      BOOST_TEST_MESSAGE(r.id << ": recipe " << p.tokens_per_s / static_cast<double>(r.gpus) << " tok/s/GPU; plan "
                              << first.prediction.tokens_per_s / static_cast<double>(r.gpus));
    }
  }
}
