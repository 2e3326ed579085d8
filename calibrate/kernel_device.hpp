// Which device a measurement backend runs on, as tpsim names devices: a GPU with a datasheet file
// (data/devices/<id>.yaml) is known by that id; a CPU, or a GPU without one, gets a spec made of
// what was measured, embedded in the profile that `calibrate kernels` writes.
#pragma once

#include <optional>
#include <string>

#include "calibrate/kernel_measure.hpp"
#include "io/profile_io.hpp"
#include "kernels/backend.hpp"
#include "model/device.hpp"

namespace tpsim {

// The datasheet device the backend's device is, or "": the name carries the id's family
// ("h100", "mi300x") and its memory matches the id's size suffix ("80gb") within 15%
// ("NVIDIA H100 80GB HBM3" -> h100_80gb; "NVIDIA A100-SXM4-40GB" -> a100_40gb).
std::string matching_datasheet_device(const BackendInfo& info);

// Lower case, runs of other characters as one '_': "NVIDIA GeForce RTX 4090" -> nvidia_geforce_rtx_4090.
std::string sanitized_device_id(const std::string& name);

// The spec of a device without a datasheet, from the backend's report and the measured copy
// bandwidth: compute units (threads on the CPU), memory, bandwidth, one device per node. Links are
// not applicable to one device; they must be positive, so they are set to the copy bandwidth and
// their sources say so. The peak per format is left 0 for the caller to set from its GEMMs.
DeviceSpec measured_device_spec(const std::string& id, const BackendInfo& info, const CopyBandwidth& copy, bool gpu);

// The CPU thread count a profile was measured with (its kernel calibration record), if any.
std::optional<int> calibrated_cpu_threads(const DeviceProfile& profile);
// Whether it timed them by the thread's CPU clock (TimingOptions::thread_cpu_clock).
bool calibrated_with_thread_clock(const DeviceProfile& profile);

// The reference GEMM of the calibration's noise verdict: its op, how it was timed and the mean
// of its medians at the start and the end of the measurements. None when the profile's record
// has no such timing (a profile not from calibrate kernels, or one written before the record).
struct CalibratedReference {
  Op op;
  TimingOptions timing;
  double median_s = 0;
};
std::optional<CalibratedReference> calibrated_reference(const DeviceProfile& profile);

}  // namespace tpsim
