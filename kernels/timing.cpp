#include "kernels/timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "io/error.hpp"
#include "model/interval.hpp"

namespace tpsim {

void validate(const TimingOptions& o) {
  if (o.warmup < 0) throw Error("timing: warmup " + std::to_string(o.warmup) + " must be >= 0");
  if (o.min_repetitions < 1)
    throw Error("timing: min_repetitions " + std::to_string(o.min_repetitions) + " must be >= 1");
  if (o.max_repetitions < o.min_repetitions)
    throw Error("timing: max_repetitions " + std::to_string(o.max_repetitions) + " is below min_repetitions " +
                std::to_string(o.min_repetitions));
  if (!(o.min_seconds >= 0) || !std::isfinite(o.min_seconds))
    throw Error("timing: min_seconds " + std::to_string(o.min_seconds) + " must be finite and >= 0");
  if (!(o.max_seconds >= 0) || !std::isfinite(o.max_seconds))
    throw Error("timing: max_seconds " + std::to_string(o.max_seconds) + " must be finite and >= 0");
}

double percentile(std::vector<double> samples_s, double q) {
  if (samples_s.empty()) throw Error("timing: percentile of no samples");
  if (!(q >= 0.0 && q <= 1.0)) throw Error("timing: percentile " + std::to_string(q) + " outside [0, 1]");
  return quantile(std::move(samples_s), q);
}

double median(std::vector<double> samples_s) { return percentile(std::move(samples_s), 0.5); }

Timing summarize_timings(const std::vector<double>& samples_s) {
  Timing t;
  t.median_s = median(samples_s);
  t.p10_s = percentile(samples_s, 0.1);
  t.p90_s = percentile(samples_s, 0.9);
  t.repetitions = static_cast<int>(samples_s.size());
  return t;
}

std::vector<double> repeat_timed(const TimingOptions& options, const std::function<double()>& run_once) {
  validate(options);
  double spent_s = 0;  // warm-up and timed runs together, as they reported themselves
  for (int i = 0; i < options.warmup; ++i) {
    spent_s += run_once();
    if (spent_s >= options.max_seconds) break;
  }
  std::vector<double> samples_s;
  samples_s.reserve(static_cast<size_t>(std::min(options.max_repetitions, 1 << 16)));
  double measured_s = 0;
  while (static_cast<int>(samples_s.size()) < options.max_repetitions) {
    const double s = run_once();
    samples_s.push_back(s);
    measured_s += s;
    spent_s += s;
    if (static_cast<int>(samples_s.size()) < options.min_repetitions) continue;
    if (measured_s >= options.min_seconds || spent_s >= options.max_seconds) break;
  }
  return samples_s;
}

double host_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tpsim
