// Device datasheets from data/devices/<id>.yaml.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/device.hpp"

namespace tpsim {

DeviceSpec load_device(const std::string& id);  // data/devices/<id>.yaml; Error naming the known ids
DeviceSpec parse_device_yaml(const std::string& text, const std::string& origin);

// The same fields as a device YAML file, as JSON (a profile of a device without a datasheet file,
// such as a CPU measured by `tpsim calibrate kernels`, carries its spec this way).
nlohmann::json device_spec_to_json(const DeviceSpec& d);
DeviceSpec parse_device_json(const nlohmann::json& j, const std::string& origin);
std::vector<std::string> known_devices();

// The cluster's network as a command sets it (--gpus-per-node, --inter-node-gbps): what a device
// file says of a node is the usual build, and clusters differ. Each value given replaces the
// device's, and its source says so; an unset one keeps the file's.
struct ClusterNetwork {
  std::optional<int64_t> gpus_per_node;
  std::optional<double> inter_node_gbps;  // per node, per direction (all NICs of the node together)
  bool empty() const { return !gpus_per_node && !inter_node_gbps; }
};
void apply_network(DeviceSpec& device, const ClusterNetwork& network);

}  // namespace tpsim
