// A torchtitan training step: FSDP2 over the data-parallel ranks, sequence-parallel tensor
// parallelism and pipeline parallelism, as torchtitan's code applies them (pytorch/torchtitan,
// torchtitan/parallelisms/parallelize_llama.py: apply_tp, apply_ac, apply_fsdp; pipeline_llama.py;
// parallel_dims.py; config_manager.py) and its paper describes them (Liang et al., "TorchTitan:
// One-stop PyTorch native solution for production ready LLM pre-training", arXiv 2410.06511).
//
// Ranks: torchtitan's device mesh is ["pp", "dp_replicate", "dp_shard", "cp", "tp"], tensor parallel
// innermost, pipeline outermost: Megatron-LM's tp-cp-dp-pp order, so model_parallel_layout places the
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
// slice over the dp_shard x cp group (TorchtitanMesh below). Without pipeline parallelism the step is Composer's FSDP
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
//
// Context parallelism (context_parallel_degree; torchtitan wraps each step in PyTorch's
// torch.distributed.tensor.experimental.context_parallel): every sequence is cut into 2cp chunks
// and rank i of the cp group holds chunks i and 2cp-1-i (the causal load balancing PyTorch enables
// by default, Megatron's as well), so every op but the attention runs on s/cp tokens
// (rank_shape) and the attention is a ring of cp causal-sized steps (ring_attention's
// compute). What differs from Megatron's ring is the K/V exchange: torchtitan's default
// context_parallel_rotate_method "allgather" gathers every rank's K/V once, before the first step
// (torch/distributed/tensor/experimental/_attention.py, _AllGatherRotater), instead of passing it
// hop by hop; the backward gathers K/V again and passes the fp32 dK/dV around the ring
// (_templated_ring_attention_backward's dkv_rotater, always all-to-all, convert_to_f32 on) ---
// torchtitan_context_parallel below. FSDP2 shards over dp_shard x cp ranks (parallel_dims.py's
// "dp_shard_cp" mesh), HSDP (data_parallel_replicate_degree > 1) replicates those shards over
// dp_replicate groups and all-reduces their gradients (fully_shard on a 2D mesh): TorchtitanMesh.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/framework.hpp"
#include "model/pipeline.hpp"
#include "model/model_parallel_evaluator.hpp"
#include "model/recent_costs.hpp"
#include "model/simulator.hpp"

namespace tpsim {

// torchtitan's device mesh ["pp", "dp_replicate", "dp_shard", "cp", "tp"] (parallel_dims.py) as
// far as FSDP2 sees it: dp_replicate from data_parallel_replicate_degree (Layout::
// replicate_degree; 0, not given, is torchtitan's default 1), dp_shard from
// data_parallel_shard_degree (Layout::shard_degree; 0 or -1: the ranks the others leave), with
// dp_replicate x dp_shard x cp x tp x pp the GPU count. FSDP2 shards parameters, gradients and
// optimizer state over the flattened "dp_shard_cp" dimension: dp_shard x cp ranks, tp apart; with
// dp_replicate > 1 (HSDP, fully_shard on the 2D mesh ("dp_replicate", "dp_shard_cp")) the gradient
// shards are all-reduced over the dp_replicate ranks, tp x cp x dp_shard apart, after each
// reduce-scatter.
struct TorchtitanMesh {
  int64_t dp_replicate = 1, dp_shard = 1, cp = 1;
  CommGroup shard_group;      // dp_shard_cp: the parameters' all-gathers, the gradients' reduce-scatters
  CommGroup replicate_group;  // dp_replicate: HSDP's all-reduce of the gradient shards
  int64_t shard_ranks() const { return dp_shard * cp; }
};
// The mesh of `cfg` on nodes of `gpus_per_node`, or why it is not one (one line naming the degrees).
// Requires the degrees' product tensor x context x pipeline to divide the GPU count (check_config).
std::string resolve_torchtitan_mesh(const TrainConfig& cfg, int64_t gpus_per_node, TorchtitanMesh* out);

// One rank's context-parallel attention over one micro-batch of a block, as PyTorch's
// _templated_ring_attention runs it under torchtitan's defaults. `local`: the rank's shape (s/cp
// tokens per sequence). Compute: cp steps, each one causal attention of `local` (ring_attention:
// the load balancing leaves every later step half of the (s/cp)^2 pairs). Forward: the K/V of the
// cp ranks (2 * t/cp * kv_dim elements each) all-gathered once, issued before step 0 and waited for
// by step 1: exposed by what it takes beyond step 0. Backward: the same all-gather again (exposed
// beyond the backward's step 0), and cp hops of the rank's fp32 dK/dV around the ring (one after
// each step, waited for after the next; the last waited for at the end, wholly exposed):
// (cp-1) * max(0, hop - step) + hop. Selective 'op' checkpointing keeps the attention's output, so
// only full recompute runs the forward's gather again. cp = 1: one attention, nothing exchanged.
struct ContextParallelAttention {
  double step_fwd_s = 0, step_bwd_s = 0;  // one step's attention forward and backward
  double kv_gather_bytes = 0;             // the all-gather's whole buffer: cp ranks' K and V
  double kv_gather_s = 0;
  double dkv_hop_bytes = 0;  // dK and dV of the rank's tokens, fp32, per hop
  double dkv_hop_s = 0;
  double fwd_exposed_s = 0, bwd_exposed_s = 0;
};
ContextParallelAttention torchtitan_context_parallel(const CostModel& cost, const BlockShape& local, int64_t cp,
                                                     const CommGroup& cp_group);

// Bytes one rank's collectives move per step, each counted as the full (unsharded) buffer of the
// collective (cost.hpp collective_seconds): FSDP2's parameter all-gathers and gradient
// reduce-scatters over the dp_shard x cp group, and the tensor-parallel activations' all-gathers,
// reduce-scatters and all-reduces (recompute included).
struct TorchtitanTraffic {
  double fsdp_gather_bytes = 0;
  double fsdp_reduce_bytes = 0;
  double tp_bytes = 0;
  // HSDP: the all-reduces of the gradient shards over dp_replicate (each shard's bytes).
  double fsdp_replicate_bytes = 0;
  // Context parallelism: the K/V all-gathers' whole buffers and the dK/dV hops' bytes each rank sends.
  double cp_bytes = 0;
};

struct TorchtitanCosts;  // model/torchtitan.cpp

class TorchtitanEvaluator final : public ModelParallelEvaluator<TorchtitanCosts> {
 public:
  TorchtitanEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params);
  ~TorchtitanEvaluator() override;
  Prediction predict(const TrainConfig& cfg) override;  // requires check_config(...) to be empty
  MemoryBreakdown memory(const TrainConfig& cfg) override;
  TorchtitanTraffic traffic(const TrainConfig& cfg);  // of the most loaded stage (the first)

 private:
  using Costs = TorchtitanCosts;
  void cost_layout(Costs& c, const TrainConfig& cfg) override;
  void checkpointing_costs(Costs& c, const TrainConfig& cfg, const BlockShape& shape, double ag);
  void fsdp_costs(Costs& c, const TrainConfig& cfg);
  Prediction predict_fsdp(const Costs& c, const TrainConfig& cfg);
  Prediction predict_pipeline(const Costs& c, const TrainConfig& cfg);
  void finish(const TrainConfig& cfg, Prediction& p);
};

}  // namespace tpsim
