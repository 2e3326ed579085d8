// Helpers for reading YAML with errors that name the file and line.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "io/error.hpp"

namespace tpsim::yaml {

// "file:line" of a node (1-based), or just the origin when the node has no position.
std::string where(const std::string& origin, const YAML::Node& node);

YAML::Node parse(const std::string& text, const std::string& origin);

// Runs a reader, turning any yaml-cpp exception escaping it (a node of an unexpected kind, say)
// into an Error naming the file and line.
template <typename F>
auto guard(const std::string& origin, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const YAML::Exception& e) {
    throw Error(origin + (e.mark.line >= 0 ? ":" + std::to_string(e.mark.line + 1) : "") +
                ": unexpected YAML: " + e.msg);
  }
}

int64_t as_int(const YAML::Node& node, const std::string& origin, const std::string& key);
double as_double(const YAML::Node& node, const std::string& origin, const std::string& key);
bool as_bool(const YAML::Node& node, const std::string& origin, const std::string& key);
std::string as_string(const YAML::Node& node, const std::string& origin, const std::string& key);

// A map key as a string; Error when the key is not a plain scalar (a list or map used as a key).
std::string key(const YAML::Node& k, const std::string& origin);

// A sequence length or batch size: a whole number from 1 to `max`; Error naming the key otherwise.
int64_t as_count(const YAML::Node& node, const std::string& origin, const std::string& key, int64_t max);

// " (did you mean NAME?)" for the known key nearest to `key` by edit distance (Levenshtein; the
// first of equals): the hint of an unknown-key error.
std::string did_you_mean(const std::string& key, std::initializer_list<const char*> known);
std::string did_you_mean(const std::string& key, const std::vector<std::string>& known);

}  // namespace tpsim::yaml
