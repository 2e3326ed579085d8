// Numbers as the reports on stderr print them, one set for every command: printf's conversions,
// so that a value prints the same whichever report shows it.
#pragma once

#include <string>

namespace tpsim {

// `decimals` digits after the point: fixed(2.345, 1) -> "2.3" (printf "%.*f").
std::string fixed(double v, int decimals);

// `digits` significant digits, exponent form only when needed: general(2e-8) -> "2e-08",
// general(61.25) -> "61.2" (printf "%.*g"). A standard deviation of 2e-8 s must not print as 0.000.
std::string general(double v, int digits = 3);

}  // namespace tpsim
