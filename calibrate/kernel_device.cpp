#include "calibrate/kernel_device.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "io/devices.hpp"
#include "model/units.hpp"

namespace tpsim {
namespace {

std::string squeezed_lower(const std::string& s) {
  std::string out;
  for (unsigned char c : s)
    if (std::isalnum(c)) out += static_cast<char>(std::tolower(c));
  return out;
}

}  // namespace

std::string matching_datasheet_device(const BackendInfo& info) {
  const std::string name = squeezed_lower(info.device_name);
  const double gib = info.memory_bytes / kGiB;
  for (const std::string& id : known_devices()) {
    const size_t underscore = id.find('_');
    const std::string family = id.substr(0, underscore);
    if (name.find(family) == std::string::npos) continue;
    if (underscore == std::string::npos) return id;
    // "80gb": the board's memory in GB; the runtime reports a little less (ECC, reserved).
    const std::string size = id.substr(underscore + 1);
    if (name.find(size) != std::string::npos) return id;
    const double gb = std::atof(size.c_str());
    if (gb > 0 && gib > 0 && std::fabs(gib * 1.073741824 - gb) <= 0.15 * gb) return id;
  }
  return "";
}

std::string sanitized_device_id(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (std::isalnum(c)) out += static_cast<char>(std::tolower(c));
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "device" : out;
}

DeviceSpec measured_device_spec(const std::string& id, const BackendInfo& info, const CopyBandwidth& copy, bool gpu) {
  DeviceSpec d;
  d.id = id;
  d.name = info.device_name;
  const std::string run =
      "kernel run: " + copy.method + " on " + info.device_name + ", " + utc_timestamp().substr(0, 10);
  d.memory_bytes = info.memory_bytes;
  d.sources["memory_gib"] = gpu ? "the " + info.backend + " runtime's total device memory"
                                : "MemTotal in /proc/meminfo on the measuring machine";
  d.hbm_bytes_per_s = copy.bytes_per_s;
  d.sources["hbm_gb_per_s"] = run + "; measured, no datasheet";
  d.compute_units = info.compute_units;
  d.sources["compute_units"] = gpu ? "the " + info.backend + " runtime's multiprocessor count"
                                   : "threads the CPU kernels ran on (tpsim calibrate kernels --threads)";
  d.gpus_per_node = 1;
  d.sources["gpus_per_node"] = "one device measured alone";
  d.intra_node_bytes_per_s = copy.bytes_per_s;
  d.sources["intra_node_gb_per_s"] =
      "not applicable (one device, no links); set to the measured copy bandwidth because a spec needs a positive value";
  d.inter_node_bytes_per_s = copy.bytes_per_s;
  d.sources["inter_node_gbps_per_node"] =
      "not applicable (one device, no network); set to the measured copy bandwidth because a spec needs a positive value";
  return d;
}

std::optional<int> calibrated_cpu_threads(const DeviceProfile& profile) {
  if (!profile.extra.contains("kernel_calibration")) return std::nullopt;
  const auto& k = profile.extra["kernel_calibration"];
  if (!k.is_object() || !k.contains("threads") || !k["threads"].is_number_integer()) return std::nullopt;
  return k["threads"].get<int>();
}

bool calibrated_with_thread_clock(const DeviceProfile& profile) {
  if (!profile.extra.contains("kernel_calibration")) return false;
  const auto& k = profile.extra["kernel_calibration"];
  return k.is_object() && k.value("clock", "") == "thread_cpu";
}

std::optional<CalibratedReference> calibrated_reference(const DeviceProfile& profile) {
  if (!profile.extra.contains("kernel_calibration")) return std::nullopt;
  const auto& k = profile.extra["kernel_calibration"];
  if (!k.is_object() || !k.contains("noise") || !k["noise"].is_object()) return std::nullopt;
  const auto& r = k["noise"].value("reference", nlohmann::json());
  if (!r.is_object() || !r.contains("start") || !r.contains("end") || !r.contains("timing")) return std::nullopt;
  const auto median = [](const nlohmann::json& t) {
    return t.is_object() && t.contains("median_s") && t["median_s"].is_number() ? t["median_s"].get<double>() : 0.0;
  };
  const std::optional<DType> dtype = parse_dtype(r.value("dtype", ""));
  const std::string shape = r.value("shape", "");
  const long long size = std::atoll(shape.c_str());  // "384x384x384 NT"
  const double start = median(r["start"]), end = median(r["end"]);
  const auto& t = r["timing"];
  if (!dtype || size < 1 || !(start > 0) || !(end > 0) || !t.is_object()) return std::nullopt;
  CalibratedReference c;
  c.op = reference_gemm(*dtype, size);
  c.timing.warmup = t.value("warmup", c.timing.warmup);
  c.timing.min_repetitions = t.value("min_repetitions", c.timing.min_repetitions);
  c.timing.max_repetitions = t.value("max_repetitions", c.timing.max_repetitions);
  c.timing.min_seconds = t.value("min_seconds", c.timing.min_seconds);
  c.timing.max_seconds = t.value("max_seconds", c.timing.max_seconds);
  c.timing.flush_cache = t.value("flush_cache", c.timing.flush_cache);
  c.timing.thread_cpu_clock = calibrated_with_thread_clock(profile);
  c.median_s = 0.5 * (start + end);
  return c;
}

}  // namespace tpsim
