#include "io/text_format.hpp"

#include <cstdio>

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

}  // namespace tpsim
