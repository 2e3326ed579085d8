#include "io/yaml_util.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "io/error.hpp"
#include "io/names.hpp"
#include "io/text_format.hpp"

namespace tpsim::yaml {

std::string where(const std::string& origin, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return origin;
  return origin + ":" + std::to_string(mark.line + 1);
}

YAML::Node parse(const std::string& text, const std::string& origin) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const std::string at = e.mark.line >= 0 ? ":" + std::to_string(e.mark.line + 1) : "";
    throw Error(origin + at + ": not valid YAML: " + e.msg);
  }
}

namespace {
std::string scalar_or_throw(const YAML::Node& node, const std::string& origin, const std::string& key,
                            const char* expected) {
  if (!node.IsScalar())
    throw Error(where(origin, node) + ": " + key + " must be " + expected + ", not a " +
                (node.IsMap()        ? "map"
                 : node.IsSequence() ? "list"
                                     : "null"));
  return node.Scalar();
}
}  // namespace

int64_t as_int(const YAML::Node& node, const std::string& origin, const std::string& key) {
  const std::string s = scalar_or_throw(node, origin, key, "an integer");
  if (const std::optional<int64_t> v = parse_integer(s)) return *v;
  // Accept integral floats such as 4.0 or 1e3.
  const std::optional<double> d = parse_number(s);
  if (d && std::isfinite(*d) && *d == std::floor(*d) && std::fabs(*d) < 9.0e18) return static_cast<int64_t>(*d);
  throw Error(where(origin, node) + ": " + key + " must be an integer, got '" + s + "'");
}

double as_double(const YAML::Node& node, const std::string& origin, const std::string& key) {
  const std::string s = scalar_or_throw(node, origin, key, "a number");
  const std::optional<double> v = parse_number(s);
  if (!v) throw Error(where(origin, node) + ": " + key + " must be a number, got '" + s + "'");
  if (!std::isfinite(*v)) throw Error(where(origin, node) + ": " + key + " must be finite, got '" + s + "'");
  return *v;
}

bool as_bool(const YAML::Node& node, const std::string& origin, const std::string& key) {
  const std::string s = scalar_or_throw(node, origin, key, "true or false");
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  throw Error(where(origin, node) + ": " + key + " must be true or false, got '" + s + "'");
}

std::string as_string(const YAML::Node& node, const std::string& origin, const std::string& key) {
  return scalar_or_throw(node, origin, key, "a string");
}

std::string key(const YAML::Node& k, const std::string& origin) {
  if (!k.IsScalar()) throw Error(where(origin, k) + ": a key must be a plain name, not a list or map");
  return k.Scalar();
}

int64_t as_count(const YAML::Node& node, const std::string& origin, const std::string& key, int64_t max) {
  const int64_t v = as_int(node, origin, key);
  if (v < 1 || v > max)
    throw Error(where(origin, node) + ": " + key + " must be between 1 and " + std::to_string(max) + ", got " +
                std::to_string(v));
  return v;
}

template <typename Keys>
std::string nearest_of(const std::string& key, const Keys& known) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const auto& k : known) {
    const size_t d = edit_distance(key, k);
    if (d < best_distance) best = k, best_distance = d;
  }
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

std::string did_you_mean(const std::string& key, std::initializer_list<const char*> known) {
  return nearest_of(key, known);
}
std::string did_you_mean(const std::string& key, const std::vector<std::string>& known) {
  return nearest_of(key, known);
}

}  // namespace tpsim::yaml
