// predict(): one training configuration in, step time, throughput, MFU/HFU and memory out.
// The chain: build the ops of a micro-batch -> cost them on the device -> lay the blocks' compute
// and FSDP collectives on two streams -> add the optimizer -> check memory -> llm-foundry metrics.
#pragma once

#include <string>

#include "model/architecture.hpp"
#include "model/device.hpp"
#include "model/memory.hpp"
#include "model/profile.hpp"
#include "model/schedule.hpp"
#include "model/training.hpp"

namespace tpsim {

// Where the step's time goes; the parts sum to the step time.
struct StepBreakdown {
  double gemm_s = 0;
  double attention_s = 0;
  double other_compute_s = 0;  // norms, activations, residuals, embeddings, loss, FSDP casts
  double exposed_comm_s = 0;   // collectives compute does not hide, and compute slowed by them
  double optimizer_s = 0;
  double overhead_s = 0;       // fixed per-micro-batch and per-step idle time
};

enum class Feasibility : uint8_t { kFits, kOutOfMemory };

struct Prediction {
  Feasibility feasibility = Feasibility::kFits;
  double step_s = 0;
  double seq_per_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;  // fractions
  double hfu = 0;
  double model_flops_per_s_per_gpu = 0;
  int64_t n_params = 0;
  StepBreakdown time;
  Timeline timeline;
  MemoryBreakdown memory;
  double capacity_bytes = 0;

  bool fits() const { return feasibility == Feasibility::kFits; }
};

// Empty when the simulator can model this configuration on this device, else the reason, naming
// the value at fault (a micro-batch larger than the per-device batch, a format the device lacks...).
std::string check_config(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                         const TrainConfig& cfg);

// Requires check_config(...) to be empty. Allocates nothing; safe to call from many threads.
Prediction predict(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                   const TrainConfig& cfg);

}  // namespace tpsim
