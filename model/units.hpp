// Units the code converts to and from in more than one place.
#pragma once

namespace tpsim {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // bytes

}  // namespace tpsim
