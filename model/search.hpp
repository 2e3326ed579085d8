// The search a sweep or a plan runs for one (model, sequence length, GPU count, device): every
// micro-batch, checkpointing choice and sharding strategy, keeping the fastest that fits.
#pragma once

#include <cstdint>
#include <vector>

#include "model/simulator.hpp"

namespace tpsim {

struct SearchSpace {
  std::vector<int64_t> micro_batches;     // empty: every value 1..per-device batch
  std::vector<bool> checkpointing = {false, true};
  std::vector<Sharding> shardings = {Sharding::kFullShard, Sharding::kShardGradOp, Sharding::kNoShard,
                                     Sharding::kHybridShard};
};

struct SearchResult {
  bool found = false;             // some configuration fits in memory
  TrainConfig best;               // the fastest that fits
  Prediction best_prediction;
  TrainConfig leanest;            // the configuration with the smallest predicted peak memory
  Prediction leanest_prediction;  // (what to report when nothing fits)
  int64_t evaluated = 0;
};

// `base` fixes seq_len, global_batch, n_gpus, precision and mp_mode; the search varies the rest.
// Configurations check_config refuses (HYBRID_SHARD on a partial node, say) are skipped.
SearchResult search_fastest(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                            const TrainConfig& base, const SearchSpace& space);

}  // namespace tpsim
