// How far to trust a prediction. A profile fitted to measured tables carries the held-out 10th and
// 90th percentiles of predicted / measured - 1 over those tables' rows, the domain the rows span
// (model parameters, sequence length, GPUs, micro-batch) and how fast the interval widens per
// doubling beyond that domain, measured by holding out the smallest and largest models (the
// profile's prediction_interval; calibrate/interval_fit). A configuration inside the domain gets
// the held-out interval; one outside gets it widened in log space by widening x doublings, the
// sum over the axes of log2 of how far the configuration lies beyond the nearer end.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/architecture.hpp"
#include "model/training.hpp"

namespace tpsim {

// Relative errors (predicted / measured - 1): a prediction p's measured value lies in
// [p / (1 + p90), p / (1 + p10)] (throughput) when the interval holds.
struct RelativeInterval {
  double p10 = 0, p90 = 0;
};

// The q-quantile (0..1) of `values`, linear between order statistics; 0 for none.
double quantile(std::vector<double> values, double q);

// The 10th and 90th percentiles of held-out errors.
RelativeInterval held_out_interval(const std::vector<double>& errors);

// Where a configuration sits on the axes a table's rows vary.
struct DomainPoint {
  double parameters = 0;  // the model's parameter count
  double seq_len = 0;
  double gpus = 0;
  double micro_batch = 0;
};

// The point of a model trained under `cfg` (its parameter count at cfg.seq_len).
DomainPoint domain_point(const ModelConfig& model, const TrainConfig& cfg);

// The span of the rows a profile was fitted to, per axis (each lo <= hi, all > 0).
struct FitDomain {
  DomainPoint lo, hi;
};

// The smallest domain that holds every point; `points` must not be empty and every value > 0.
FitDomain domain_of(const std::vector<DomainPoint>& points);

// Doublings outside the domain: sum over the axes of max(0, log2(lo / x), log2(x / hi)).
double doublings_outside(const FitDomain& domain, const DomainPoint& point);

// What an interval from the 10th to the 90th percentile covers.
inline constexpr double kIntervalCoverage = 0.8;

struct IntervalModel {
  RelativeInterval held_out;         // within the domain
  std::optional<FitDomain> domain;   // none: the interval is the same everywhere
  double widening_per_doubling = 0;  // added to each side of log(1 + error) per doubling outside
};

// `held_out` widened in log space by `widening` x `doublings` on each side.
RelativeInterval widened(const RelativeInterval& held_out, double widening, double doublings);

// The interval at `point`: `held_out` inside the domain (or without one), widened outside:
// log(1 + p10) - w d and log(1 + p90) + w d.
RelativeInterval interval_at(const IntervalModel& model, const DomainPoint& point);

// The widening (of log(1 + error), per doubling) a held-out row `doublings` (> 0) beyond its fit's
// rows needs for its error (predicted / measured - 1) to lie in `held_out` widened: 0 inside.
double widening_needed(double error, double doublings, const RelativeInterval& held_out);

// The widening that covers `coverage` (0..1) of rows needing `needed` at `doublings` (each > 0),
// at every distance: the rows split into (0, 1], (1, 2] and beyond 2 doublings, each band's
// `coverage` quantile of what its rows need, and the widest of the three, so that the few far rows
// are covered as the many near ones (an interval that covers 80% on average can miss every row two
// doublings out). 0 for no rows.
double widening_for_coverage(const std::vector<double>& needed, const std::vector<double>& doublings, double coverage);

}  // namespace tpsim
