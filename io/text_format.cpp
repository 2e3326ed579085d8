#include "io/text_format.hpp"

#include <cstdio>
#include <stdexcept>

namespace tpsim {

std::string fixed(double v, int decimals) {
  char buf[400];  // "%.*f" of 1e308 has 309 digits before the point
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string general(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

namespace {

// `read` is std::stod or std::stoll: the value when it used every character of `text`.
template <class T, class Read>
std::optional<T> read_whole(const std::string& text, Read read) {
  size_t used = 0;
  try {
    const T v = read(text, &used);
    if (used == text.size()) return v;
  } catch (const std::logic_error&) {  // std::invalid_argument (no number) or std::out_of_range
  }
  return std::nullopt;
}

}  // namespace

std::optional<double> parse_number(const std::string& text) {
  return read_whole<double>(text, [](const std::string& s, size_t* used) { return std::stod(s, used); });
}

std::optional<int64_t> parse_integer(const std::string& text) {
  return read_whole<int64_t>(text, [](const std::string& s, size_t* used) { return std::stoll(s, used, 10); });
}

}  // namespace tpsim
