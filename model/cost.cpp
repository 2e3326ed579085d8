#include "model/cost.hpp"

#include <algorithm>
#include <cmath>

namespace tpsim {
namespace {

// ceil(a / b) for positive a, b whose quotient is below 2^53. Baseline x86-64 has no rounding
// instruction, so std::ceil is a library call; the integer conversion is not.
double ceil_div(double a, double b) {
  const double q = a / b;
  const double t = static_cast<double>(static_cast<int64_t>(q));
  return t < q ? t + 1.0 : t;
}

// Efficiency of `items` equal work items spread over `units` in waves.
double wave_efficiency(double items, double units) {
  const double waves = ceil_div(items, units);
  return items / (waves * units);
}

}  // namespace

CostModel::CostModel(const DeviceSpec& device, const CostParams& params) : device_(device), params_(params) {
  for (int t = 0; t < kNumDTypes; ++t)
    rate_[t] = params.gemm_flops_per_s(static_cast<DType>(t)) * params.compute_clock_ratio;
  seconds_per_byte_ = 1.0 / (params.membound_efficiency * device.hbm_bytes_per_s);
  units_ = device.compute_units;
}

double CostModel::gemm_efficiency(int64_t m, int64_t n, int64_t k) const {
  const double units = units_;
  // The larger tile side goes along the larger output dimension.
  double tm = params_.gemm_tile_m, tn = params_.gemm_tile_n;
  if ((m >= n) != (tm >= tn)) std::swap(tm, tn);
  const double tiles_m = ceil_div(static_cast<double>(m), tm);
  const double tiles_n = ceil_div(static_cast<double>(n), tn);
  const double tiles = tiles_m * tiles_n;
  const double fill = static_cast<double>(m) * static_cast<double>(n) / (tiles_m * tm * tiles_n * tn);
  const auto k_ramp = [&](double kk) { return kk / (kk + params_.gemm_k_half); };
  double best = fill * wave_efficiency(tiles, units) * k_ramp(static_cast<double>(k));
  // Split-K, as cuBLAS heuristics choose it, only when the tiles cannot fill the device.
  for (double split = 2; tiles < units && split <= 16; split *= 2) {
    const double kk = static_cast<double>(k) / split;
    if (tiles * split > 2 * units || kk < 256) break;
    best = std::max(best, fill * wave_efficiency(tiles * split, units) * k_ramp(kk));
  }
  return best;
}

double CostModel::attention_efficiency(const Op& op) const {
  const double dh = static_cast<double>(op.head_dim);
  const double h = params_.attn_head_dim_half;
  const double head_factor = (dh / (dh + h)) / (128.0 / (128.0 + h));
  // Query (forward) or key (backward) blocks per (sequence, head); the causal kernel runs the
  // diagonal blocks in full, so it executes nb(nb+1)/2 blocks for nb^2/2 useful ones.
  const double nb = ceil_div(static_cast<double>(op.seq), params_.attn_block);
  const double causal = nb / (nb + 1.0);
  const double blocks = nb * static_cast<double>(op.batch) * static_cast<double>(op.heads);
  const double waves = wave_efficiency(blocks, units_);
  const double base = op.kind == OpKind::kAttentionFwd ? params_.attn_fwd_efficiency : params_.attn_bwd_efficiency;
  return base * head_factor * causal * waves;
}

double CostModel::op_seconds(const Op& op) const {
  const double bytes = op.bytes_read + op.bytes_written;
  const double memory_s = bytes * seconds_per_byte_;
  switch (op.kind) {
    case OpKind::kGemm: {
      const double rate = rate_[static_cast<int>(op.dtype)] * gemm_efficiency(op.m, op.n, op.k);
      return params_.gemm_overhead_s + std::max(op.flops / rate, memory_s);
    }
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd: {
      const double rate = rate_[static_cast<int>(op.dtype)] * attention_efficiency(op);
      return params_.gemm_overhead_s + std::max(op.flops / rate, memory_s);
    }
    case OpKind::kMemoryBound:
      return static_cast<double>(op.kernels) * params_.kernel_overhead_s + memory_s;
  }
  return 0;
}

double CostModel::ops_seconds(const OpList& ops) const {
  double s = 0;
  for (const Op& op : ops) s += op_seconds(op);
  return s;
}

double CostModel::collective_seconds(CollectiveKind kind, double bytes, const CommGroup& g) const {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const double n = static_cast<double>(g.ranks);
  const double nodes = static_cast<double>(g.nodes);
  double seconds = 0;
  if (g.ranks > g.nodes) {  // several ranks per node: the intra-node phase
    const double intra = device_.intra_node_bytes_per_s * params_.intra_node_link_efficiency;
    seconds = (n - 1.0) / n * bytes / intra;
  }
  double latency = params_.intra_node_latency_s;
  if (g.nodes > 1) {
    const double nic = device_.inter_node_bytes_per_s * params_.inter_node_link_efficiency /
                       static_cast<double>(g.groups_per_node);
    seconds = std::max(seconds, (nodes - 1.0) / nodes * bytes / nic);
    latency = params_.inter_node_latency_s;
  }
  const double one_pass = seconds + (n - 1.0) * latency;
  return kind == CollectiveKind::kAllReduce ? 2.0 * one_pass : one_pass;
}

}  // namespace tpsim
