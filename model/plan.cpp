#include "model/plan.hpp"

#include <algorithm>
#include <cmath>

namespace tpsim {

int64_t planned_global_batch(double asked_sequences, int64_t n_gpus) {
  const double per_gpu = std::round(asked_sequences / static_cast<double>(n_gpus));
  return per_gpu < 1 ? 0 : static_cast<int64_t>(per_gpu) * n_gpus;
}

namespace {

double score_of(const Prediction& p, int64_t n_gpus, Objective objective) {
  const double seconds_per_token = 1.0 / p.tokens_per_s;
  return objective == Objective::kCost ? seconds_per_token * static_cast<double>(n_gpus) : seconds_per_token;
}

void plan_point(const PlanQuery& q, const PlanDevice& device, int64_t n_gpus, PlanResult& out) {
  TrainConfig base;
  base.seq_len = q.seq_len;
  base.n_gpus = n_gpus;
  base.global_batch = planned_global_batch(q.asked_sequences, n_gpus);
  base.precision = q.precision;
  base.mp_mode = q.mp_mode;
  if (base.global_batch == 0) {
    out.rejected.push_back({device.spec, n_gpus, true, {}});
    return;
  }
  SearchResult r = search(*q.model, *device.spec, *device.params, base, q.space, SearchGoal::kAllThatFit);
  for (Candidate& c : r.fitting) {
    const double score = score_of(c.prediction, n_gpus, q.objective);
    out.ranked.push_back({device.spec, c.cfg, std::move(c.prediction), score});
  }
  for (Rejection& why : r.rejections) out.rejected.push_back({device.spec, n_gpus, false, std::move(why)});
}

}  // namespace

PlanResult plan_runs(const PlanQuery& query, const std::function<void(int64_t)>& progress) {
  PlanResult out;
  int64_t step = 0;
  for (const PlanDevice& device : query.devices)
    for (int64_t n : query.gpu_counts) {
      if (progress) progress(step);
      ++step;
      plan_point(query, device, n, out);
    }
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [](const PlannedConfig& a, const PlannedConfig& b) { return a.score < b.score; });
  return out;
}

}  // namespace tpsim
