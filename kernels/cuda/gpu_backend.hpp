// What the CUDA and HIP backends offer beyond kernels/backend.hpp's interface. Plain C++: callers
// need no CUDA headers.
#pragma once

#include "kernels/backend.hpp"

namespace tpsim {

// The achieved device-memory bandwidth probe of a GPU backend: a device-to-device copy kernel
// (16-byte loads and stores) over `bytes`, timed like an op (events, warm-up, L2 flush, median).
// The copy reads and writes `bytes` each: bandwidth = 2 * bytes / median_s.
// Reach it with dynamic_cast<GpuCopyProbe*>(backend.get()); a CPU backend is not one.
class GpuCopyProbe {
 public:
  virtual Timing time_copy(double bytes, const TimingOptions& options) = 0;

 protected:
  ~GpuCopyProbe() = default;
};

}  // namespace tpsim
