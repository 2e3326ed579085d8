#include "io/devices.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "io/error.hpp"
#include "io/files.hpp"
#include "io/names.hpp"
#include "io/yaml_util.hpp"
#include "model/units.hpp"

namespace tpsim {
namespace fs = std::filesystem;

std::vector<std::string> known_devices() {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(data_dir() / "devices", ec))
    if (e.path().extension() == ".yaml") ids.push_back(e.path().stem().string());
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Ids are llm-foundry's GPU column values, matched ignoring case (H100_80GB is h100_80gb).
DeviceSpec load_device(const std::string& given) {
  const std::string id = to_lower(given);
  const fs::path path = data_dir() / "devices" / (id + ".yaml");
  if (id.empty() || id.find('/') != std::string::npos || !fs::exists(path)) {
    const std::vector<std::string> ids = known_devices();
    std::string known;
    for (const auto& k : ids) known += (known.empty() ? "" : ", ") + k;
    throw Error("unknown device '" + given + "'" + did_you_mean_phrase(given, ids) + " (known: " + known + ")");
  }
  DeviceSpec d = parse_device_yaml(read_text_file(path, "device file"), path.string());
  if (d.id != id) throw Error(path.string() + ": file is named for " + id + " but describes device '" + d.id + "'");
  return d;
}

namespace {
DeviceSpec parse_device_yaml_unguarded(const std::string& text, const std::string& origin);
}

DeviceSpec parse_device_yaml(const std::string& text, const std::string& origin) {
  return yaml::guard(origin, [&] { return parse_device_yaml_unguarded(text, origin); });
}

namespace {

// Every key of a device file is one tpsim reads.
void check_device_keys(const YAML::Node& root, const std::string& origin) {
  const std::set<std::string> known = {"device",
                                       "name",
                                       "vendor",
                                       "architecture",
                                       "peak_dense_tflops",
                                       "memory_gib",
                                       "hbm_gb_per_s",
                                       "compute_units",
                                       "gpus_per_node",
                                       "scale_up_domain_gpus",
                                       "intra_node_gb_per_s",
                                       "inter_node_gbps_per_node",
                                       "scaled_formats",
                                       "boost_clock_mhz"};
  for (const auto& kv : root) {
    const std::string key = yaml::key(kv.first, origin);
    if (!known.count(key)) throw Error(yaml::where(origin, kv.first) + ": unknown key '" + key + "'");
  }
}

// scaled_formats: {value: [mxfp8, ...], source: "..."}, the block-scaled formats the tensor cores run.
void read_scaled_formats(const YAML::Node& f, const std::string& origin, DeviceSpec& d) {
  if (!f.IsMap() || !f["value"] || !f["source"] || !f["value"].IsSequence())
    throw Error(yaml::where(origin, f) + ": scaled_formats must be {value: [mxfp8, ...], source: \"...\"}");
  for (const auto& e : f["value"]) {
    const std::string name = yaml::as_string(e, origin, "scaled_formats");
    const auto fmt = parse_scaled_format(name);
    if (!fmt) throw Error(yaml::where(origin, e) + ": unknown scaled format '" + name + "' (mxfp8, mxfp4, nvfp4)");
    d.scaled_formats[static_cast<int>(*fmt)] = true;
  }
  d.sources["scaled_formats"] = yaml::as_string(f["source"], origin, "scaled_formats.source");
}

DeviceSpec parse_device_yaml_unguarded(const std::string& text, const std::string& origin) {
  const YAML::Node root = yaml::parse(text, origin);
  if (!root.IsMap()) throw Error(origin + ": a device file must be a YAML map");
  DeviceSpec d;
  check_device_keys(root, origin);
  const auto need = [&](const char* key) {
    const YAML::Node n = root[key];
    if (!n) throw Error(origin + ": missing required key " + key);
    return n;
  };
  // A sourced value: {value: number, source: "where it comes from"}; both required, value > 0.
  const auto sourced = [&](const YAML::Node& n, const std::string& key, double& out) {
    if (!n.IsMap() || !n["value"] || !n["source"])
      throw Error(yaml::where(origin, n) + ": " + key + " must be {value: ..., source: \"...\"}");
    out = yaml::as_double(n["value"], origin, key);
    if (!(out > 0)) throw Error(yaml::where(origin, n) + ": " + key + " must be positive");
    const std::string src = yaml::as_string(n["source"], origin, key + ".source");
    if (src.empty()) throw Error(yaml::where(origin, n) + ": " + key + " has an empty source");
    d.sources[key] = src;
  };
  d.id = yaml::as_string(need("device"), origin, "device");
  d.name = yaml::as_string(need("name"), origin, "name");
  if (root["vendor"]) d.vendor = yaml::as_string(root["vendor"], origin, "vendor");
  if (root["architecture"]) d.architecture = yaml::as_string(root["architecture"], origin, "architecture");
  const YAML::Node peaks = need("peak_dense_tflops");
  if (!peaks.IsMap() || peaks.size() == 0)
    throw Error(yaml::where(origin, peaks) + ": peak_dense_tflops must be a map of formats");
  for (const auto& kv : peaks) {
    const std::string fmt = yaml::key(kv.first, origin);
    const auto t = parse_dtype(fmt);
    if (!t)
      throw Error(yaml::where(origin, kv.first) + ": unknown number format '" + fmt +
                  "' (fp8, bf16, fp16, tf32, fp32, fp4)");
    double tflops = 0;
    sourced(kv.second, "peak_dense_tflops." + fmt, tflops);
    d.peak_flops_per_s[static_cast<int>(*t)] = tflops * 1e12;
  }
  double v = 0;
  sourced(need("memory_gib"), "memory_gib", v);
  d.memory_bytes = v * kGiB;
  sourced(need("hbm_gb_per_s"), "hbm_gb_per_s", v);
  d.hbm_bytes_per_s = v * 1e9;
  // Counts: whole numbers, checked before they become ints (a huge value would not fit one).
  const auto count = [&](const char* key, double most) {
    const YAML::Node n = need(key);
    double x = 0;
    sourced(n, key, x);
    if (!(x >= 1 && x <= most) || x != std::floor(x))
      throw Error(yaml::where(origin, n) + ": " + key + " must be a whole number from 1 to " +
                  std::to_string(int64_t(most)));
    return static_cast<int>(x);
  };
  d.compute_units = count("compute_units", 1e6);
  if (const YAML::Node n = root["boost_clock_mhz"]) {
    sourced(n, "boost_clock_mhz", v);
    d.boost_clock_hz = v * 1e6;
  }
  d.gpus_per_host = count("gpus_per_node", 1e4);
  d.gpus_per_node = root["scale_up_domain_gpus"] ? count("scale_up_domain_gpus", 1e5) : d.gpus_per_host;
  if (d.gpus_per_node % d.gpus_per_host != 0)
    throw Error(origin + ": scale_up_domain_gpus " + std::to_string(d.gpus_per_node) +
                " is not a whole number of hosts of gpus_per_node " + std::to_string(d.gpus_per_host));
  sourced(need("intra_node_gb_per_s"), "intra_node_gb_per_s", v);
  d.intra_node_bytes_per_s = v * 1e9;
  sourced(need("inter_node_gbps_per_node"), "inter_node_gbps_per_node", v);
  // The file gives a host's NICs; the collective model's node is the scale-up domain.
  d.inter_node_bytes_per_s = v * 1e9 / 8.0 * (d.gpus_per_node / d.gpus_per_host);
  if (const YAML::Node f = root["scaled_formats"]) read_scaled_formats(f, origin, d);
  return d;
}
}  // namespace

}  // namespace tpsim

