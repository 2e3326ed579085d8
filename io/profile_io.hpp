// Device profiles (data/profiles/<device>.json): every CostParams value with where it came from.
//
// {
//   "format": "tpsim-profile", "version": 1, "device": "h100_80gb",
//   "parameters": {
//     "gemm_bf16_flops_per_s": {"value": 7.84e14, "unit": "FLOP/s", "source": "kernel",
//                               "detail": "Milabench (seed 003) ...", "stddev": null}, ...},
//   "prediction_interval": {...}, "fit": {...}, "measurements": [...]   (optional)
// }
// Every parameter of the registry must be present: a missing value is an error, never a default.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "model/device.hpp"
#include "model/interval.hpp"
#include "model/profile.hpp"

namespace tpsim {

// Where a value came from: a datasheet, a kernel measurement, a fit to measured training
// throughput, a collective measurement, reasoned but not measured, or computed from other values.
// The file spells them "datasheet", "kernel", "table-fit", "comm", "assumed", "derived".
enum class SourceKind : uint8_t { kDatasheet, kKernel, kTableFit, kComm, kAssumed, kDerived };
std::string_view to_string(SourceKind kind);
std::optional<SourceKind> parse_source_kind(std::string_view text);

struct ParamSource {
  SourceKind kind = SourceKind::kAssumed;
  std::string detail;
  double stddev = -1;  // from the fit's covariance; < 0 when not fitted
};

struct DeviceProfile {
  std::string device;
  // The device's spec when no data/devices/<id>.yaml describes it (a CPU measured by
  // `tpsim calibrate kernels`): "device_spec" in the file, with a source per value.
  std::optional<DeviceSpec> device_spec;
  CostParams params;
  std::map<std::string, ParamSource> sources;       // by parameter name, one per registry entry
  nlohmann::json extra = nlohmann::json::object();  // prediction_interval, fit report, measurements
  std::string origin;                               // file it was read from
};

inline constexpr int kProfileVersion = 1;

// How far to trust a profile's predictions: the 10th and 90th percentiles of held-out relative
// errors (predicted / measured - 1), stored as "prediction_interval" with how they were obtained.
// With "domain" (the fitted rows' span: parameters, seq_len, gpus, micro_batch, each [lo, hi]) and
// "widening" (added to each side of log(1 + error) per doubling outside it, model/interval.hpp), the
// interval widens for configurations beyond the rows; without them it is the same everywhere.
struct PredictionInterval {
  double p10 = 0, p90 = 0;
  int64_t rows = 0;
  std::string method;  // e.g. "tpsim validate --cv model --table data/measured/a100_80gb_bf16.md"
  std::optional<FitDomain> domain;
  double widening_per_doubling = 0;
  std::string widening_method;  // how the widening was measured
};
IntervalModel interval_model(const PredictionInterval& interval);
std::optional<PredictionInterval> prediction_interval(const DeviceProfile& profile);
void set_prediction_interval(DeviceProfile& profile, const PredictionInterval& interval);

// The cluster network a profile was fitted on, as `calibrate table` records it ("network":
// {"inter_node_gbps": per node, "gpus_per_node": ...}): the fitted link efficiencies and latencies
// are of that network. Profiles written before it, and kernel or comm calibrations, have none.
struct ProfileNetwork {
  double inter_node_gbps = 0;
  int64_t gpus_per_node = 0;
};
std::optional<ProfileNetwork> profile_network(const DeviceProfile& profile);
void set_profile_network(DeviceProfile& profile, const DeviceSpec& fitted_on);
// One line saying that `device`'s network (as this run sets it) is not the one `profile` was fitted
// on, or "" when it is (or the profile records none). Predicting so is allowed.
std::string network_mismatch_note(const DeviceProfile& profile, const DeviceSpec& device);

DeviceProfile parse_profile_json(const std::string& text, const std::string& origin);
DeviceProfile load_profile(const std::filesystem::path& path);
// data/profiles/<id>.json, the profile fitted to measured tables; for a device no table has
// measured, data/profiles/defaults/<id>.json, its reasoned default.
DeviceProfile load_shipped_profile(const std::string& device_id);
DeviceProfile load_default_profile(const std::string& device_id);  // data/profiles/defaults/<id>.json
std::string profile_to_json(const DeviceProfile& profile);
void save_profile(const std::filesystem::path& path, const DeviceProfile& profile);  // atomic

// Now in UTC as ISO 8601 ("2026-11-22T05:30:00Z"): how profiles date their fits and measurements.
std::string utc_timestamp();

}  // namespace tpsim
