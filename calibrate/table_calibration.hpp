// Table calibration (`tpsim calibrate table`): fit a device profile's system-level parameters to
// measured training tables with Ceres (table_fit.hpp), estimate the prediction interval from
// held-out fits (crossval.hpp), and return the profile with each taken value's provenance. The
// record of the fit (the profile's extra.fit) is written from the result by io/calibration_report.hpp.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "calibrate/crossval.hpp"
#include "calibrate/table_fit.hpp"
#include "io/measured_table.hpp"
#include "io/profile_io.hpp"
#include "model/interval.hpp"

namespace tpsim {

struct TableCalibrationOptions {
  std::string device;  // the device the profile is for
  // Its datasheet: under transfer the attention efficiencies carry to it by SMs x clock
  // (table_fit.hpp, sm_clock_scale). nullptr: they stay the base profile's.
  const DeviceSpec* device_spec = nullptr;
  // False: the rows are the device's own and every fitted value is taken. True: the rows are other
  // devices'; the system-level parameters carry over, and the attention efficiencies by SMs x clock
  // (the other kernel-level ones describe the fitted devices' kernels), and the interval comes from
  // predicting each device from the others.
  bool transfer = false;
  TableFitOptions fit;  // the parameters to fit, the loss
  // Held-out scheme for the interval. Ignored under transfer (device); model with fewer than two
  // model sizes among the rows becomes kfold:5.
  CvSpec interval_cv;
  // Rows whose held-out errors set how fast the interval widens beyond the fitted rows, instead of
  // the fitted rows' own (other devices' tables: how the fit extrapolates, measured where this
  // table cannot show it). Each device's rows are held out within that device, each row's need
  // measured against its own device's held-out interval. Empty: the fitted rows.
  std::vector<FitRow> widening_rows;
  std::vector<std::string> tables;         // the tables' files, for the provenance
  std::function<void(int, int)> progress;  // (done, total) after each held-out fit

  // "" when the options are consistent, else one line naming the broken constraint.
  std::string check() const;
};

struct TableCalibration {
  TableFitResult fit;
  std::vector<const ParamInfo*> taken;      // the fitted parameters the profile takes
  std::vector<std::string> fitted_devices;  // the rows' devices, in order of first appearance
  CvSpec cv;                                // the held-out scheme run
  std::vector<double> held_out_errors;      // predicted / measured - 1 of each held-out row
  RelativeInterval interval;                // their 10th and 90th percentiles
  // The rows' span, and how fast the interval widens beyond it, from the held-out rows (of the
  // fitted rows, or of options.widening_rows) that lie beyond their fold's fitted rows: those of
  // `cv` and each device's smallest and largest model held out (--cv extremes) and predicted from
  // the sizes between. The widening covers 80% of them at every distance (model/interval.hpp,
  // widening_for_coverage). None under transfer.
  FitDomain domain;
  std::vector<HeldOutError> beyond;  // the held-out rows beyond their fold's rows, both schemes
  std::optional<double> widening_per_doubling;
  DeviceProfile profile;  // the base with the taken values, marked "table-fit"; extra as the base's
};

// Fits `fits` (one per row of `rows`, in order) from `base`. Error when the options do not check,
// there are no rows, or no row can be held out.
TableCalibration calibrate_table(const TableCalibrationOptions& options, const std::vector<FitRow>& fits,
                                 const std::vector<MeasuredRow>& rows, const DeviceProfile& base);

}  // namespace tpsim
