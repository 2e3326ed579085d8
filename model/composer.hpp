// A Composer (llm-foundry) training step: FSDP under one of its sharding strategies (or DDP), every
// rank holding whole layers, the blocks' gathers and reductions on a communication stream beside
// the compute (schedule.hpp), the optimizer over the rank's shard, and the memory of one GPU
// (memory.hpp). Its rules: data parallelism only, whole nodes for HYBRID_SHARD, a global batch that
// is a multiple of the GPU count (a smaller last micro-batch allowed).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "model/framework.hpp"
#include "model/simulator.hpp"

namespace tpsim {

struct ComputeCosts : MicroBatchOpCosts {
  int64_t micro_batch = -1, seq_len = -1;
  Precision precision = Precision::kAmpBf16;
  Lora lora;
  bool torch_compile = false;
  // Of block_fwd's saved bytes, what only the attention kernel keeps (selective checkpointing drops
  // it). block_fwd.attention is the attention forward's seconds, which selective checkpointing runs
  // again before each block's backward.
  double block_attention_only_bytes = 0;
  double block_backward_buffer_bytes = 0;  // memory.hpp block_backward_buffer_bytes
};

// The costs of one configuration that depend only on its FSDP layout: the casts around a block's
// collectives, the collectives' seconds, and the optimizer over the local shard.
struct FsdpCosts {
  Sharding sharding = Sharding::kFullShard;
  int64_t n_gpus = -1, seq_len = -1;
  Precision precision = Precision::kAmpBf16;
  MpMode mp_mode = MpMode::kDefault;
  FsdpLayout layout;
  CategoryTotals cast, reduce_casts, optimizer;
  double block_gather_s = 0, root_gather_s = 0, block_reduce_s = 0, root_reduce_s = 0;
  int64_t shard_degree = 0, replicate_degree = 0;  // Layout's HSDP degrees, as given
  Lora lora;
};

// Predicts many Composer configurations of one model on one device and profile. The ops of a
// micro-batch are built and costed once per (micro-batch, sequence length, precision) and shared by
// every sharding strategy, checkpointing choice and GPU count predicted after it; FSDP's casts,
// collectives and optimizer once per layout. The compute memo is indexed by micro-batch size, so
// that a configuration's smaller last micro-batch finds the costs the search computed when it
// scanned that size; the last four FSDP layouts are remembered.
class ComposerEvaluator final : public FrameworkEvaluator {
 public:
  ComposerEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params);
  Prediction predict(const TrainConfig& cfg) override;
  MemoryBreakdown memory(const TrainConfig& cfg) override;

 private:
  const ComputeCosts& compute_costs(int64_t micro_batch, const TrainConfig& cfg);
  const FsdpCosts& fsdp_costs(const TrainConfig& cfg);
  // The parameter counts at sequence length counts_seq_ (learned positions make them depend on it)
  // and under LoRA counts_lora_.
  void update_counts(const TrainConfig& cfg);

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  CostModel cost_;
  double block_params_;
  int64_t counts_seq_ = -1, n_params_ = 0, active_params_ = 0;
  Lora counts_lora_;
  ModelMemoryCounts memory_counts_;
  std::vector<ComputeCosts> memo_;  // slot: micro-batch size modulo 1024, grown as used
  std::array<FsdpCosts, 4> fsdp_memo_{};
  size_t fsdp_next_ = 0;
};

}  // namespace tpsim
