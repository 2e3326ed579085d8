// Predicting the rows of measured tables: shared by `validate`, `calibrate table` and the
// held-out cross-validation.
#pragma once

#include <string>
#include <vector>

#include "calibrate/table_fit.hpp"
#include "io/measured_table.hpp"
#include "model/simulator.hpp"
#include "cli/context.hpp"

namespace tpsim {

// A measured row resolved against the catalogue and the device datasheets.
struct ResolvedRow {
  MeasuredRow row;
  const ModelConfig* model = nullptr;
  const DeviceSpec* device = nullptr;
  TrainConfig cfg;
};

// Reads tables and resolves every row; an unknown model or GPU, or a configuration the simulator
// cannot model, is an Error naming the row's file and line. A row that defines its own model
// (vTrain's) resolves to it, kept by `ctx`. `options`: the framework of rows whose table has no
// Framework column (--framework) and the GPU of tables without a GPU column (--device). Reader
// warnings go to `warnings`. With `refused`, a row whose configuration the simulator refuses (a
// layout it does not model, activation offload) is left out and its one line ("file:line: why")
// added there instead of raised; an unknown model or GPU is still an Error.
std::vector<ResolvedRow> load_rows(Context& ctx, const std::vector<std::string>& tables,
                                   std::vector<std::string>& warnings, const MeasuredTableOptions& options = {},
                                   std::vector<std::string>* refused = nullptr);

struct RowResult {
  const ResolvedRow* row = nullptr;
  Prediction prediction;
  // Relative, of what the row measured: predicted / measured - 1 of step time when it measured step
  // time, else (predicted - measured) / measured of throughput.
  double error = 0;
  std::string held_out;  // cross-validation: the fold that held this row out
  double doublings = 0;  // cross-validation: how far the row lies beyond its fold's fitted rows
};

RowResult predict_row(const ResolvedRow& r, const CostParams& params);

// Rows for a table fit, each on its device's base profile (a --profile, else the reasoned default).
// The rows a fit reads, each starting from its device's base_profile; `held_out`: from
// held_out_base_profile (validate --cv).
std::vector<FitRow> fit_rows(Context& ctx, const std::vector<ResolvedRow>& rows, bool held_out = false);

// What a table fit adjusts for these rows: the default set, plus the fp8 GEMM rate when fp8 rows
// are present and no kernel run measured it.
std::vector<const ParamInfo*> table_fit_parameters(Context& ctx, const std::vector<ResolvedRow>& rows);

// "a,b,c" of registry parameter names, looked up once here; Error naming the flag and the unknown name.
std::vector<const ParamInfo*> parse_parameter_list(const std::string& flag, const std::string& text);

// Summary statistics of relative errors.
struct ErrorSummary {
  int64_t rows = 0;
  double mape = 0;  // mean |error|, relative
  double median_abs = 0;
  double max_abs = 0;
  int64_t over_15 = 0;      // rows off by more than 15%
  double p10 = 0, p90 = 0;  // signed percentiles
};
ErrorSummary summarize_errors(const std::vector<double>& errors);

}  // namespace tpsim
