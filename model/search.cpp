#include "model/search.hpp"

#include <algorithm>
#include <tuple>

namespace tpsim {

TrainConfig with_layout(TrainConfig base, const Layout& layout) {
  base.sharding = layout.sharding;
  base.checkpointing = layout.checkpointing;
  return base;
}

std::vector<Layout> SearchSpace::layouts() const {
  std::vector<Layout> out;
  for (Sharding sharding : shardings)
    for (Checkpointing ckpt : checkpointing) out.push_back({sharding, ckpt});
  return out;
}

namespace {

// Within one node HYBRID_SHARD shards over the node and has no replicas to reduce across: it
// predicts exactly as FULL_SHARD (model/parallelism.cpp).
bool equivalent(const Layout& a, const Layout& b, const TrainConfig& base, const DeviceSpec& device) {
  const auto full_like = [](Sharding s) { return s == Sharding::kFullShard || s == Sharding::kHybridShard; };
  return a.checkpointing == b.checkpointing && full_like(a.sharding) &&
         full_like(b.sharding) && base.n_gpus <= device.gpus_per_node;
}

// The largest m in [lo, hi] with ok(m), for ok true up to some point and false after it; lo - 1 when
// ok(lo) is false. Gallops up from lo, then bisects: the probes stay within twice the answer, where
// a search times configurations anyway.
template <typename Ok>
int64_t last_ok(int64_t lo, int64_t hi, Ok ok) {
  if (lo > hi || !ok(lo)) return lo - 1;
  int64_t good = lo, bad = hi + 1;
  for (int64_t step = 1; good + step < bad; step *= 2) {
    if (!ok(good + step)) {
      bad = good + step;
      break;
    }
    good += step;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (ok(mid) ? good : bad) = mid;
  }
  return good;
}

Rejection rejection(const Layout& layout, RejectionKind kind, int64_t micro_batch = 0, int64_t per_device_batch = 0,
                    double peak_bytes = 0) {
  Rejection r;
  r.layout = layout;
  r.kind = kind;
  r.micro_batch = micro_batch;
  r.per_device_batch = per_device_batch;
  r.peak_bytes = peak_bytes;
  return r;
}

class Searcher {
 public:
  Searcher(const ModelConfig& model, const DeviceSpec& device, const CostParams& params, const SearchSpace& space,
           SearchGoal goal)
      : model_(model), device_(device), params_(params), space_(space), goal_(goal), evaluator_(model, device, params) {}

  SearchResult run(const TrainConfig& base);

