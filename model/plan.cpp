#include "model/plan.hpp"

#include <algorithm>
#include <cmath>

namespace tpsim {

namespace {

double score_of(const Prediction& p, int64_t n_gpus, Objective objective, double price_per_gpu_hour) {
  const double seconds_per_token = 1.0 / p.tokens_per_s;
  return objective == Objective::kCost ? seconds_per_token * static_cast<double>(n_gpus) * price_per_gpu_hour / 3600.0
                                       : seconds_per_token;
}

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The degrees a run sets beyond plain data parallelism: each model-parallel one above 1, an expert
// tensor parallel degree other than tp's, and an HSDP mesh (its shard and replicate degrees, set
// together).
int model_parallel_degrees(const Layout& p) {
  int n = 0;
  for (int64_t d : {p.tensor, p.pipeline, p.virtual_stages, p.context, p.expert}) n += d > 1 ? 1 : 0;
  return n + (p.expert_tensor > 0 ? 1 : 0) + (p.shard_degree > 0 && p.replicate_degree > 0 ? 1 : 0);
}

// Under twice the margin: a second error of the memory model's size would eat the rest.
bool tight(const PlannedConfig& c) { return c.headroom_bytes < 2.0 * c.margin_bytes; }

// The first robustness rule that puts `a` before `b` (rule 3 of plan.hpp), or kFastest when none
// tells them apart (nor puts b first): then the score decides.
PickRule rule_before(const PlannedConfig& a, const PlannedConfig& b, bool& a_first) {
  a_first = false;
  const auto decide = [&](bool differ, bool a_wins) {
    if (!differ) return false;
    a_first = a_wins;
    return true;
  };
  if (decide(tight(a) != tight(b), !tight(a))) return PickRule::kHeadroom;
  if (tight(a) && decide(a.headroom_bytes != b.headroom_bytes, a.headroom_bytes > b.headroom_bytes))
    return PickRule::kHeadroom;
  const bool pa = power_of_two(a.cfg.micro_batch), pb = power_of_two(b.cfg.micro_batch);
  if (decide(pa != pb, pa)) return PickRule::kPowerOfTwoMicroBatch;
  const int ca = static_cast<int>(a.cfg.layout.checkpointing), cb = static_cast<int>(b.cfg.layout.checkpointing);
  if (decide(ca != cb, ca < cb)) return PickRule::kLessCheckpointing;
  const int da = model_parallel_degrees(a.cfg.layout), db = model_parallel_degrees(b.cfg.layout);
  if (decide(da != db, da < db)) return PickRule::kFewerDegrees;
  return PickRule::kFastest;
}

bool robust_before(const PlannedConfig& a, const PlannedConfig& b) {
  bool a_first = false;
  if (rule_before(a, b, a_first) != PickRule::kFastest) return a_first;
  return a.score < b.score;
}

// Rule 1 on one search's configurations, then scored.
void add_fitting(const PlanQuery& q, const PlanDevice& device, int64_t n_gpus, std::vector<Candidate>& fitting,
                 PlanResult& out) {
  const double margin =
      q.min_headroom_bytes ? *q.min_headroom_bytes : kDefaultHeadroomFraction * device.spec->memory_bytes;
  HeadroomDrop drop{device.spec, n_gpus, 0, margin, 0};
  for (Candidate& c : fitting) {
    const double headroom = c.prediction.capacity_bytes - c.prediction.memory.peak_bytes;
    if (headroom < margin) {
      drop.best_headroom_bytes = drop.count == 0 ? headroom : std::max(drop.best_headroom_bytes, headroom);
      ++drop.count;
      continue;
    }
    const double score = score_of(c.prediction, n_gpus, q.objective, device.price_per_gpu_hour);
    const RelativeInterval i =
        device.interval ? interval_at(*device.interval, domain_point(*q.model, c.cfg)) : RelativeInterval{};
    out.ranked.push_back(
        {device.spec, c.cfg, c.prediction, score, score * (1.0 + i.p10), score * (1.0 + i.p90), headroom, margin});
  }
  if (drop.count > 0) out.dropped.push_back(drop);
}

void plan_point(const PlanQuery& q, const PlanDevice& device, int64_t n_gpus, PlanResult& out) {
  TrainConfig base;
  base.seq_len = q.seq_len;
  base.n_gpus = n_gpus;
  base.global_batch = q.global_batch;
  base.precision = q.precision;
  base.mp_mode = q.mp_mode;
  base.lora = q.lora;
  if (std::string why = batch_unsplit(*q.model, base, q.space.asked); !why.empty()) {
    out.rejected.push_back({device.spec, n_gpus, std::move(why), {}});
    return;
  }
  SearchResult r = search(*q.model, *device.spec, *device.params, base, q.space, SearchGoal::kAllThatFit);
  add_fitting(q, device, n_gpus, r.fitting, out);
  for (Rejection& why : r.rejections) out.rejected.push_back({device.spec, n_gpus, {}, std::move(why)});
}

// The pick among the ranked configurations of `device` (and `gpus`, unless 0).
PointPick pick_among(const std::vector<PlannedConfig>& ranked, const DeviceSpec* device, int64_t gpus) {
  std::vector<PlannedConfig> some;
  for (const PlannedConfig& c : ranked)
    if (c.device == device && (gpus == 0 || c.cfg.n_gpus == gpus)) some.push_back(c);
  PointPick p{device, gpus, std::nullopt};
  if (!some.empty()) p.pick = rank_robustly(some);
  return p;
}

}  // namespace

Pick rank_robustly(std::vector<PlannedConfig>& configs) {
  std::stable_sort(configs.begin(), configs.end(),
                   [](const PlannedConfig& a, const PlannedConfig& b) { return a.score < b.score; });
  if (configs.empty()) return {};
  const PlannedConfig fastest = configs.front();
  const auto in_group = [&](const PlannedConfig& c) {
    return c.score_low <= fastest.score_high && c.score_high >= fastest.score_low;
  };
  const auto group_end = std::stable_partition(configs.begin(), configs.end(), in_group);
  std::stable_sort(configs.begin(), group_end, robust_before);
  bool chosen_first = false;
  return {configs.front(), fastest, rule_before(configs.front(), fastest, chosen_first)};
}

PlanResult plan_runs(const PlanQuery& query, const std::function<void(int64_t)>& progress) {
  PlanResult out;
  int64_t step = 0;
  for (const PlanDevice& device : query.devices)
    for (int64_t n : query.gpu_counts) {
      if (progress) progress(step);
      ++step;
      plan_point(query, device, n, out);
    }
  out.top = rank_robustly(out.ranked);
  std::vector<int64_t> counts = query.gpu_counts;
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  for (int64_t n : counts)
    for (const PlanDevice& device : query.devices) out.per_gpu_count.push_back(pick_among(out.ranked, device.spec, n));
  for (const PlanDevice& device : query.devices) out.per_device.push_back(pick_among(out.ranked, device.spec, 0));
  return out;
}

bool checkpointed_near_full(const Prediction& p) { return p.fits() && p.time.allocator_s > 0; }

}  // namespace tpsim
