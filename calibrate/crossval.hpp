// Held-out accuracy: fit on some rows, predict the others, report only the held-out errors.
//   model     per device, leave one model size out: fit on the device's other sizes
//   kfold:K   per device, K folds of rows (a fixed shuffle, so runs repeat exactly)
//   extremes  per device, hold out the smallest and the largest model size (by parameter count) and
//             fit on the sizes between: how well the fit extrapolates in model size
//   device    per device, fit on every other device's rows and predict this device's rows from
//             its own profile's kernel-level parameters (GEMM, attention, memory-bound kernels: what
//             kernel runs on that device measure) and the transferred system-level ones
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "calibrate/table_fit.hpp"

namespace tpsim {

enum class CvMode { kModel, kKFold, kDevice, kExtremes };

struct CvSpec {
  CvMode mode = CvMode::kModel;
  int folds = 5;  // kfold
};

CvSpec parse_cv(const std::string& text);  // "model", "kfold:5", "device", "extremes"; Error otherwise
std::string to_string(const CvSpec& spec);

struct HeldOutError {
  size_t row = 0;     // index into the rows given
  double error = 0;   // predicted / measured - 1
  std::string fold;   // what was held out, e.g. "model 13b", "fold 2 of 5", "device h100_80gb"
  CostParams params;  // the parameters that predicted it
  // How far the row lies outside the span of the rows its fold fitted (model/interval.hpp): what
  // a profile's interval widens by.
  double doublings = 0;
};

// `progress(done, total)` is called after each fold (from the thread that fitted it, one call at a
// time). Rows that no fold can predict (a device with a single model size under `model`, a single
// device under `device`) are left out. The folds are fitted options.threads at a time; the errors,
// in row order, are the same for any thread count.
std::vector<HeldOutError> cross_validate(const std::vector<FitRow>& rows, const CvSpec& spec,
                                         const TableFitOptions& options,
                                         const std::function<void(int, int)>& progress = {});

}  // namespace tpsim
