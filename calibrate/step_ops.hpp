// The ops of one training step on one device, in the order a framework runs them, built from the
// simulator's own builders (model/ops.hpp): what `tpsim replay` executes and what the kernel
// calibration's measurement plan takes its shapes from.
//
// One device holds the whole model (no FSDP, so no gathers, reductions or their casts):
//   embedding forward
//   blocks 0..K-1 forward
//   head forward (final norm, tied logits GEMM, fused cross-entropy) and head backward
//   blocks K-1..0 backward, each preceded by its forward again under full activation checkpointing,
//     or by its attention forward again under selective checkpointing
//   embedding backward
//   optimizer (gradient norm, clipping, AdamW) over every parameter of the model
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/architecture.hpp"
#include "model/ops.hpp"
#include "model/training.hpp"

namespace tpsim {

// Collects what the builders push, without OpList's fixed capacity.
class OpVector final : public OpSink {
 public:
  void push(const Op& op) override { ops.push_back(op); }
  std::vector<Op> ops;
};

enum class StepPart : uint8_t {
  kEmbeddingForward,
  kBlockForward,
  kHead,            // head forward, loss, head backward
  kBlockRecompute,  // a block's forward (full checkpointing) or attention forward (selective) run again before its
                    // backward
  kBlockBackward,
  kEmbeddingBackward,
  kOptimizer,
};
std::string_view to_string(StepPart p);
// Whether the part repeats once per block (what `--layers K` scales by n_layers / K).
bool is_block_part(StepPart p);

struct StepOp {
  Op op;
  StepPart part;
  int64_t layer;  // the block's index for block parts, -1 otherwise
};

struct StepOptions {
  int64_t micro_batch = 1;  // sequences
  int64_t seq_len = 0;
  int64_t layers = 0;  // blocks to build (1..n_layers); 0: all of the model's
  Checkpointing checkpointing = Checkpointing::kNone;
  Precision precision = Precision::kFp32;
};

// Error naming the option when it does not fit the model (layers outside 1..n_layers, ...).
std::vector<StepOp> training_step_ops(const ModelConfig& model, const StepOptions& options);

}  // namespace tpsim
