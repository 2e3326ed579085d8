// Fitting profiles to measured tables: recovery of known parameters from rows the simulator made,
// outliers flagged, and the held-out accuracy targets on the seed's llm-foundry tables.
#define BOOST_TEST_MODULE table_fit
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "calibrate/crossval.hpp"
#include "common.hpp"
#include "io/error.hpp"
#include "cli/validation.hpp"

using namespace tpsim;
namespace tt = boost::test_tools;

namespace {

// Held-out targets (issue 3): leave one model size out, per table.
constexpr double kHeldOutMapeMax = 0.04;  // A100 40GB, A100 80GB, H100 80GB BF16
constexpr int kRowsOver15Max = 3;
constexpr double kFp8HeldOutMapeMax = 0.10;  // H100 FP8, fitted with the BF16 rows

// The parameters the synthetic truth moves away from the defaults, and how far.
struct Truth {
  const char* name;
  double value;
  double rel_tol;  // recovery tolerance, relative
};
const Truth kTruth[] = {
    {"compute_clock_ratio", 0.86, 0.03}, {"recompute_fraction", 0.7, 0.10}, {"attn_fwd_efficiency", 0.5, 0.10},
    {"attn_bwd_efficiency", 0.3, 0.10},  {"xent_efficiency", 0.3, 0.25},
};

// `base` moved to the truth.
CostParams truth_of(const CostParams& base) {
  CostParams truth = base;
  for (const auto& t : kTruth) find_param(t.name)->value(truth) = t.value;
  return truth;
}

// A fit of the truth's parameters and no others.
TableFitOptions truth_fit_options() {
  TableFitOptions options;
  options.parameters.clear();
  for (const auto& t : kTruth) options.parameters.push_back(find_param(t.name));
  return options;
}

Context seed_context() {
  CommonOptions o;
  return Context(o);
}

std::vector<ResolvedRow> seed_rows(Context& ctx, const std::vector<std::string>& tables) {
  std::vector<std::string> warnings;
  return load_rows(ctx, tables, warnings);
}

std::string table(const char* name) { return std::string(TPSIM_DATA) + "/measured/" + name; }

double mape(const std::vector<double>& e) {
  double s = 0;
  for (double x : e) s += std::abs(x);
  return s / static_cast<double>(e.size());
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_fit_core_maps_values_to_log_space_within_bounds_and_reports_bounds) {
  // One floor per unit: seconds from 1e-7 s, other units from their lower bound.
  const ParamInfo& step = param_of(&CostParams::step_overhead_s);
  const ParamInfo& clock = param_of(&CostParams::compute_clock_ratio);
  BOOST_TEST(log_floor(step) == 1e-7);
  BOOST_TEST(log_floor(clock) == clock.lower);
  CostParams start;
  start.step_overhead_s = 0;  // log of 0 is not: the floor
  start.compute_clock_ratio = 0.75;
  const LogSpaceFit fit({&step, &clock}, start, {});
  BOOST_TEST(fit.x()[0] == std::log(1e-7));
  BOOST_TEST(fit.x()[1] == std::log(0.75));
  BOOST_TEST(fit.to_x(1, 5.0) == std::log(clock.upper));  // clamped to the bound
  BOOST_TEST(fit.value(1) == 0.75, tt::tolerance(1e-12));
  // A time below a microsecond is the physical bound, zero; a value at a bound says so.
  const FittedParameter tiny = fitted_report(step, 4e-7, -1);
  BOOST_TEST(tiny.value == 0.0);
  BOOST_TEST(tiny.at_bound);
  BOOST_TEST(fitted_report(step, 2e-3, -1).value == 2e-3);
  BOOST_TEST(!fitted_report(step, 2e-3, -1).at_bound);
  BOOST_TEST(fitted_report(clock, clock.upper, -1).at_bound);
  BOOST_TEST(fitted_report(clock, clock.lower, -1).at_bound);
  // Seeded starts repeat exactly and stay inside the bounds.
  const auto a = fit.seeded_starts(fit.x(), 4, 0.7, 42), b = fit.seeded_starts(fit.x(), 4, 0.7, 42);
  BOOST_TEST(a.size() == 4u);
  BOOST_TEST((a == b));
  for (const auto& x : a)
    for (size_t i = 0; i < x.size(); ++i) BOOST_TEST((x[i] >= fit.lower_x(i) && x[i] <= fit.upper_x(i)));
}

BOOST_AUTO_TEST_CASE(a_fit_recovers_known_parameters_from_simulated_rows_with_noise) {
  Context ctx = seed_context();
  std::vector<ResolvedRow> rows = seed_rows(ctx, {table("a100_80gb_bf16.md")});
  const CostParams& base = ctx.base_profile("a100_80gb").params;
  const CostParams truth = truth_of(base);

  // Measured = the simulator's own prediction under the truth, with 1% multiplicative noise.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 0.01);
  std::vector<FitRow> fits = fit_rows(ctx, rows);
  for (auto& f : fits)
    f.measured_tokens_per_s = predict(*f.model, *f.device, truth, f.cfg).tokens_per_s * std::exp(noise(rng));

  const TableFitResult fit = fit_table(fits, base, truth_fit_options());
  for (const auto& t : kTruth) BOOST_TEST_CONTEXT(t.name) {
      const double fitted = find_param(t.name)->value(fit.params);
      BOOST_TEST(fitted == t.value, tt::tolerance(t.rel_tol));
    }
  std::vector<double> errors;
  for (double r : fit.residuals) errors.push_back(std::exp(r) - 1.0);
  BOOST_TEST(mape(errors) < 0.015);
  for (const auto& f : fit.fitted) BOOST_TEST(f.stddev >= 0.0);
}

BOOST_AUTO_TEST_CASE(corrupted_rows_are_flagged_as_outliers_and_do_not_drag_the_fit) {
  Context ctx = seed_context();
  std::vector<ResolvedRow> rows = seed_rows(ctx, {table("a100_80gb_bf16.md")});
  const CostParams& base = ctx.base_profile("a100_80gb").params;
  const CostParams truth = truth_of(base);
  std::vector<FitRow> fits = fit_rows(ctx, rows);
  for (auto& f : fits) f.measured_tokens_per_s = predict(*f.model, *f.device, truth, f.cfg).tokens_per_s;
  // Every tenth row three times too fast or too slow.
  for (size_t i = 0; i < fits.size(); i += 10) fits[i].measured_tokens_per_s *= (i / 10) % 2 ? 3.0 : 1.0 / 3.0;
  const TableFitResult fit = fit_table(fits, base, truth_fit_options());
  for (size_t i = 0; i < fits.size(); ++i) BOOST_TEST(static_cast<bool>(fit.outliers[i]) == (i % 10 == 0));
  BOOST_TEST(fit.params.compute_clock_ratio == 0.86, tt::tolerance(0.03));
}

BOOST_AUTO_TEST_CASE(cross_validation_modes_parse_and_hold_every_row_out) {
  BOOST_TEST((parse_cv("model").mode == CvMode::kModel));
  BOOST_TEST(parse_cv("kfold:5").folds == 5);
  BOOST_CHECK_THROW(parse_cv("kfold:1"), Error);
  BOOST_CHECK_THROW(parse_cv("kfold:x"), Error);
  BOOST_CHECK_THROW(parse_cv("loo"), Error);
}

// Cross-validation fits its folds on several threads at once: every row's held-out error, its fold
// and the parameters that predicted it are those of the folds fitted one at a time, to the bit.
BOOST_AUTO_TEST_CASE(folds_fitted_at_once_give_the_errors_of_folds_fitted_one_at_a_time) {
  Context ctx = seed_context();
  // Two model sizes' rows; under the sanitizers, where each fit takes seconds, one size's.
  std::vector<ResolvedRow> rows;
  for (auto& r : seed_rows(ctx, {table("a100_80gb_bf16.md")}))
    if (r.model->name == "1b" || (!TPSIM_TEST_SANITIZED && r.model->name == "3b")) rows.push_back(std::move(r));
  BOOST_TEST_REQUIRE(rows.size() >= 8u);
  TableFitOptions options;
  options.parameters = table_fit_parameters(ctx, rows);
  options.covariance = false;
  const std::vector<FitRow> fits = fit_rows(ctx, rows);
  const auto one = cross_validate(fits, parse_cv("kfold:4"), options);
  options.threads = 3;  // three threads for four folds
  // The progress calls come from the worker threads (one at a time); Boost.Test's assertions are
  // not for other threads, so the calls are kept and checked here.
  std::vector<std::pair<int, int>> calls;
  const auto many =
      cross_validate(fits, parse_cv("kfold:4"), options, [&](int done, int total) { calls.emplace_back(done, total); });
  BOOST_TEST(calls.size() == 4u);
  for (size_t i = 0; i < calls.size(); ++i) {
    BOOST_TEST(calls[i].first == static_cast<int>(i) + 1);
    BOOST_TEST(calls[i].second == 4);
  }
  BOOST_TEST_REQUIRE(one.size() == rows.size());
  BOOST_TEST_REQUIRE(many.size() == one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    BOOST_TEST_CONTEXT("row " << one[i].row) {
      BOOST_TEST(many[i].row == one[i].row);
      BOOST_TEST(many[i].fold == one[i].fold);
      BOOST_TEST(many[i].error == one[i].error);  // exactly: the same fit, on another thread
      BOOST_TEST(many[i].doublings == one[i].doublings);
      for (const ParamInfo* param : options.parameters)
        BOOST_TEST(param->value(many[i].params) == param->value(one[i].params));
    }
  }
}

// Leave-one-model-size-out errors of one seed table's clean rows, computed once for the suite (the
// accuracy targets and the corrupted-rows case both need them; each run is some seconds of fits).
const std::vector<HeldOutError>& clean_held_out(Context& ctx, const char* name) {
  static std::map<std::string, std::vector<HeldOutError>> done;
  if (auto it = done.find(name); it != done.end()) return it->second;
  const std::vector<ResolvedRow> rows = seed_rows(ctx, {table(name)});
  TableFitOptions options;
  options.parameters = table_fit_parameters(ctx, rows);
  options.covariance = false;
  return done[name] = cross_validate(fit_rows(ctx, rows), parse_cv("model"), options);
}

// Under the sanitizers, where a table's cross-validation takes minutes, the same code runs on the
// rows of three model sizes of one table (three folds) and only their errors' count and finiteness
// are checked; the Release build checks every target.
BOOST_AUTO_TEST_CASE(held_out_accuracy_meets_the_targets_on_the_seed_tables) {
  Context ctx = seed_context();
  if (TPSIM_TEST_SANITIZED) {
    std::vector<ResolvedRow> rows;
    std::vector<std::string> models;
    for (auto& r : seed_rows(ctx, {table("a100_80gb_bf16.md")})) {
      if (std::find(models.begin(), models.end(), r.model->name) == models.end()) {
        if (models.size() == 3) continue;
        models.push_back(r.model->name);
      }
      rows.push_back(std::move(r));
    }
    TableFitOptions options;
    options.parameters = table_fit_parameters(ctx, rows);
    options.covariance = false;
    const auto held_out = cross_validate(fit_rows(ctx, rows), parse_cv("model"), options);
    BOOST_TEST(held_out.size() == rows.size());
    for (const auto& h : held_out) BOOST_TEST(std::isfinite(h.error));
    return;
  }
  for (const char* name : {"a100_40gb_bf16.md", "a100_80gb_bf16.md", "h100_80gb_bf16.md"}) {
    BOOST_TEST_CONTEXT(name) {
      const std::vector<ResolvedRow> rows = seed_rows(ctx, {table(name)});
      std::vector<double> errors;
      for (const auto& h : clean_held_out(ctx, name)) errors.push_back(h.error);
      BOOST_TEST(errors.size() == rows.size());
      int over = 0;
      for (double e : errors) over += std::abs(e) > 0.15;
      BOOST_TEST_MESSAGE(name << ": held-out MAPE " << 100 * mape(errors) << "%, " << over << " rows > 15%");
      BOOST_TEST(mape(errors) <= kHeldOutMapeMax);
      BOOST_TEST(over <= kRowsOver15Max);
    }
  }
  // FP8, fitted together with the BF16 rows of the same device.
  const std::vector<ResolvedRow> rows = seed_rows(ctx, {table("h100_80gb_bf16.md"), table("h100_80gb_fp8.md")});
  TableFitOptions options;
  options.parameters = table_fit_parameters(ctx, rows);
  options.covariance = false;
  std::vector<double> fp8;
  for (const auto& h : cross_validate(fit_rows(ctx, rows), parse_cv("model"), options))
    if (rows[h.row].cfg.precision == Precision::kAmpFp8) fp8.push_back(h.error);
  BOOST_TEST(fp8.size() == 7u);
  BOOST_TEST_MESSAGE("H100 FP8: held-out MAPE " << 100 * mape(fp8) << "%");
  BOOST_TEST(mape(fp8) <= kFp8HeldOutMapeMax);
}

// Fits that survive bad data (issue 6): a tenth of a real table's rows corrupted — every tenth row
// three times too fast or too slow, alternately, as a unit or a copy-paste slip would make them —
// must be flagged as outliers, and leave the held-out accuracy on the other rows within 1.5 points
// of what the clean table gives (the same leave-one-model-size-out runs as `tpsim validate --cv model`).
// An accuracy figure only: the sanitizer build runs the same code (cross-validation, fits with
// outliers) in the cases above, and skips this one's minutes of fits.
BOOST_AUTO_TEST_CASE(a_real_table_with_a_tenth_of_its_rows_corrupted_keeps_its_held_out_accuracy,
                     *boost::unit_test::enable_if<!TPSIM_TEST_SANITIZED>()) {
  constexpr double kMaxMapeIncrease = 0.015;
  Context ctx = seed_context();
  const std::vector<ResolvedRow> rows = seed_rows(ctx, {table("a100_80gb_bf16.md")});
  TableFitOptions options;
  options.parameters = table_fit_parameters(ctx, rows);
  options.covariance = false;
  const std::vector<FitRow> clean = fit_rows(ctx, rows);
  std::vector<FitRow> corrupted = clean;
  std::vector<bool> is_corrupted(rows.size(), false);
  for (size_t i = 0; i < corrupted.size(); i += 10) {
    corrupted[i].measured_tokens_per_s *= (i / 10) % 2 ? 3.0 : 1.0 / 3.0;
    is_corrupted[i] = true;
  }

  // Held out, clean and corrupted; the corrupted run's errors counted on the clean rows only
  // (a clean row's measured value is the same in both).
  std::vector<double> clean_all, clean_same_rows, corrupted_clean_rows;
  for (const auto& h : clean_held_out(ctx, "a100_80gb_bf16.md")) {
    clean_all.push_back(h.error);
    if (!is_corrupted[h.row]) clean_same_rows.push_back(h.error);
  }
  for (const auto& h : cross_validate(corrupted, parse_cv("model"), options))
    if (!is_corrupted[h.row]) corrupted_clean_rows.push_back(h.error);
  BOOST_TEST(clean_all.size() == rows.size());
  BOOST_TEST(corrupted_clean_rows.size() == clean_same_rows.size());

  // The fit to all the corrupted rows flags every corrupted one.
  const TableFitResult fit = fit_table(corrupted, *corrupted.front().base, options);
  int flagged_corrupted = 0, flagged_clean = 0;
  for (size_t i = 0; i < corrupted.size(); ++i) {
    if (is_corrupted[i])
      BOOST_TEST(static_cast<bool>(fit.outliers[i]), "corrupted row " << rows[i].row.where() << " not flagged");
    (is_corrupted[i] ? flagged_corrupted : flagged_clean) += fit.outliers[i] ? 1 : 0;
  }
  const int n_corrupted = static_cast<int>(std::count(is_corrupted.begin(), is_corrupted.end(), true));
  BOOST_TEST_MESSAGE("a100_80gb, " << n_corrupted << " of " << rows.size() << " rows corrupted: held-out MAPE clean "
                                   << 100 * mape(clean_all) << "% (" << 100 * mape(clean_same_rows) << "% on the "
                                   << clean_same_rows.size() << " uncorrupted rows), corrupted "
                                   << 100 * mape(corrupted_clean_rows) << "% on the same rows; flagged "
                                   << flagged_corrupted << " of " << n_corrupted << " corrupted rows and "
                                   << flagged_clean << " clean rows");
  BOOST_TEST(mape(corrupted_clean_rows) - mape(clean_same_rows) <= kMaxMapeIncrease);
  BOOST_TEST(mape(corrupted_clean_rows) - mape(clean_all) <= kMaxMapeIncrease);
}

// Issue 17, beyond the fitted models: llm-foundry's H100 rows of 125m and 350m, from the same campaign
// and image as its H100 table, which has none (data/measured/h100_80gb_bf16_small.md). Fitted without
// them, the H100 profile predicted them 7.5% slow on average (its cross-entropy at 0.11 of the
// bandwidth: the table could not tell it from the rest of the step). Each held out by model size
// from a fit with the other and the published table: 2.0% (125m) and 1.8% (350m) on 2026-11-29.
// An accuracy figure only, as the corrupted-table case above.
BOOST_AUTO_TEST_CASE(the_h100_rows_of_125m_and_350m_are_predicted_held_out,
                     *boost::unit_test::enable_if<!TPSIM_TEST_SANITIZED>()) {
  constexpr double kMapeMax = 0.04;
  Context ctx = seed_context();
  const std::vector<ResolvedRow> rows = seed_rows(ctx, {table("h100_80gb_bf16.md"), table("h100_80gb_bf16_small.md")});
  TableFitOptions options;
  options.parameters = table_fit_parameters(ctx, rows);
  options.covariance = false;
  std::map<std::string, std::vector<double>> errors;
  for (const auto& h : cross_validate(fit_rows(ctx, rows), parse_cv("model"), options))
    errors[rows[h.row].model->name].push_back(h.error);
  for (const std::string model : {"125m", "350m"}) {
    BOOST_TEST_REQUIRE(errors[model].size() == 8u);
    BOOST_TEST_MESSAGE("H100 " << model << " held out: MAPE " << 100 * mape(errors[model]) << "%");
    BOOST_TEST(mape(errors[model]) <= kMapeMax, model);
  }
}

// Issue 17: what carries across devices. The attention kernels of the seed's runs scale with SMs x
// clock (table_fit.hpp): from A100 to H100 SXM5 their efficiency, a fraction of each device's bf16
// GEMM rate, is multiplied by (293 / 784) x (132 x 1830 MHz) / (108 x 1410 MHz) = 0.593.
BOOST_AUTO_TEST_CASE(attention_efficiencies_carry_across_devices_by_sms_and_clock) {
  Context ctx = seed_context();
  const DeviceSpec &a100 = ctx.device("a100_80gb"), &a100_40 = ctx.device("a100_40gb"), &h100 = ctx.device("h100_80gb");
  BOOST_TEST(a100.boost_clock_hz == 1410e6);
  BOOST_TEST(h100.boost_clock_hz == 1830e6);
  const CostParams &pa = ctx.base_profile("a100_80gb").params, &ph = ctx.base_profile("h100_80gb").params;
  const double expected = (293.0 / 784.0) * (132.0 * 1830.0) / (108.0 * 1410.0);
  BOOST_TEST(sm_clock_scale(a100, pa, h100, ph) == expected, tt::tolerance(1e-12));
  BOOST_TEST(sm_clock_scale(h100, ph, a100, pa) == 1.0 / expected, tt::tolerance(1e-12));
  BOOST_TEST(sm_clock_scale(a100, pa, a100_40, ctx.base_profile("a100_40gb").params) == 1.0, tt::tolerance(1e-12));
  DeviceSpec no_clock = h100;
  no_clock.boost_clock_hz = 0;  // a datasheet without a clock: carried as it is
  BOOST_TEST(sm_clock_scale(a100, pa, no_clock, ph) == 1.0);
  // Only the attention efficiencies scale, capped at their bound of 1.
  CostParams shared = pa;
  shared.attn_fwd_efficiency = 0.5;
  shared.attn_bwd_efficiency = 0.9;
  const auto& params = default_table_fit_parameters();
  const CostParams on_h100 = on_device(shared, params, expected);
  BOOST_TEST(on_h100.attn_fwd_efficiency == 0.5 * expected, tt::tolerance(1e-12));
  BOOST_TEST(on_h100.compute_clock_ratio == shared.compute_clock_ratio);
  BOOST_TEST(on_device(shared, params, 2.0).attn_bwd_efficiency == 1.0);
}

// A parameter a fit pushes to a bound names the rows pushing it, the strongest first; every
// parameter a table fit adjusts has a physical range with its source.
BOOST_AUTO_TEST_CASE(a_fit_at_a_bound_names_the_rows_that_push_it) {
  const ParamInfo& clock = param_of(&CostParams::compute_clock_ratio);  // bounds 0.5..1.25
  // Within the Huber loss's quadratic zone (5%), so that each row pulls by its own error.
  const std::vector<double> targets = {1.30, 1.23, 1.29, 1.24, 1.305};  // the mean is above 1.25
  LogSpaceFit fit({&clock}, std::vector<double>{0.8}, {});
  for (double t : targets) fit.add_log_error([t](const std::vector<double>& v) { return std::log(v[0] / t); });
  fit.solve({fit.x()});
  BOOST_TEST(fit.value(0) == clock.upper, tt::tolerance(1e-9));
  const std::vector<size_t> pushing = fit.pushing(0, 5);
  BOOST_TEST((pushing == std::vector<size_t>{4, 0, 2}));  // 1.305, 1.30, 1.29: every target above 1.25
  BOOST_TEST(fit.pushing(0, 1).size() == 1u);

  for (const ParamInfo* p : default_table_fit_parameters())
    BOOST_TEST_CONTEXT(p->name) BOOST_TEST(!range_source(*p).empty());
  for (CostParamMember m : {&CostParams::host_kernel_issue_s, &CostParams::intra_node_latency_s})
    BOOST_TEST(!range_source(param_of(m)).empty());
}

// Across devices (issue 17): fitted on the two A100 tables only, the H100 BF16 table within 10%
// (12.9% before attention carried by SMs x clock). Minutes of fits under the sanitizers: Release only.
BOOST_AUTO_TEST_CASE(the_h100_table_is_predicted_from_the_a100_tables_within_10_percent,
                     *boost::unit_test::enable_if<!TPSIM_TEST_SANITIZED>()) {
  Context ctx = seed_context();
  const std::vector<ResolvedRow> rows =
      seed_rows(ctx, {table("a100_80gb_bf16.md"), table("a100_40gb_bf16.md"), table("h100_80gb_bf16.md")});
  TableFitOptions options;
  options.parameters = table_fit_parameters(ctx, rows);
  options.covariance = false;
  std::vector<FitRow> fits = fit_rows(ctx, rows);
  std::vector<double> h100;
  for (const auto& h : cross_validate(fits, parse_cv("device"), options))
    if (rows[h.row].device->id == "h100_80gb") h100.push_back(h.error);
  BOOST_TEST(h100.size() == 52u);
  BOOST_TEST_MESSAGE("H100 BF16 from the A100 fits: MAPE " << 100 * mape(h100) << "%");
  BOOST_TEST(mape(h100) <= 0.10);
}

// Extrapolation in model size (issue 17): `--cv extremes` holds out each device's smallest and
// largest model size and fits on the sizes between.
BOOST_AUTO_TEST_CASE(extremes_hold_out_the_smallest_and_largest_model_of_each_device) {
  BOOST_TEST((parse_cv("extremes").mode == CvMode::kExtremes));
  BOOST_TEST(to_string(parse_cv("extremes")) == "extremes");
  Context ctx = seed_context();
  const std::vector<ResolvedRow> rows = seed_rows(ctx, {table("a100_80gb_bf16.md"), table("h100_80gb_bf16.md")});
  TableFitOptions options;  // one cheap parameter: this case checks which rows are held out
  options.parameters = {&param_of(&CostParams::compute_clock_ratio)};
  options.covariance = false;
  options.starts = 1;
  std::map<std::string, std::set<std::string>> held;  // device -> held-out model sizes
  size_t count = 0;
  for (const auto& h : cross_validate(fit_rows(ctx, rows), parse_cv("extremes"), options)) {
    held[rows[h.row].device->id].insert(rows[h.row].model->name);
    ++count;
  }
  BOOST_TEST((held["a100_80gb"] == std::set<std::string>{"125m", "70b"}));
  BOOST_TEST((held["h100_80gb"] == std::set<std::string>{"760m", "70b"}));  // no 125m or 350m H100 rows
  size_t expected = 0;
  for (const auto& r : rows) {
    const std::string& m = r.model->name;
    expected += r.device->id == "a100_80gb" ? (m == "125m" || m == "70b") : (m == "760m" || m == "70b");
  }
  BOOST_TEST(count == expected);
}
