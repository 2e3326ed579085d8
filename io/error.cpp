#include "io/error.hpp"

#include <cstdio>

namespace tpsim {

std::string one_line(const std::string& s) {
  constexpr size_t kMax = 600;  // characters of the message kept
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= kMax) {
      out += "...";
      break;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace tpsim
