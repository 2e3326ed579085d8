#include "calibrate/crossval.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <system_error>
#include <thread>

#include "io/error.hpp"
#include "model/interval.hpp"

namespace tpsim {

CvSpec parse_cv(const std::string& text) {
  CvSpec s;
  if (text == "model") {
    s.mode = CvMode::kModel;
  } else if (text == "device") {
    s.mode = CvMode::kDevice;
  } else if (text == "extremes") {
    s.mode = CvMode::kExtremes;
  } else if (text.rfind("kfold:", 0) == 0) {
    s.mode = CvMode::kKFold;
    const std::string k = text.substr(6);
    if (k.empty() || k.size() > 3 || k.find_first_not_of("0123456789") != std::string::npos || std::stoi(k) < 2)
      throw Error("--cv '" + text + "': kfold needs a whole number of folds of at least 2, as in kfold:5");
    s.folds = std::stoi(k);
  } else {
    throw Error("--cv '" + text + "': expected model, kfold:K, device or extremes");
  }
  return s;
}

std::string to_string(const CvSpec& spec) {
  switch (spec.mode) {
    case CvMode::kModel: return "model";
    case CvMode::kDevice: return "device";
    case CvMode::kExtremes: return "extremes";
    case CvMode::kKFold: return "kfold:" + std::to_string(spec.folds);
  }
  return "?";
}

namespace {

struct Fold {
  std::string name;
  std::vector<size_t> train, test;
};

std::vector<Fold> make_folds(const std::vector<FitRow>& rows, const CvSpec& spec) {
  std::vector<std::string> devices;  // in order of appearance
  for (const auto& r : rows)
    if (std::find(devices.begin(), devices.end(), r.device->id) == devices.end()) devices.push_back(r.device->id);
  std::vector<Fold> folds;
  for (const auto& dev : devices) {
    std::vector<size_t> mine;
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].device->id == dev) mine.push_back(i);
    switch (spec.mode) {
      case CvMode::kModel: {
        std::vector<std::string> models;
        for (size_t i : mine)
          if (std::find(models.begin(), models.end(), rows[i].model->name) == models.end())
            models.push_back(rows[i].model->name);
        if (models.size() < 2) break;
        for (const auto& m : models) {
          Fold f{dev + ", model " + m, {}, {}};
          for (size_t i : mine) (rows[i].model->name == m ? f.test : f.train).push_back(i);
          folds.push_back(std::move(f));
        }
        break;
      }
      case CvMode::kKFold: {
        std::vector<size_t> order = mine;
        std::mt19937_64 rng(0x7470'7369'6dULL);  // fixed: repeatable folds
        std::shuffle(order.begin(), order.end(), rng);
        const int k = std::min<int>(spec.folds, static_cast<int>(order.size()));
        if (k < 2) break;
        for (int j = 0; j < k; ++j) {
          Fold f{dev + ", fold " + std::to_string(j + 1) + " of " + std::to_string(k), {}, {}};
          for (size_t p = 0; p < order.size(); ++p)
            (static_cast<int>(p % k) == j ? f.test : f.train).push_back(order[p]);
          folds.push_back(std::move(f));
        }
        break;
      }
      case CvMode::kExtremes: {
        // The smallest and the largest model size of the device, by parameter count at 2048 tokens.
        const auto size = [&](size_t i) { return parameter_count(*rows[i].model, 2048); };
        const auto [lo, hi] =
            std::minmax_element(mine.begin(), mine.end(), [&](size_t a, size_t b) { return size(a) < size(b); });
        const std::string small = rows[*lo].model->name, large = rows[*hi].model->name;
        if (small == large) break;
        Fold f{dev + ", models " + small + " and " + large, {}, {}};
        for (size_t i : mine) {
          const std::string& m = rows[i].model->name;
          (m == small || m == large ? f.test : f.train).push_back(i);
        }
        if (!f.train.empty()) folds.push_back(std::move(f));  // two sizes: nothing between to fit
        break;
      }
      case CvMode::kDevice: {
        Fold f{"device " + dev, {}, mine};
        for (size_t i = 0; i < rows.size(); ++i)
          if (rows[i].device->id != dev) f.train.push_back(i);
        if (!f.train.empty()) folds.push_back(std::move(f));
        break;
      }
    }
  }
  return folds;
}

}  // namespace

std::vector<HeldOutError> cross_validate(const std::vector<FitRow>& rows, const CvSpec& spec,
                                         const TableFitOptions& options,
                                         const std::function<void(int, int)>& progress) {
  const std::vector<Fold> folds = make_folds(rows, spec);
  // Across devices the system-level parameters carry over, and the attention efficiencies by the
  // devices' SMs x clock (table_fit.hpp, sm_clock_scale); the held-out device keeps the other
  // kernel-level ones of its own profile (its kernel runs, else its reasoned defaults).
  std::vector<const ParamInfo*> transferred;
  for (const ParamInfo* param : options.parameters)
    if (param->level == ParamLevel::kSystem || scales_by_sm_clock(*param)) transferred.push_back(param);
  // Each fold's fit and its held-out predictions, independent of every other fold's.
  const auto run_fold = [&](const Fold& f) {
    std::vector<FitRow> train;
    for (size_t i : f.train) train.push_back(rows[i]);
    const TableFitResult fit = fit_table(train, *train.front().base, options);
    std::vector<DomainPoint> fitted;
    for (const FitRow& r : train) fitted.push_back(domain_point(*r.model, r.cfg));
    const FitDomain domain = domain_of(fitted);
    std::vector<HeldOutError> held;
    for (size_t i : f.test) {
      const std::vector<const ParamInfo*>& taken = spec.mode == CvMode::kDevice ? transferred : options.parameters;
      const double scale = sm_clock_scale(*train.front().device, *train.front().base, *rows[i].device, *rows[i].base);
      const CostParams p = on_device(with_fitted(*rows[i].base, fit.params, taken), taken, scale);
      HeldOutError h;
      h.row = i;
      h.error = std::exp(log_error(rows[i], p)) - 1.0;
      h.fold = f.name;
      h.params = p;
      h.doublings = doublings_outside(domain, domain_point(*rows[i].model, rows[i].cfg));
      held.push_back(std::move(h));
    }
    return held;
  };
  // The folds on up to options.threads threads, each taking the next fold not yet taken; what a fold
  // throws is rethrown after all have stopped (the first fold's in fold order, whatever the threads).
  std::vector<std::vector<HeldOutError>> per_fold(folds.size());
  std::vector<std::exception_ptr> failed(folds.size());
  std::atomic<size_t> next{0};
  std::mutex progress_mutex;
  int done = 0;
  const auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < folds.size();) {
      try {
        per_fold[k] = run_fold(folds[k]);
        const std::lock_guard<std::mutex> lock(progress_mutex);
        if (progress) progress(++done, static_cast<int>(folds.size()));
      } catch (...) {
        failed[k] = std::current_exception();
        next = folds.size();  // no new folds: one has failed
      }
    }
  };
  const size_t at_once = std::min(folds.size(), static_cast<size_t>(std::max(options.threads, 1)));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < at_once; ++t) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the system gives no more threads: the ones started fit every fold, to the same errors
    }
  }
  work();
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  std::vector<HeldOutError> out;
  for (std::vector<HeldOutError>& held : per_fold)
    for (HeldOutError& h : held) out.push_back(std::move(h));
  std::sort(out.begin(), out.end(), [](const HeldOutError& a, const HeldOutError& b) { return a.row < b.row; });
  return out;
}

}  // namespace tpsim
