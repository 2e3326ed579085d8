// A device as its datasheet describes it. What kernels achieve on it is in CostParams (profile.hpp).
#pragma once

#include <array>
#include <map>
#include <string>

#include "model/training.hpp"

namespace tpsim {

struct DeviceSpec {
  std::string id;    // llm-foundry's GPU column spelling: "a100_80gb", "h100_80gb", ...
  std::string name;  // marketing name
  std::array<double, kNumDTypes> peak_flops_per_s{};  // dense datasheet peak per format; 0: no such format
  double memory_bytes = 0;
  double hbm_bytes_per_s = 0;  // datasheet memory bandwidth
  int compute_units = 0;       // SMs (NVIDIA) or CUs (AMD): what GEMM tiles are spread over
  // The boost clock the datasheet's tensor peak is quoted at; 0 where the file gives none. With
  // compute_units it sets the rate of kernels that do not use a newer generation's tensor-core
  // instructions (calibrate/table_fit.hpp, sm_clock_scale).
  double boost_clock_hz = 0;
  // The "node" of the collective model: the GPUs of one scale-up domain (NVLink / Infinity Fabric),
  // which is the server for an 8-GPU HGX or OAM board and the whole rack for GB200/GB300 NVL72
  // (72 GPUs on one NVLink switch fabric over 18 trays of 4). Everything that asks whether a group
  // stays on its node (parallelism.hpp) asks this.
  int gpus_per_node = 0;
  int gpus_per_host = 0;              // GPUs of one server or compute tray (the file's gpus_per_node)
  double intra_node_bytes_per_s = 0;  // per GPU, per direction (NVLink / Infinity Fabric)
  // Per scale-up domain ("node" as above), per direction: all NICs of its hosts together.
  double inter_node_bytes_per_s = 0;
  std::string vendor;        // "nvidia", "amd", ...: how profiles pick the nearest measured sibling
  std::string architecture;  // "ampere", "hopper", "blackwell", "cdna3", ...
  std::array<bool, kNumScaledFormats> scaled_formats{};  // block-scaled formats the tensor cores take
  std::map<std::string, std::string> sources;            // value name -> where the value comes from

  bool supports(DType t) const { return peak_flops_per_s[static_cast<int>(t)] > 0; }
  bool supports(ScaledFormat f) const { return scaled_formats[static_cast<int>(f)]; }
  double peak(DType t) const { return peak_flops_per_s[static_cast<int>(t)]; }
};

}  // namespace tpsim
