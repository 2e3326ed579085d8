// The one way tpsim reports bad input: an Error carrying a one-line message that names the input
// (file and line, or flag) and what is wrong. The command line prints it and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace tpsim {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace tpsim
