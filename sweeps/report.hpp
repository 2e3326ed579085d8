// The row every command prints for a predicted configuration: llm-foundry's result columns, in
// its order and spelling, then tpsim's own (memory, step-time breakdown).
#pragma once

#include <string>
#include <vector>

#include "io/output.hpp"
#include "model/simulator.hpp"

namespace tpsim {

// Model, SeqLen (T), # GPUs, GPU, MFU, HFU, Model TFLOP, MicroBatchSize, GradAccum,
// GlobalBatchSize, Throughput (S/s), Throughput (T/s), Throughput (T/s/GPU), GlobalBatchSize (T),
// Precision, MP Mode, Sharding Strategy, Activation Checkpointing, Activation CPUOffload, NumParams.
const std::vector<std::string>& foundry_columns();
// Fits, Memory (GiB), Capacity (GiB), Step Time (s), GEMM (s), Attention (s), Other Compute (s),
// Exposed Comm (s), Optimizer (s), Overhead (s).
const std::vector<std::string>& extra_columns();
std::vector<std::string> prediction_columns();  // both

// A configuration that does not fit gets its memory columns and empty throughput columns.
std::vector<Cell> prediction_row(const std::string& model, const std::string& device, const TrainConfig& cfg,
                                 const Prediction& p);

}  // namespace tpsim
