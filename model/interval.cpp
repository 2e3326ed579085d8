#include "model/interval.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace tpsim {

namespace {

double axis_doublings(double lo, double hi, double x) {
  if (x < lo) return std::log2(lo / x);
  if (x > hi) return std::log2(x / hi);
  return 0;
}

}  // namespace

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto i = static_cast<size_t>(std::floor(pos));
  const size_t j = std::min(i + 1, v.size() - 1);
  return v[i] + (v[j] - v[i]) * (pos - static_cast<double>(i));
}

RelativeInterval held_out_interval(const std::vector<double>& errors) {
  return {quantile(errors, 0.1), quantile(errors, 0.9)};
}

DomainPoint domain_point(const ModelConfig& model, const TrainConfig& cfg) {
  return {static_cast<double>(parameter_count(model, cfg.seq_len)), static_cast<double>(cfg.seq_len),
          static_cast<double>(cfg.n_gpus), static_cast<double>(cfg.micro_batch)};
}

FitDomain domain_of(const std::vector<DomainPoint>& points) {
  if (points.empty()) throw std::invalid_argument("domain_of: no points");
  FitDomain d{points.front(), points.front()};
  for (const DomainPoint& p : points) {
    d.lo.parameters = std::min(d.lo.parameters, p.parameters);
    d.hi.parameters = std::max(d.hi.parameters, p.parameters);
    d.lo.seq_len = std::min(d.lo.seq_len, p.seq_len);
    d.hi.seq_len = std::max(d.hi.seq_len, p.seq_len);
    d.lo.gpus = std::min(d.lo.gpus, p.gpus);
    d.hi.gpus = std::max(d.hi.gpus, p.gpus);
    d.lo.micro_batch = std::min(d.lo.micro_batch, p.micro_batch);
    d.hi.micro_batch = std::max(d.hi.micro_batch, p.micro_batch);
  }
  return d;
}

double doublings_outside(const FitDomain& d, const DomainPoint& p) {
  return axis_doublings(d.lo.parameters, d.hi.parameters, p.parameters) +
         axis_doublings(d.lo.seq_len, d.hi.seq_len, p.seq_len) + axis_doublings(d.lo.gpus, d.hi.gpus, p.gpus) +
         axis_doublings(d.lo.micro_batch, d.hi.micro_batch, p.micro_batch);
}

RelativeInterval widened(const RelativeInterval& held_out, double widening, double doublings) {
  const double widen = widening * doublings;
  if (!(widen > 0)) return held_out;
  return {std::expm1(std::log1p(held_out.p10) - widen), std::expm1(std::log1p(held_out.p90) + widen)};
}

RelativeInterval interval_at(const IntervalModel& m, const DomainPoint& point) {
  if (!m.domain) return m.held_out;
  return widened(m.held_out, m.widening_per_doubling, doublings_outside(*m.domain, point));
}

double widening_needed(double error, double doublings, const RelativeInterval& held_out) {
  if (!(doublings > 0)) throw std::invalid_argument("widening_needed: a row inside the fitted rows");
  const double e = std::log1p(error);
  return std::max({0.0, e - std::log1p(held_out.p90), std::log1p(held_out.p10) - e}) / doublings;
}

double widening_for_coverage(const std::vector<double>& needed, const std::vector<double>& doublings, double coverage) {
  if (needed.size() != doublings.size()) throw std::invalid_argument("widening_for_coverage: sizes differ");
  double widest = 0;
  const double far = std::numeric_limits<double>::infinity();
  for (const auto& [from, to] : {std::pair{0.0, 1.0}, {1.0, 2.0}, {2.0, far}}) {
    std::vector<double> band;
    for (size_t i = 0; i < needed.size(); ++i)
      if (doublings[i] > from && doublings[i] <= to) band.push_back(needed[i]);
    if (band.empty()) continue;
    std::sort(band.begin(), band.end());
    const auto covered = static_cast<size_t>(std::ceil(coverage * static_cast<double>(band.size()) - 1e-9));
    widest = std::max(widest, band[std::clamp<size_t>(covered, 1, band.size()) - 1]);
  }
  return widest;
}

}  // namespace tpsim
