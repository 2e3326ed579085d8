#include "model/search.hpp"

#include <tuple>

namespace tpsim {

SearchResult search_fastest(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                            const TrainConfig& base, const SearchSpace& space) {
  SearchResult r;
  // Without a list, every micro-batch from 1 up, until one does not fit: memory grows with the
  // micro-batch, so none above it fits either (and a huge global batch is not scanned to its end).
  const bool every = space.micro_batches.empty();
  const int64_t count = every ? base.per_device_batch() : static_cast<int64_t>(space.micro_batches.size());

  // The (sharding, checkpointing) variants, each scanning the micro-batches on its own. The scan
  // goes micro-batch by micro-batch across all variants, so that the Evaluator costs the ops of
  // each micro-batch once for all of them.
  struct Variant {
    Sharding sharding;
    bool ckpt;
    int order;          // position in the space's order: ties go to the earlier variant
    bool done = false;  // its scan has stopped
  };
  std::vector<Variant> variants;
  for (Sharding sharding : space.shardings) {
    // HYBRID_SHARD differs from FULL_SHARD only across nodes.
    if (sharding == Sharding::kHybridShard && base.n_gpus <= device.gpus_per_node) continue;
    for (bool ckpt : space.checkpointing) variants.push_back({sharding, ckpt, static_cast<int>(variants.size())});
  }

  Evaluator evaluator(model, device, params);
  // Equal step times (or peaks) keep the configuration met first in the order of the space:
  // shardings, then checkpointing, then micro-batches.
  using Rank = std::tuple<double, int, int64_t>;
  Rank best_rank{}, leanest_rank{};
  bool have_leanest = false;
  size_t running = variants.size();
  for (int64_t i = 0; i < count && running > 0; ++i) {
    const int64_t mb = every ? i + 1 : space.micro_batches[static_cast<size_t>(i)];
    for (Variant& v : variants) {
      if (v.done) continue;
      TrainConfig cfg = base;
      cfg.micro_batch = mb;
      cfg.activation_checkpointing = v.ckpt;
      cfg.sharding = v.sharding;
      if (mb > cfg.per_device_batch()) continue;
      const auto stop = [&] {
        if (every) {
          v.done = true;
          --running;
        }
      };
      if (!check_config(model, device, params, cfg).empty()) {
        stop();  // what it refuses does not depend on the micro-batch, or refuses all above
        continue;
      }
      const Prediction p = evaluator.predict(cfg);
      ++r.evaluated;
      const Rank lean{p.memory.peak_bytes, v.order, i};
      if (!have_leanest || lean < leanest_rank) {
        r.leanest = cfg;
        r.leanest_prediction = p;
        leanest_rank = lean;
        have_leanest = true;
      }
      if (!p.fits()) {
        stop();
        continue;
      }
      const Rank fast{p.step_s, v.order, i};
      if (!r.found || fast < best_rank) {
        r.best = cfg;
        r.best_prediction = p;
        best_rank = fast;
        r.found = true;
      }
    }
  }
  return r;
}

}  // namespace tpsim
