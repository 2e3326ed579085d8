// Helpers for reading YAML with errors that name the file and line.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

namespace tpsim::yaml {

// "file:line" of a node (1-based), or just the origin when the node has no position.
std::string where(const std::string& origin, const YAML::Node& node);

YAML::Node parse(const std::string& text, const std::string& origin);

int64_t as_int(const YAML::Node& node, const std::string& origin, const std::string& key);
double as_double(const YAML::Node& node, const std::string& origin, const std::string& key);
bool as_bool(const YAML::Node& node, const std::string& origin, const std::string& key);
std::string as_string(const YAML::Node& node, const std::string& origin, const std::string& key);

}  // namespace tpsim::yaml
