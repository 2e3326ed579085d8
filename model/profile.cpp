#include "model/profile.hpp"

#include <array>

namespace tpsim {

double CostParams::gemm_flops_per_s(DType t) const {
  switch (t) {
    case DType::kFp8: return gemm_fp8_flops_per_s;
    case DType::kBf16: return gemm_bf16_flops_per_s;
    case DType::kFp16: return gemm_fp16_flops_per_s;
    case DType::kTf32: return gemm_tf32_flops_per_s;
    case DType::kFp32: return gemm_fp32_flops_per_s;
  }
  return 0;
}

namespace {
constexpr double kInf = 1e300;
constexpr ParamLevel K = ParamLevel::kKernel;
constexpr ParamLevel S = ParamLevel::kSystem;

const std::array kRegistry = {
    ParamInfo{"gemm_fp8_flops_per_s", &CostParams::gemm_fp8_flops_per_s, "FLOP/s", 0, kInf, K,
              "achieved fp8 GEMM rate on large shapes"},
    ParamInfo{"gemm_bf16_flops_per_s", &CostParams::gemm_bf16_flops_per_s, "FLOP/s", 0, kInf, K,
              "achieved bf16 GEMM rate on large shapes"},
    ParamInfo{"gemm_fp16_flops_per_s", &CostParams::gemm_fp16_flops_per_s, "FLOP/s", 0, kInf, K,
              "achieved fp16 GEMM rate on large shapes"},
    ParamInfo{"gemm_tf32_flops_per_s", &CostParams::gemm_tf32_flops_per_s, "FLOP/s", 0, kInf, K,
              "achieved tf32 GEMM rate on large shapes"},
    ParamInfo{"gemm_fp32_flops_per_s", &CostParams::gemm_fp32_flops_per_s, "FLOP/s", 0, kInf, K,
              "achieved fp32 GEMM rate on large shapes"},
    ParamInfo{"gemm_tile_m", &CostParams::gemm_tile_m, "elements", 1, 1024, K, "GEMM output tile rows"},
    ParamInfo{"gemm_tile_n", &CostParams::gemm_tile_n, "elements", 1, 1024, K, "GEMM output tile columns"},
    ParamInfo{"gemm_k_half", &CostParams::gemm_k_half, "elements", 0, 8192, K,
              "K at which a GEMM's main loop reaches half its asymptotic rate"},
    ParamInfo{"gemm_tile_intensity_half", &CostParams::gemm_tile_intensity_half, "elements", 0, 1024, K,
              "tile intensity at which a GEMM tile runs at half its asymptotic rate"},
    ParamInfo{"gemm_overhead_s", &CostParams::gemm_overhead_s, "s", 0, 1e-3, K,
              "fixed time per GEMM (launch, epilogue)"},
    ParamInfo{"attn_fwd_efficiency", &CostParams::attn_fwd_efficiency, "fraction", 0.05, 1.0, K,
              "causal flash-attention forward rate / bf16 GEMM rate at head size 128"},
    ParamInfo{"attn_bwd_efficiency", &CostParams::attn_bwd_efficiency, "fraction", 0.05, 1.0, K,
              "causal flash-attention backward rate / bf16 GEMM rate at head size 128"},
    ParamInfo{"attn_head_dim_half", &CostParams::attn_head_dim_half, "elements", 0, 1024, K,
              "head size at which attention efficiency halves"},
    ParamInfo{"attn_block", &CostParams::attn_block, "elements", 16, 512, K,
              "query/key block of the attention kernel"},
    ParamInfo{"membound_efficiency", &CostParams::membound_efficiency, "fraction", 0.2, 0.95, K,
              "achieved bandwidth of memory-bound kernels / the device's memory bandwidth"},
    ParamInfo{"xent_efficiency", &CostParams::xent_efficiency, "fraction", 0.02, 1.0, K,
              "achieved bandwidth of the cross-entropy kernels / that of the other memory-bound kernels"},
    ParamInfo{"kernel_overhead_s", &CostParams::kernel_overhead_s, "s", 0, 1e-3, K,
              "fixed time per memory-bound kernel"},
    ParamInfo{"intra_node_link_efficiency", &CostParams::intra_node_link_efficiency, "fraction", 0.3, 0.95, S,
              "achieved collective bus bandwidth / datasheet intra-node link bandwidth"},
    ParamInfo{"inter_node_link_efficiency", &CostParams::inter_node_link_efficiency, "fraction", 0.2, 0.95, S,
              "achieved collective bus bandwidth / datasheet inter-node bandwidth"},
    ParamInfo{"intra_node_latency_s", &CostParams::intra_node_latency_s, "s", 0, 1e-3, S,
              "latency per ring step inside a node"},
    ParamInfo{"inter_node_latency_s", &CostParams::inter_node_latency_s, "s", 0, 1e-2, S,
              "latency per ring step across nodes"},
    ParamInfo{"overlap_slowdown", &CostParams::overlap_slowdown, "fraction", 0, 0.5, S,
              "relative slowdown of compute while a collective runs beside it"},
    ParamInfo{"compute_clock_ratio", &CostParams::compute_clock_ratio, "fraction", 0.5, 1.0, S,
              "sustained compute clock in training / clock of the short kernel runs"},
    ParamInfo{"recompute_fraction", &CostParams::recompute_fraction, "fraction", 0.2, 1.0, S,
              "share of a block's forward that activation checkpointing recomputes"},
    ParamInfo{"block_overhead_s", &CostParams::block_overhead_s, "s", 0, 0.01, S,
              "GPU idle time per block and pass (CPU-side FSDP hooks and synchronisation)"},
    ParamInfo{"microbatch_overhead_s", &CostParams::microbatch_overhead_s, "s", 0, 1.0, S,
              "GPU idle time per micro-batch (data loading, hooks, synchronisation)"},
    ParamInfo{"step_overhead_s", &CostParams::step_overhead_s, "s", 0, 10.0, S,
              "GPU idle time per optimizer step"},
    ParamInfo{"memory_fragmentation", &CostParams::memory_fragmentation, "factor", 1.0, 2.0, S,
              "allocator footprint / live bytes"},
    ParamInfo{"memory_reserve_bytes", &CostParams::memory_reserve_bytes, "B", 0, 64.0 * (1LL << 30), S,
              "memory not available to tensors (context, NCCL, workspaces)"},
};
}  // namespace

std::span<const ParamInfo> cost_param_registry() { return kRegistry; }

const ParamInfo* find_param(std::string_view name) {
  for (const auto& p : kRegistry)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace tpsim
