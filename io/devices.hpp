// Device datasheets from data/devices/<id>.yaml.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
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

}  // namespace tpsim
