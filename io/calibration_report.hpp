// The records and reports of the calibrations (calibrate/): the JSON each writes into its
// profile's `extra` (kernel_calibration, comm, fit), and the brief report each prints on stderr,
// written from the typed results. Key order and wording are what readers of older profiles and the
// tests expect: a change here changes every profile written from now on.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "calibrate/comm_calibration.hpp"
#include "calibrate/kernel_calibration.hpp"
#include "calibrate/replay.hpp"
#include "calibrate/table_calibration.hpp"
#include "io/output.hpp"
#include "io/terminal.hpp"

namespace tpsim {

// extra.kernel_calibration: the command, backend, plan, every measurement with the fit's residual,
// the held-out errors and the noise verdict.
nlohmann::json kernel_calibration_json(const KernelCalibration& c, const std::string& command_line);

// The brief report after the profile is written: device, measurements, fitted values, errors,
// noise; `total_s` the run's seconds in all, `out` the profile written.
void print_kernel_calibration(std::ostream& os, const KernelCalibration& c, const std::string& out, double total_s);

// extra.comm: the job, the links, the tiers measured, the fit and every measurement.
nlohmann::json comm_calibration_json(const CommCalibration& c, const std::string& command_line);

// Rank 0's brief report, in the manner of calibrate table's: the job, the device's links, a table of
// the measurements with the fit's prediction, the fitted values, the tiers kept from the base.
void print_comm_calibration(std::ostream& os, const CommCalibration& c, const std::string& out);

// extra.fit: the command, tables, loss, solver, parameters, outliers and every row's residual.
// `base_profile` the base's origin.
nlohmann::json table_calibration_json(const TableCalibration& c, const TableCalibrationOptions& o,
                                      const std::vector<MeasuredRow>& rows, const std::string& base_profile,
                                      const std::string& command_line);

// tpsim replay's output: the step's row (CSV: only it, a table a script reads) and, in md and JSON,
// the ops' rows; md adds how the step was measured and scaled. `precision`, `backend` and
// `device_id` as the run names them; `out`: the format, --columns and the terminal (io/terminal.hpp).
std::string render_replay(const Replay& r, const ReplayOptions& o, const std::string& precision,
                          const std::string& backend, const std::string& device_id, const OutputOptions& out);

}  // namespace tpsim
