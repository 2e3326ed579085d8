// A profile for a device no table has measured, transferred from its nearest measured sibling
// (`tpsim calibrate transfer`). The transfer starts from a profile fitted to its own device's
// tables and changes only what the two datasheets change:
//   - GEMM rates: the sibling's achieved fraction of its peak, times the target's peak of that
//     format (a format the sibling lacks: the fraction of the sibling's nearest format below it,
//     fp4 <- fp8 <- bf16, said so in the provenance);
//   - everything the cost model holds as a fraction of a datasheet figure (memory-bound and
//     cross-entropy efficiency of the HBM bandwidth, link efficiencies of NVLink and the NICs,
//     attention of the bf16 GEMM rate) is kept, so the rate it gives scales by the datasheet ratio;
//   - everything else (overheads, latencies, clock ratio, recompute share, allocator) is kept.
// A value the target's own default profile measured on the target (source "kernel") is kept.
// Every value says "transfer from <sibling>: ..." in its provenance (source "derived").
//
// Nearest: the candidates' tier first (0: same vendor and architecture, 1: same vendor, 2: another
// vendor), then the datasheet distance: the sum of |ln(target / sibling)| over the bf16 peak, HBM
// bandwidth, HBM capacity, scale-up link bandwidth and network bandwidth per GPU.
// Interval: the sibling's held-out interval widened on both sides by
// kTierWidening[tier] + kDistanceWidening * distance (docs/hardware.md).
#pragma once

#include <string>
#include <vector>

#include "io/profile_io.hpp"
#include "model/device.hpp"

namespace tpsim {

inline constexpr double kTierWidening[3] = {0.02, 0.08, 0.20};  // same architecture, same vendor, other vendor
inline constexpr double kDistanceWidening = 0.05;               // per unit of datasheet distance

// 0: same vendor and architecture; 1: same vendor; 2: another vendor (or either unknown).
int sibling_tier(const DeviceSpec& target, const DeviceSpec& sibling);
double datasheet_distance(const DeviceSpec& target, const DeviceSpec& sibling);
double interval_widening(int tier, double distance);

// A profile fitted to its own device's tables (extra.fit.fitted_devices is just its device and it
// was not transferred): what a transfer may start from.
bool measured_on_own_tables(const DeviceProfile& profile);

struct SiblingChoice {
  size_t index = 0;  // into the candidates
  int tier = 2;
  double distance = 0;
};
// The nearest of `candidates` (tier, then distance, then id for ties). Error when there is none.
SiblingChoice nearest_sibling(const DeviceSpec& target, const std::vector<DeviceSpec>& candidates);

struct TransferInput {
  const DeviceSpec* target = nullptr;
  const DeviceSpec* sibling = nullptr;
  const DeviceProfile* sibling_profile = nullptr;  // fitted to the sibling's own tables
  const DeviceProfile* target_base = nullptr;      // the target's reasoned default, if any
  SiblingChoice choice;                            // its tier and distance
};

// The transferred profile: parameters with provenance, the widened interval, extra.transfer.
DeviceProfile transfer_profile(const TransferInput& in);

}  // namespace tpsim
