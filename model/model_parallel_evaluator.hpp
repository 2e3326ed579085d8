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

  // A new costing for cfg, its key and its rank placement (model_parallel_layout) set.
  Costs& start_costs(const TrainConfig& cfg) {
    Costs& c = memo_.start(cfg);
    c.layout = model_parallel_layout(cfg.layout, cfg.n_gpus, device_.gpus_per_node);
    return c;
  }

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  CostModel cost_;
  RecentCosts<Costs> memo_;
  std::vector<double> fwd_s_, bwd_s_;  // per model chunk, reused
  PipelineSimulator pipeline_;         // its buffers reused
};

}  // namespace tpsim
