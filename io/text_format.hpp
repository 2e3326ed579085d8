// Numbers as text, both ways. Printing: as the reports on stderr print them, one set for every
// command: printf's conversions, so that a value prints the same whichever report shows it.
// Reading: the one whole-text number reader every flag, table cell and YAML scalar goes through.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tpsim {

// `decimals` digits after the point: fixed(2.345, 1) -> "2.3" (printf "%.*f").
std::string fixed(double v, int decimals);

// `digits` significant digits, exponent form only when needed: general(2e-8) -> "2e-08",
// general(61.25) -> "61.2" (printf "%.*g"). A standard deviation of 2e-8 s must not print as 0.000.
std::string general(double v, int digits = 3);

// All of `text` read as a double, as std::stod reads it (leading spaces, "inf", "nan", hex floats
// included); nullopt when it is empty, has anything after the number, or is out of double's range.
// Callers check finiteness and bounds themselves: each names its own input in its error.
std::optional<double> parse_number(const std::string& text);

// All of `text` read as a base-10 integer, as std::stoll reads it; nullopt as for parse_number.
std::optional<int64_t> parse_integer(const std::string& text);

}  // namespace tpsim
