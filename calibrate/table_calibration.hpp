// Table calibration (`tpsim calibrate table`): fit a device profile's system-level parameters to
// measured training tables with Ceres (table_fit.hpp), estimate the prediction interval from
// held-out fits (crossval.hpp), and return the profile with each taken value's provenance. The
// record of the fit (the profile's extra.fit) is written from the result by io/calibration_report.hpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "calibrate/crossval.hpp"
#include "calibrate/table_fit.hpp"
#include "io/measured_table.hpp"
#include "io/profile_io.hpp"

namespace tpsim {

struct TableCalibrationOptions {
  std::string device;   // the device the profile is for
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
  std::vector<std::string> tables;  // the tables' files, for the provenance
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
  DeviceProfile profile;  // the base with the taken values, marked "table-fit"; extra as the base's
};

// Fits `fits` (one per row of `rows`, in order) from `base`. Error when the options do not check,
// there are no rows, or no row can be held out.
TableCalibration calibrate_table(const TableCalibrationOptions& options, const std::vector<FitRow>& fits,
                                 const std::vector<MeasuredRow>& rows, const DeviceProfile& base);

}  // namespace tpsim
