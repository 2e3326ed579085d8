// What Megatron-Core's and torchtitan's evaluators share (model/megatron.hpp, model/torchtitan.hpp):
// the model, device and profile they cost against, the cost model, their last few costings, and the
// pipeline simulator and per-chunk buffers each prediction reuses.
#pragma once

#include <vector>

#include "model/cost.hpp"
#include "model/framework.hpp"
#include "model/parallelism.hpp"
#include "model/pipeline.hpp"
#include "model/recent_costs.hpp"

namespace tpsim {

// `Costs` is the framework's costing of one layout (a `key` and a `layout` among its members); it
// may be incomplete where the evaluator is declared, and must be complete where the derived
// evaluator's constructor and destructor are defined (RecentCosts).
template <class Costs>
class ModelParallelEvaluator : public FrameworkEvaluator {
 protected:
  ModelParallelEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params)
      : model_(model), device_(device), params_(params), cost_(device, params) {}

  // The costing of cfg's layout: one of the last few made (RecentCosts), or a new one, its rank
  // placement (model_parallel_layout) set before the framework's cost_layout fills it in.
  const Costs& costs(const TrainConfig& cfg) {
    if (const Costs* done = memo_.find(cfg)) return *done;
    Costs& c = memo_.start(cfg);
    c.layout = model_parallel_layout(cfg.layout, cfg.n_gpus, device_.gpus_per_node);
    cost_layout(c, cfg);
    memo_.commit();
    return c;
  }

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  CostModel cost_;
  RecentCosts<Costs> memo_;
  std::vector<double> fwd_s_, bwd_s_;  // per model chunk, reused
  PipelineSimulator pipeline_;         // its buffers reused

 private:
  virtual void cost_layout(Costs& c, const TrainConfig& cfg) = 0;
};

}  // namespace tpsim
