#include "model/profile.hpp"
#include "model/units.hpp"

#include <array>
#include <stdexcept>
#include <string>

namespace tpsim {

std::string_view to_string(Unit unit) {
  switch (unit) {
    case Unit::kFlopsPerS: return "FLOP/s";
    case Unit::kElements: return "elements";
    case Unit::kSeconds: return "s";
    case Unit::kFraction: return "fraction";
    case Unit::kFactor: return "factor";
    case Unit::kBytes: return "B";
  }
  return "?";
}

namespace {
constexpr double kInf = 1e300;
constexpr ParamLevel K = ParamLevel::kKernel;
constexpr ParamLevel S = ParamLevel::kSystem;

constexpr ParamInfo scalar(std::string_view name, CostParamMember member, Unit unit, double lower, double upper,
                           ParamLevel level, std::string_view meaning) {
  return {name, member, DType::kFp32, unit, lower, upper, level, meaning};
}

constexpr ParamInfo gemm_rate(std::string_view name, DType t, std::string_view meaning) {
  return {name, nullptr, t, Unit::kFlopsPerS, 0, kInf, K, meaning};
}

const std::array kRegistry = {
    gemm_rate("gemm_fp8_flops_per_s", DType::kFp8, "achieved fp8 GEMM rate on large shapes"),
    gemm_rate("gemm_bf16_flops_per_s", DType::kBf16, "achieved bf16 GEMM rate on large shapes"),
    gemm_rate("gemm_fp16_flops_per_s", DType::kFp16, "achieved fp16 GEMM rate on large shapes"),
    gemm_rate("gemm_tf32_flops_per_s", DType::kTf32, "achieved tf32 GEMM rate on large shapes"),
    gemm_rate("gemm_fp32_flops_per_s", DType::kFp32, "achieved fp32 GEMM rate on large shapes"),
    gemm_rate("gemm_fp4_flops_per_s", DType::kFp4, "achieved fp4 (NVFP4/MXFP4) GEMM rate on large shapes"),
    scalar("gemm_tile_m", &CostParams::gemm_tile_m, Unit::kElements, 1, 1024, K, "GEMM output tile rows"),
    scalar("gemm_tile_n", &CostParams::gemm_tile_n, Unit::kElements, 1, 1024, K, "GEMM output tile columns"),
    scalar("gemm_k_half", &CostParams::gemm_k_half, Unit::kElements, 0, 8192, K,
           "K at which a GEMM's main loop reaches half its asymptotic rate"),
    scalar("gemm_tile_intensity_half", &CostParams::gemm_tile_intensity_half, Unit::kElements, 0, 1024, K,
           "tile intensity at which a GEMM tile runs at half its asymptotic rate"),
    scalar("gemm_overhead_s", &CostParams::gemm_overhead_s, Unit::kSeconds, 0, 1e-3, K,
           "fixed time per GEMM (launch, epilogue)"),
    scalar("attn_fwd_efficiency", &CostParams::attn_fwd_efficiency, Unit::kFraction, 0.05, 1.0, K,
           "causal flash-attention forward rate / bf16 GEMM rate at head size 128"),
    scalar("attn_bwd_efficiency", &CostParams::attn_bwd_efficiency, Unit::kFraction, 0.05, 1.0, K,
           "causal flash-attention backward rate / bf16 GEMM rate at head size 128"),
    scalar("attn_native_fwd_efficiency", &CostParams::attn_native_fwd_efficiency, Unit::kFraction, 0, 1.0, K,
           "causal forward rate of the architecture's native fused attention kernel (cuDNN, under "
           "TransformerEngine) / bf16 GEMM rate at head size 128; 0: none beyond the fitted kernel"),
    scalar("attn_native_bwd_efficiency", &CostParams::attn_native_bwd_efficiency, Unit::kFraction, 0, 1.0, K,
           "backward rate of that kernel / bf16 GEMM rate at head size 128; 0: none beyond the fitted kernel"),
    scalar("attn_head_dim_half", &CostParams::attn_head_dim_half, Unit::kElements, 0, 1024, K,
           "head size at which attention efficiency halves"),
    scalar("attn_block", &CostParams::attn_block, Unit::kElements, 16, 512, K,
           "query/key block of the attention kernel"),
    scalar("membound_efficiency", &CostParams::membound_efficiency, Unit::kFraction, 0.2, 0.95, K,
           "achieved bandwidth of memory-bound kernels / the device's memory bandwidth"),
    scalar("xent_efficiency", &CostParams::xent_efficiency, Unit::kFraction, 0.02, 1.0, K,
           "achieved bandwidth of the cross-entropy kernels / that of the other memory-bound kernels"),
    scalar("kernel_overhead_s", &CostParams::kernel_overhead_s, Unit::kSeconds, 0, 1e-3, K,
           "fixed time per memory-bound kernel"),
    scalar("intra_node_link_efficiency", &CostParams::intra_node_link_efficiency, Unit::kFraction, 0.3, 0.95, S,
           "achieved collective bus bandwidth / datasheet intra-node link bandwidth"),
    scalar("inter_node_link_efficiency", &CostParams::inter_node_link_efficiency, Unit::kFraction, 0.2, 0.95, S,
           "achieved collective bus bandwidth / datasheet inter-node bandwidth"),
    scalar("intra_node_latency_s", &CostParams::intra_node_latency_s, Unit::kSeconds, 0, 1e-3, S,
           "latency per ring step inside a node"),
    scalar("inter_node_latency_s", &CostParams::inter_node_latency_s, Unit::kSeconds, 0, 1e-2, S,
           "latency per ring step across nodes"),
    scalar("overlap_slowdown", &CostParams::overlap_slowdown, Unit::kFraction, 0, 0.5, S,
           "relative slowdown of compute while a collective runs beside it"),
    scalar("compute_clock_ratio", &CostParams::compute_clock_ratio, Unit::kFraction, 0.5, 1.25, S,
           "sustained compute clock in training / clock of the short kernel runs (above 1 when the runs "
           "were throttled or not at the fastest shape; no GEMM passes the datasheet peak)"),
    scalar("recompute_fraction", &CostParams::recompute_fraction, Unit::kFraction, 0.2, 1.0, S,
           "share of a block's forward that activation checkpointing recomputes"),
    scalar("block_overhead_s", &CostParams::block_overhead_s, Unit::kSeconds, 0, 0.01, S,
           "GPU idle time per block and pass (CPU-side FSDP hooks and synchronisation)"),
    scalar("microbatch_overhead_s", &CostParams::microbatch_overhead_s, Unit::kSeconds, 0, 1.0, S,
           "GPU idle time per micro-batch (data loading, hooks, synchronisation)"),
    scalar("step_overhead_s", &CostParams::step_overhead_s, Unit::kSeconds, 0, 10.0, S,
           "GPU idle time per optimizer step"),
    scalar("host_kernel_issue_s", &CostParams::host_kernel_issue_s, Unit::kSeconds, 0, 1e-3, S,
           "host time to issue one kernel from eager PyTorch (a floor under each block pass)"),
    scalar("memory_fragmentation", &CostParams::memory_fragmentation, Unit::kFactor, 1.0, 2.0, S,
           "allocator footprint / live bytes"),
    scalar("memory_reserve_bytes", &CostParams::memory_reserve_bytes, Unit::kBytes, 0, 64.0 * kGiB, S,
           "memory not available to tensors (context, NCCL, workspaces)"),
    scalar("allocator_headroom_bytes", &CostParams::allocator_headroom_bytes, Unit::kBytes, 0, 64.0 * kGiB, S,
           "free memory at the predicted peak under which full checkpointing meets the allocator's retries"),
    scalar("allocator_retry_slowdown", &CostParams::allocator_retry_slowdown, Unit::kFraction, 0, 10.0, S,
           "step time the allocator's retries add, as a fraction, at 1 GiB under that headroom (it grows "
           "with the square of the shortfall)"),
};
}  // namespace

std::span<const ParamInfo> cost_param_registry() { return kRegistry; }

const ParamInfo* find_param(std::string_view name) {
  for (const auto& p : kRegistry)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& param_of(CostParamMember member) {
  for (const auto& p : kRegistry)
    if (p.member == member) return p;
  throw std::logic_error("param_of: a CostParams member missing from the registry");
}

const ParamInfo& gemm_rate_param(DType t) {
  for (const auto& p : kRegistry)
    if (!p.member && p.dtype == t) return p;
  throw std::logic_error("gemm_rate_param: no registry entry for format " + std::string(to_string(t)));
}

}  // namespace tpsim
