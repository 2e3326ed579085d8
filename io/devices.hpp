// Device datasheets from data/devices/<id>.yaml.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "model/device.hpp"

namespace tpsim {

DeviceSpec load_device(const std::string& id);  // data/devices/<id>.yaml; Error naming the known ids
DeviceSpec parse_device_yaml(const std::string& text, const std::string& origin);
std::vector<std::string> known_devices();

}  // namespace tpsim
