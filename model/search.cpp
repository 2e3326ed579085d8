#include "model/search.hpp"

namespace tpsim {

SearchResult search_fastest(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                            const TrainConfig& base, const SearchSpace& space) {
  SearchResult r;
  std::vector<int64_t> micro = space.micro_batches;
  if (micro.empty())
    for (int64_t b = 1; b <= base.per_device_batch(); ++b) micro.push_back(b);
  bool have_leanest = false;
  for (Sharding sharding : space.shardings) {
    // HYBRID_SHARD differs from FULL_SHARD only across nodes.
    if (sharding == Sharding::kHybridShard && base.n_gpus <= device.gpus_per_node) continue;
    for (bool ckpt : space.checkpointing) {
      for (int64_t mb : micro) {
        TrainConfig cfg = base;
        cfg.micro_batch = mb;
        cfg.activation_checkpointing = ckpt;
        cfg.sharding = sharding;
        if (mb > cfg.per_device_batch()) continue;
        if (!check_config(model, device, params, cfg).empty()) continue;
        const Prediction p = predict(model, device, params, cfg);
        ++r.evaluated;
        if (!have_leanest || p.memory.peak_bytes < r.leanest_prediction.memory.peak_bytes) {
          r.leanest = cfg;
          r.leanest_prediction = p;
          have_leanest = true;
        }
        if (p.fits() && (!r.found || p.step_s < r.best_prediction.step_s)) {
          r.best = cfg;
          r.best_prediction = p;
          r.found = true;
        }
      }
    }
  }
  return r;
}

}  // namespace tpsim
