#include "calibrate/table_calibration.hpp"

#include <algorithm>
#include <map>

#include "io/error.hpp"
#include "model/interval.hpp"

namespace tpsim {
namespace {

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

void add_unique(std::vector<std::string>& v, const std::string& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

}  // namespace

std::string TableCalibrationOptions::check() const {
  if (device.empty()) return "--device: required (the device whose profile is fitted)";
  if (fit.parameters.empty()) return "--parameters: no parameter to fit";
  return "";
}

TableCalibration calibrate_table(const TableCalibrationOptions& o, const std::vector<FitRow>& fits,
                                 const std::vector<MeasuredRow>& rows, const DeviceProfile& base) {
  if (const std::string why = o.check(); !why.empty()) throw Error(why);
  if (fits.empty() || fits.size() != rows.size()) throw Error("calibrate table: no rows to fit");
  TableCalibration c;
  c.fit = fit_table(fits, *fits.front().base, o.fit);
  // What the profile takes from the fit: everything fitted to its own rows; across devices only the
  // system-level parameters (the kernel-level ones describe the fitted devices' kernels).
  const bool by_sm_clock = o.transfer && o.device_spec;
  for (const ParamInfo* param : o.fit.parameters)
    if (!o.transfer || param->level == ParamLevel::kSystem || (by_sm_clock && scales_by_sm_clock(*param)))
      c.taken.push_back(param);

  // Held-out errors for the interval: for a transfer, each measured device predicted from the
  // others (--cv device); else leave one model size out when there are two, else 5 folds.
  std::vector<std::string> models;
  for (const auto& r : rows) add_unique(models, r.model);
  c.cv = o.transfer ? parse_cv("device") : o.interval_cv;
  if (c.cv.mode == CvMode::kModel && models.size() < 2) c.cv = parse_cv("kfold:5");
  TableFitOptions cv_options = o.fit;
  cv_options.covariance = false;
  std::vector<HeldOutError> held = cross_validate(fits, c.cv, cv_options, o.progress);
  for (const HeldOutError& h : held) c.held_out_errors.push_back(h.error);
  if (c.held_out_errors.empty()) throw Error("--transfer: held-out errors need rows of at least two devices");
  c.interval = held_out_interval(c.held_out_errors);

  std::vector<DomainPoint> points;
  for (const FitRow& f : fits) points.push_back(domain_point(*f.model, f.cfg));
  c.domain = domain_of(points);
  if (!o.transfer) {
    const bool own = o.widening_rows.empty();
    const std::vector<FitRow>& rows_w = own ? fits : o.widening_rows;
    std::vector<HeldOutError> all = own ? held : cross_validate(rows_w, c.cv, cv_options, o.progress);
    // Each device's held-out interval, which its rows beyond their fold's rows widen.
    std::map<std::string, std::vector<double>> errors_of;
    for (const HeldOutError& h : all) errors_of[rows_w[h.row].device->id].push_back(h.error);
    std::map<std::string, RelativeInterval> interval_of;
    for (const auto& [device, e] : errors_of) interval_of[device] = held_out_interval(e);
    // Devices with fewer than three model sizes have no extremes fold.
    if (c.cv.mode != CvMode::kExtremes)
      for (HeldOutError& h : cross_validate(rows_w, parse_cv("extremes"), cv_options, o.progress)) all.push_back(h);
    std::vector<double> needed, doublings;
    for (HeldOutError& h : all) {
      const std::string& device = rows_w[h.row].device->id;
      if (!(h.doublings > 0) || !interval_of.count(device)) continue;
      needed.push_back(widening_needed(h.error, h.doublings, interval_of[device]));
      doublings.push_back(h.doublings);
      c.beyond.push_back(std::move(h));
    }
    c.widening_per_doubling = widening_for_coverage(needed, doublings, kIntervalCoverage);
  }

  c.profile = base;
  c.profile.device = o.device;
  const double scale =
      by_sm_clock ? sm_clock_scale(*fits.front().device, *fits.front().base, *o.device_spec, base.params) : 1.0;
  c.profile.params = on_device(with_fitted(base.params, c.fit.params, c.taken), c.taken, scale);
  for (const auto& r : rows) add_unique(c.fitted_devices, r.gpu);
  const std::string detail = (o.transfer ? "transferred from a fit to " : "fitted to ") + std::to_string(rows.size()) +
                             " rows of " + join(c.fitted_devices, ", ") + " in " + join(o.tables, ", ") +
                             " (tpsim calibrate table, " + utc_timestamp() + ")";
  for (const auto& f : c.fit.fitted)
    if (f.determined && std::find(c.taken.begin(), c.taken.end(), f.param) != c.taken.end())
      c.profile.sources[std::string(f.param->name)] = {SourceKind::kTableFit, detail, f.stddev};
  return c;
}

}  // namespace tpsim