 private:
  void search_layout(const TrainConfig& cfg, size_t index);
  void search_listed(TrainConfig cfg, size_t index);
  int64_t undominated_from(size_t index) const;
  bool valid(const TrainConfig& cfg) const { return check_config(model_, device_, params_, cfg).empty(); }
  // Memory of cfg; records it as the leanest when it is. True when it fits.
  bool fits(const TrainConfig& cfg, int order, int64_t position, double* peak = nullptr);
  void time(const TrainConfig& cfg, int order, int64_t position);
  void reject(Rejection r) { result_.rejections.push_back(std::move(r)); }

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  const SearchSpace& space_;
  const SearchGoal goal_;
  Evaluator evaluator_;
  std::vector<Layout> layouts_;
  std::vector<int64_t> fit_upto_;  // per layout: the micro-batches 1..this were timed and fit
  SearchResult result_;
  // Equal step times (or peaks) keep the configuration met first: layouts in order, then positions.
  using Rank = std::tuple<double, int, int64_t>;
  Rank best_rank_{}, leanest_rank_{};
};

SearchResult Searcher::run(const TrainConfig& base) {
  layouts_ = space_.layouts();
  fit_upto_.assign(layouts_.size(), 0);
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const Layout& layout = layouts_[i];
    bool skipped = false;
    for (size_t j = 0; j < i && !skipped && goal_ == SearchGoal::kFastest; ++j) {
      if (!equivalent(layout, layouts_[j], base, device_)) continue;
      Rejection r = rejection(layout, RejectionKind::kEquivalent);
      r.same_as = layouts_[j];
      reject(r);
      skipped = true;
    }
    if (skipped) continue;
    TrainConfig cfg = with_layout(base, layout);
    cfg.micro_batch = 1;
    if (std::string why = check_config(model_, device_, params_, cfg); !why.empty()) {
      Rejection r = rejection(layout, RejectionKind::kInvalid);
      r.reason = std::move(why);
      reject(std::move(r));
      continue;
    }
    if (space_.micro_batches.empty()) search_layout(cfg, i);
    else search_listed(cfg, i);
  }
  if (!result_.found && result_.has_leanest) result_.leanest_prediction = evaluator_.predict(result_.leanest);
  return std::move(result_);
}

// Every micro-batch from 1 up: memory bounds them (rule 1), then the undominated ones are timed.
void Searcher::search_layout(const TrainConfig& layout_cfg, size_t index) {
  const int order = static_cast<int>(index);
  const int64_t per_device = layout_cfg.per_device_batch();
  TrainConfig cfg = layout_cfg;
  double first_peak = 0;
  const int64_t largest = last_ok(1, per_device, [&](int64_t mb) {
    cfg.micro_batch = mb;
    return valid(cfg) && fits(cfg, order, mb - 1, mb == 1 ? &first_peak : nullptr);
  });
  fit_upto_[index] = largest;
  if (largest == 0) {
    reject(rejection(layouts_[index], RejectionKind::kOutOfMemory, 1, per_device, first_peak));
    return;
  }
  if (largest < per_device) reject(rejection(layouts_[index], RejectionKind::kOutOfMemoryAbove, largest, per_device));
  for (int64_t mb = undominated_from(index); mb <= largest; ++mb) {
    cfg.micro_batch = mb;
    time(cfg, order, mb - 1);
  }
}

// The micro-batches the space lists, each on its own.
void Searcher::search_listed(TrainConfig cfg, size_t index) {
  const int order = static_cast<int>(index);
  for (size_t k = 0; k < space_.micro_batches.size(); ++k) {
    cfg.micro_batch = space_.micro_batches[k];
    const auto position = static_cast<int64_t>(k);
    if (cfg.micro_batch > cfg.per_device_batch()) {
      reject(rejection(layouts_[index], RejectionKind::kMicroBatchTooLarge, cfg.micro_batch, cfg.per_device_batch()));
      continue;
    }
    double peak = 0;
    if (!valid(cfg)) continue;
    if (!fits(cfg, order, position, &peak)) {
      reject(rejection(layouts_[index], RejectionKind::kOutOfMemory, cfg.micro_batch, cfg.per_device_batch(), peak));
      continue;
    }
    time(cfg, order, position);
  }
}

// What a kind of checkpointing runs again in the backward, in order: each recomputes a superset of
// the one before (none; selective: the attention core; full: the whole block's forward).
int recompute_order(Checkpointing c) {
  switch (c) {
    case Checkpointing::kNone: return 0;
    case Checkpointing::kSelective: return 1;
    case Checkpointing::kFull: return 2;
  }
  return 0;
}

// Rule 2: with checkpointing, the micro-batches that fit under an earlier layout of the same sharding
// that recomputes less (none before selective, none or selective before full) are slower or equal
// there, and equal goes to the earlier layout. Such an earlier layout's own dominated micro-batches
// were skipped for the same reason, so the chain ends at one that was timed.
int64_t Searcher::undominated_from(size_t index) const {
  const Layout& layout = layouts_[index];
  if (goal_ != SearchGoal::kFastest || layout.checkpointing == Checkpointing::kNone) return 1;
  int64_t from = 1;
  for (size_t j = 0; j < index; ++j)
    if (layouts_[j].sharding == layout.sharding &&
        recompute_order(layouts_[j].checkpointing) < recompute_order(layout.checkpointing))
      from = std::max(from, fit_upto_[j] + 1);
  return from;
}

bool Searcher::fits(const TrainConfig& cfg, int order, int64_t position, double* peak) {
  const MemoryBreakdown m = evaluator_.memory(cfg);
  if (peak) *peak = m.peak_bytes;
  const Rank lean{m.peak_bytes, order, position};
  if (!result_.has_leanest || lean < leanest_rank_) {
    result_.leanest = cfg;
    leanest_rank_ = lean;
    result_.has_leanest = true;
  }
  return evaluator_.fits(m);
}

void Searcher::time(const TrainConfig& cfg, int order, int64_t position) {
  Prediction p = evaluator_.predict(cfg);
  ++result_.evaluated;
  const Rank fast{p.step_s, order, position};
  if (!result_.found || fast < best_rank_) {
    result_.best = cfg;
    result_.best_prediction = p;
    best_rank_ = fast;
    result_.found = true;
  }
  if (goal_ == SearchGoal::kAllThatFit) result_.fitting.push_back({cfg, std::move(p)});
}

}  // namespace

SearchResult search(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                    const TrainConfig& base, const SearchSpace& space, SearchGoal goal) {
  return Searcher(model, device, params, space, goal).run(base);
}

int64_t largest_fitting_micro_batch(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                                    const TrainConfig& cfg) {
  Evaluator evaluator(model, device, params);
  TrainConfig c = cfg;
  return std::max<int64_t>(0, last_ok(1, cfg.per_device_batch(), [&](int64_t mb) {
    c.micro_batch = mb;
    return check_config(model, device, params, c).empty() && evaluator.fits(evaluator.memory(c));
  }));
}

}  // namespace tpsim
