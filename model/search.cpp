#include "model/search.hpp"

namespace tpsim {

SearchResult search_fastest(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                            const TrainConfig& base, const SearchSpace& space) {
  SearchResult r;
  // Without a list, every micro-batch from 1 up, until one does not fit: memory grows with the
  // micro-batch, so none above it fits either (and a huge global batch is not scanned to its end).
  const bool every = space.micro_batches.empty();
  const int64_t count = every ? base.per_device_batch() : static_cast<int64_t>(space.micro_batches.size());
  bool have_leanest = false;
  for (Sharding sharding : space.shardings) {
    // HYBRID_SHARD differs from FULL_SHARD only across nodes.
    if (sharding == Sharding::kHybridShard && base.n_gpus <= device.gpus_per_node) continue;
    for (bool ckpt : space.checkpointing) {
      for (int64_t i = 0; i < count; ++i) {
        const int64_t mb = every ? i + 1 : space.micro_batches[static_cast<size_t>(i)];
        TrainConfig cfg = base;
        cfg.micro_batch = mb;
        cfg.activation_checkpointing = ckpt;
        cfg.sharding = sharding;
        if (mb > cfg.per_device_batch()) continue;
        if (!check_config(model, device, params, cfg).empty()) {
          if (every) break;  // what it refuses does not depend on the micro-batch, or refuses all above
          continue;
        }
        const Prediction p = predict(model, device, params, cfg);
        ++r.evaluated;
        if (!have_leanest || p.memory.peak_bytes < r.leanest_prediction.memory.peak_bytes) {
          r.leanest = cfg;
          r.leanest_prediction = p;
          have_leanest = true;
        }
        if (!p.fits()) {
          if (every) break;
          continue;
        }
        if (!r.found || p.step_s < r.best_prediction.step_s) {
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
