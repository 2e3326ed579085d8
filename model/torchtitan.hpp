// A torchtitan training step: FSDP2 over the data-parallel ranks, sequence-parallel tensor
// parallelism and pipeline parallelism, as torchtitan's code applies them (pytorch/torchtitan,
// torchtitan/parallelisms/parallelize_llama.py: apply_tp, apply_ac, apply_fsdp; pipeline_llama.py;
// parallel_dims.py; config_manager.py) and its paper describes them (Liang et al., "TorchTitan:
// One-stop PyTorch native solution for production ready LLM pre-training", arXiv 2410.06511).
//
// Ranks: torchtitan's device mesh is ["pp", "dp_replicate", "dp_shard", "cp", "tp"], tensor parallel
// innermost, pipeline outermost: Megatron-LM's tp-cp-dp-pp order, so megatron_layout places the
// groups (parallelism.hpp).
//
// Each rank computes the tensor-parallel slice of its blocks (ops.hpp tensor_parallel_shape, the
// vocabulary split unpadded). apply_tp always shards the norms along the sequence: per block an
// all-gather before the attention's and the feed-forward's column-parallel linears and a
// reduce-scatter after their row-parallel ones, in the forward; their transposes in the backward.
// The embedding (RowwiseParallel, output Shard(1)) reduce-scatters in the forward and all-gathers in
// the backward; the output (ColwiseParallel, input Shard(1)) the reverse, and its cross-entropy is
// loss parallel (vocabulary-sharded: three all-reduces of a number per token, as Megatron's). They
// sit on the compute stream; with async TP (enable_async_tensor_parallel, torch.compile's
// micro-pipelined collective matmuls) each is hidden behind the GEMM it feeds or follows, up to that
// GEMM's time.
//
// FSDP2 (apply_fsdp: fully_shard per block and on the root, bf16 parameters, fp32 gradient
// reduction: mixed_precision_param and mixed_precision_reduce) shards each block's tensor-parallel
// slice over the data-parallel group. Without pipeline parallelism the step is Composer's FSDP
// schedule (schedule.hpp: per-block all-gathers prefetched on the communication stream, per-block
// reduce-scatters after each block's backward, every micro-batch), except that the last block is
// not resharded after its forward (so its backward gathers nothing first). With pipeline
// parallelism FSDP2 does not reshard after forward at all: each stage gathers its blocks once per
// step, before its first forward, and reduce-scatters its gradients once, during and after its last
// backward (torch.distributed.pipelining holds gradient sync until the last micro-batch); the stages
// run 1F1B or interleaved 1F1B (pipeline.hpp, torchtitan's pipeline_parallel_schedule).
//
// Float8 (--precision amp_fp8, torchtitan's float8 training with enable_fsdp_float8_all_gather): the
// block's linear weights are all-gathered in fp8, 1 byte per parameter instead of 2.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/pipeline.hpp"
#include "model/simulator.hpp"

namespace tpsim {

// Empty when `cfg` is a layout torchtitan can run for `model` on `device`, else why not, naming the
// value at fault. check_config calls it for cfg.parallel.framework == kTorchtitan after its general
// checks.
std::string check_torchtitan_config(const ModelConfig& model, const DeviceSpec& device, const TrainConfig& cfg);

// Bytes one rank's collectives move per step, each counted as the full (unsharded) buffer of the
// collective (cost.hpp collective_seconds): FSDP2's parameter all-gathers and gradient
// reduce-scatters over the data-parallel group, and the tensor-parallel activations' all-gathers,
// reduce-scatters and all-reduces (recompute included).
struct TorchtitanTraffic {
  double fsdp_gather_bytes = 0;
  double fsdp_reduce_bytes = 0;
  double tp_bytes = 0;
};

class TorchtitanEvaluator {
 public:
  TorchtitanEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params);
  ~TorchtitanEvaluator();
  Prediction predict(const TrainConfig& cfg);  // requires check_config(...) to be empty
  MemoryBreakdown memory(const TrainConfig& cfg);
  TorchtitanTraffic traffic(const TrainConfig& cfg);  // of the most loaded stage (the first)

 private:
  struct Costs;
  const Costs& costs(const TrainConfig& cfg);
  void checkpointing_costs(Costs& c, const TrainConfig& cfg, const BlockShape& shape, double ag);
  void fsdp_costs(Costs& c, const TrainConfig& cfg);
  Prediction predict_fsdp(const Costs& c, const TrainConfig& cfg);
  Prediction predict_pipeline(const Costs& c, const TrainConfig& cfg);
  void finish(const TrainConfig& cfg, Prediction& p);

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  CostModel cost_;
  std::unique_ptr<Costs> memo_[4];
  size_t next_ = 0;
  std::vector<double> fwd_s_, bwd_s_;  // per model chunk, reused
  PipelineSimulator pipeline_;         // its buffers reused
};

}  // namespace tpsim