namespace tpsim {

nlohmann::json device_spec_to_json(const DeviceSpec& d) {
  const auto sourced = [&](double value, const std::string& key) {
    const auto it = d.sources.find(key);
    return nlohmann::json{{"value", value}, {"source", it != d.sources.end() ? it->second : "unknown"}};
  };
  nlohmann::json j;
  j["device"] = d.id;
  j["name"] = d.name;
  nlohmann::json peaks = nlohmann::json::object();
  for (int t = 0; t < kNumDTypes; ++t)
    if (d.peak_flops_per_s[t] > 0) {
      const std::string fmt(kDTypeNames[t]);
      peaks[fmt] = sourced(d.peak_flops_per_s[t] / 1e12, "peak_dense_tflops." + fmt);
    }
  j["peak_dense_tflops"] = peaks;
  j["memory_gib"] = sourced(d.memory_bytes / kGiB, "memory_gib");
  j["hbm_gb_per_s"] = sourced(d.hbm_bytes_per_s / 1e9, "hbm_gb_per_s");
  j["compute_units"] = sourced(d.compute_units, "compute_units");
  if (d.boost_clock_hz > 0) j["boost_clock_mhz"] = sourced(d.boost_clock_hz / 1e6, "boost_clock_mhz");
  const int host = d.gpus_per_host > 0 ? d.gpus_per_host : d.gpus_per_node;
  j["gpus_per_node"] = sourced(host, "gpus_per_node");
  if (host != d.gpus_per_node) j["scale_up_domain_gpus"] = sourced(d.gpus_per_node, "scale_up_domain_gpus");
  j["intra_node_gb_per_s"] = sourced(d.intra_node_bytes_per_s / 1e9, "intra_node_gb_per_s");
  j["inter_node_gbps_per_node"] =
      sourced(d.inter_node_bytes_per_s * 8.0 / 1e9 * host / d.gpus_per_node, "inter_node_gbps_per_node");
  if (!d.vendor.empty()) j["vendor"] = d.vendor;
  if (!d.architecture.empty()) j["architecture"] = d.architecture;
  nlohmann::json formats = nlohmann::json::array();
  for (int f = 0; f < kNumScaledFormats; ++f)
    if (d.scaled_formats[f]) formats.push_back(std::string(kScaledFormatNames[f]));
  if (!formats.empty()) {
    const auto it = d.sources.find("scaled_formats");
    j["scaled_formats"] = {{"value", formats}, {"source", it != d.sources.end() ? it->second : "unknown"}};
  }
  return j;
}

// YAML is a superset of JSON: the YAML reader checks the fields and their sources.
DeviceSpec parse_device_json(const nlohmann::json& j, const std::string& origin) {
  return parse_device_yaml(j.dump(), origin);
}

void apply_network(DeviceSpec& d, const ClusterNetwork& n) {
  if (n.gpus_per_node) {
    // The scale-up domain (and the host) becomes this many GPUs; the network per node is kept.
    d.gpus_per_node = d.gpus_per_host = static_cast<int>(*n.gpus_per_node);
    d.sources["gpus_per_node"] = "--gpus-per-node";
  }
  if (n.inter_node_gbps) {
    d.inter_node_bytes_per_s = *n.inter_node_gbps * 1e9 / 8.0;
    d.sources["inter_node_gbps_per_node"] = "--inter-node-gbps";
  }
}

}  // namespace tpsim
