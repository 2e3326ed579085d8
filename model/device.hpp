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
  double hbm_bytes_per_s = 0;         // datasheet memory bandwidth
  int compute_units = 0;              // SMs (NVIDIA) or CUs (AMD): what GEMM tiles are spread over
  int gpus_per_node = 0;
  double intra_node_bytes_per_s = 0;  // per GPU, per direction (NVLink / Infinity Fabric)
  double inter_node_bytes_per_s = 0;  // per node, per direction (all NICs of the node together)
  std::map<std::string, std::string> sources;  // value name -> where the value comes from

  bool supports(DType t) const { return peak_flops_per_s[static_cast<int>(t)] > 0; }
  double peak(DType t) const { return peak_flops_per_s[static_cast<int>(t)]; }
};

}  // namespace tpsim
