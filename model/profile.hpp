// The parameters of the cost model for one device, and a registry that names them.
//
// A profile value is either measurable by short kernel runs (kernel level: GEMM rates, attention
// efficiency, memory-bound bandwidth, launch overheads) or only visible in whole training steps
// (system level: achieved collective bandwidth, how much communication slows compute, fixed
// per-micro-batch and per-step overheads, the allocator's reserve). `calibrate kernels` fits the
// former, `calibrate table` the latter; each value's provenance is kept beside it (io/profile).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "model/training.hpp"
#include "model/units.hpp"

namespace tpsim {

struct CostParams {
  // GEMM: time = overhead + max(flops / (rate * efficiency(m, n, k)), bytes / membound rate).
  // Achieved rate of a large square GEMM, indexed by DType as DeviceSpec::peak_flops_per_s is;
  // 0: unsupported. Profiles name them gemm_fp8_flops_per_s ... gemm_fp32_flops_per_s.
  std::array<double, kNumDTypes> gemm_flops_per_s_by_dtype{};
  double gemm_tile_m = 128;  // output tile rows of the GEMM kernels (wave quantization)
  double gemm_tile_n = 256;  // output tile columns
  double gemm_k_half = 64;   // K at which the main loop runs at half its asymptotic rate (pipeline fill)
  // A tile of intensity I = tm*tn/(tm+tn) elements runs at I/(I + half), relative to the largest.
  double gemm_tile_intensity_half = 16;
  double gemm_overhead_s = 4e-6;  // launch and epilogue per GEMM

  // Causal flash attention, as a fraction of the bf16 GEMM rate at head size 128 and long sequences.
  // Executed FLOPs count only the causal half; diagonal blocks and waves are modelled explicitly.
  double attn_fwd_efficiency = 0.6;
  double attn_bwd_efficiency = 0.5;
  double attn_head_dim_half = 32;  // efficiency ~ dh / (dh + half), normalised to 1 at dh = 128
  // The architecture's native fused attention kernel (cuDNN's, which TransformerEngine runs under
  // Megatron-Core; on Hopper it issues wgmma, as FlashAttention-3 does), as the same fraction; 0:
  // none known faster than the kernel the efficiencies above describe (fitted to tables whose runs
  // used FlashAttention-2-era kernels), which then stands in.
  double attn_native_fwd_efficiency = 0;
  double attn_native_bwd_efficiency = 0;
  double attn_block = 128;  // query/key block size of the kernel

  // Memory-bound kernels (norms, activations, residuals, casts, cross-entropy, optimizer).
  double membound_efficiency = 0.8;  // achieved read+write bandwidth / the device's memory bandwidth
  // The fused cross-entropy over the vocabulary (row-wise reductions over ~50k logits) relative
  // to the other memory-bound kernels.
  double xent_efficiency = 1.0;
  double kernel_overhead_s = 4e-6;  // launch per kernel

  // Collectives: ring all-gather / reduce-scatter of B bytes over n ranks costs
  // (n-1)/n * B / (link * efficiency) + (n-1) * latency.
  double intra_node_link_efficiency = 0.75;  // achieved bus bandwidth / datasheet NVLink bandwidth
  double inter_node_link_efficiency = 0.75;  // achieved bus bandwidth / datasheet NIC bandwidth
  double intra_node_latency_s = 5e-6;        // per ring step
  double inter_node_latency_s = 10e-6;       // per ring step
  double overlap_slowdown = 0.1;             // compute runs this much slower while a collective overlaps it

  // Sustained compute clock in a long training run relative to the short kernel runs that measured
  // the GEMM and attention rates (power and thermal limits of a fully loaded node).
  double compute_clock_ratio = 0.9;

  // The share of a block's forward that activation checkpointing recomputes in the backward: 1 for
  // a full recompute; less where the framework keeps some outputs or checkpoints selectively.
  double recompute_fraction = 1.0;

  // Fixed costs outside kernels: CPU-side work that stalls the GPU.
  double block_overhead_s = 0;          // per block and pass: FSDP hooks, limit_all_gathers waits
  double microbatch_overhead_s = 2e-3;  // per micro-batch: data loading, hooks, synchronisation
  double step_overhead_s = 20e-3;       // per optimizer step: logging, scheduler, clipping sync
  // The host's time to issue one kernel from eager PyTorch (Python, the dispatcher, the launch): a
  // pass over a block takes at least its kernels times this, whatever the GPU's share. Used by the
  // Megatron path (megatron.hpp); Composer's path keeps its fitted per-block and per-micro-batch
  // overheads. Profiles written before this parameter existed read this reasoned value: eager
  // PyTorch spends some 10-30 us of host time per op (Python, dispatcher, launch).
  double host_kernel_issue_s = 20e-6;

  // Memory: peak = live bytes * fragmentation + reserve.
  double memory_fragmentation = 1.05;        // caching-allocator overhead over live tensors
  double memory_reserve_bytes = 3.0 * kGiB;  // CUDA context, NCCL buffers, cuBLAS workspaces
  // The caching allocator near full memory under full activation checkpointing (Composer FSDP):
  // with less than allocator_headroom_bytes free at the predicted peak, each block's recompute in
  // the backward allocates among cached segments that no longer fit it, and the allocator frees its
  // cache (a device synchronisation) and retries. The step then runs longer by
  // allocator_retry_slowdown * (shortfall in GiB)^2 of its time: the fraction at 1 GiB short.
  double allocator_headroom_bytes = 4.0 * kGiB;
  double allocator_retry_slowdown = 0.19;

  double gemm_flops_per_s(DType t) const { return gemm_flops_per_s_by_dtype[static_cast<size_t>(t)]; }
  double& gemm_flops_per_s(DType t) { return gemm_flops_per_s_by_dtype[static_cast<size_t>(t)]; }
};

// Which runs can measure a parameter.
enum class ParamLevel : uint8_t { kKernel, kSystem };

// The unit of a parameter's value; to_string gives the profile file's spelling.
enum class Unit : uint8_t { kFlopsPerS, kElements, kSeconds, kFraction, kFactor, kBytes };
std::string_view to_string(Unit unit);  // "FLOP/s", "elements", "s", "fraction", "factor", "B"

// A pointer to one of CostParams' scalar values (named: nvcc's host pass rewrites the bare
// declarator with parentheses, which GCC then warns about).
using CostParamMember = double CostParams::*;

// A parameter's id: code holds `const ParamInfo*` (from param_of, gemm_rate_param, or find_param
// where a name is read from text) and reaches its value through value().
struct ParamInfo {
  std::string_view name;
  CostParamMember member;  // the scalar; nullptr for a GEMM rate
  DType dtype;             // a GEMM rate's format: gemm_flops_per_s_by_dtype[dtype] (unused for a scalar)
  Unit unit;
  double lower;  // physical bounds; fits keep parameters inside them
  double upper;
  ParamLevel level;
  std::string_view meaning;

  double& value(CostParams& p) const { return member ? p.*member : p.gemm_flops_per_s(dtype); }
  double value(const CostParams& p) const { return member ? p.*member : p.gemm_flops_per_s(dtype); }
};

// Every parameter of CostParams, in declaration order.
std::span<const ParamInfo> cost_param_registry();
// By the name profiles and flags spell; nullptr when there is none. For reading text only.
const ParamInfo* find_param(std::string_view name);
// The registry entry of a scalar member (every double of CostParams has one) and of a GEMM rate.
const ParamInfo& param_of(CostParamMember member);
const ParamInfo& gemm_rate_param(DType t);

}  // namespace tpsim
