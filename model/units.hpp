// Units the code converts to and from in more than one place.
#pragma once

#include <cstdint>

namespace tpsim {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // bytes

// A non-negative count rounded to nearest, halves up: std::llround's value for every count the model
// rounds (widths, bytes, tokens), without its library call on the evaluation path (ModelConfig::d_ffn
// and the op builders run for every configuration a search evaluates).
inline int64_t round_count(double x) {
  return static_cast<int64_t>(x + 0.5);  // NOLINT(bugprone-incorrect-roundings): x >= 0, see above
}

}  // namespace tpsim
