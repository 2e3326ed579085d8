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
#include "model/memory.hpp"
#include "model/schedule.hpp"
#include "model/simulator.hpp"

namespace tpsim {

// A micro-batch's costs in a step, and its compute by category over every layer.
struct MicroBatchResult {
  MicroBatchCosts costs;
  CategoryTotals categories;
};

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

// FSDP's casts around one block's collectives and their seconds.
struct FsdpBlockCosts {
  CategoryTotals cast, reduce_casts;
  double gather_s = 0, reduce_s = 0;
};

// The costs of one configuration that depend only on its FSDP layout: the casts around a block's
// collectives and their seconds (per layer group: layer_pattern), the root unit's collectives, and
// the optimizer over the local shard.
struct FsdpCosts {
  Sharding sharding = Sharding::kFullShard;
  int64_t n_gpus = -1, seq_len = -1;
  Precision precision = Precision::kAmpBf16;
  MpMode mp_mode = MpMode::kDefault;
  FsdpLayout layout;
  std::vector<FsdpBlockCosts> blocks;  // by layer group
  CategoryTotals optimizer;
  double root_gather_s = 0, root_reduce_s = 0;
  int64_t shard_degree = 0, replicate_degree = 0;  // Layout's HSDP degrees, as given
  Lora lora;
};

// Predicts many Composer configurations of one model on one device and profile. The ops of a
// micro-batch are built and costed once per (micro-batch, sequence length, precision) and shared by
// every sharding strategy, checkpointing choice and GPU count predicted after it; FSDP's casts,
// collectives and optimizer once per layout. The compute memo is indexed by micro-batch size, so
// that a configuration's smaller last micro-batch finds the costs the search computed when it
// scanned that size; the last four FSDP layouts are remembered. A model whose layers differ is
// costed per group of equal layers (layer_pattern) and laid out run by run.
class ComposerEvaluator final : public FrameworkEvaluator {
 public:
  ComposerEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params);
  Prediction predict(const TrainConfig& cfg) override;
  MemoryBreakdown memory(const TrainConfig& cfg) override;

 private:
  // The compute of a micro-batch with layer group `group`'s block.
  const ComputeCosts& compute_costs(int64_t micro_batch, const TrainConfig& cfg, size_t group);
  const FsdpCosts& fsdp_costs(const TrainConfig& cfg);
  // One micro-batch of `micro_batch` sequences: its costs (the block fields group 0's; with
  // `groups`, each group's appended there) and its compute by category over every layer.
  MicroBatchResult micro_batch_result(int64_t micro_batch, const TrainConfig& cfg, const FsdpCosts& fsdp,
                                      std::vector<MicroBatchCosts>* groups);
  // What a micro-batch keeps for the backward: the largest block's and every block's.
  SavedActivations saved_activations(int64_t micro_batch, const TrainConfig& cfg);
  // The parameter counts at sequence length counts_seq_ (learned positions make them depend on it)
  // and under LoRA counts_lora_.
  void update_counts(const TrainConfig& cfg);

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  CostModel cost_;
  LayerPattern pattern_;
  std::vector<double> block_params_;  // by layer group
  int64_t counts_seq_ = -1, n_params_ = 0, active_params_ = 0;
  Lora counts_lora_;
  ModelMemoryCounts memory_counts_;
  std::vector<ComputeCosts> memo_;  // slot: micro-batch size modulo 1024, grown as used
  std::array<FsdpCosts, 4> fsdp_memo_{};
  size_t fsdp_next_ = 0;
};

}  // namespace tpsim
