// The one way tpsim reports bad input: an Error carrying a one-line message that names the input
// (file and line, or flag) and what is wrong. The command line prints it and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace tpsim {

// `s` on one line: control characters (a newline in a quoted value, say) written as escapes, and
// very long values cut, so that a message quoting user input stays one readable line.
std::string one_line(const std::string& s);

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(one_line(message)) {}
};

// A failure already reported by another process: the other ranks of a command run under mpirun,
// once rank 0 has printed the one line. The command line exits non-zero and prints nothing more.
class ReportedError : public Error {
 public:
  ReportedError() : Error("reported by rank 0") {}
};

}  // namespace tpsim
