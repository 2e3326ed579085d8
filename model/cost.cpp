#include "model/cost.hpp"

#include <algorithm>
#include <cmath>

namespace tpsim {
namespace {

// ceil(q) for 0 <= q < 2^53. Baseline x86-64 has no rounding instruction, so std::ceil is a
// library call; the integer conversion is not.
double ceil_pos(double q) {
  const double t = static_cast<double>(static_cast<int64_t>(q));
  return t < q ? t + 1.0 : t;
}

double ceil_div(double a, double b) { return ceil_pos(a / b); }

// ceil(a / b) for whole numbers a >= 0 and b in [1, 2^20], given 1/b: the product's rounding error
// must not lift an exact multiple over the next integer, and the fractional part of a true
// non-multiple is at least 1/b, far above the 1e-9 guard.
double ceil_ratio(double a, double b_inv) { return ceil_pos(a * b_inv - 1e-9); }

// Efficiency of `items` equal work items spread over `units` in waves.
double wave_efficiency(double items, double units) {
  const double waves = ceil_div(items, units);
  return items / (waves * units);
}

}  // namespace

CostModel::CostModel(const DeviceSpec& device, const CostParams& params) : device_(device), params_(params) {
  // A sustained clock above the kernel runs' (a ratio over 1: the runs were throttled, or their shape
  // was not the fastest) still leaves no GEMM faster than the datasheet's peak.
  for (int t = 0; t < kNumDTypes; ++t) {
    rate_[t] = params.gemm_flops_per_s_by_dtype[t] * params.compute_clock_ratio;
    if (device.peak_flops_per_s[t] > 0) rate_[t] = std::min(rate_[t], device.peak_flops_per_s[t]);
  }
  seconds_per_byte_ = 1.0 / (params.membound_efficiency * device.hbm_bytes_per_s);
  units_ = device.compute_units;
  units_inv_ = 1.0 / units_;
  // Tile shapes: the largest in both orientations, the square of its short side, and half of that.
  // A smaller tile reuses each loaded element less (intensity tm*tn/(tm+tn)) and runs slower.
  const double big = std::max(params.gemm_tile_m, params.gemm_tile_n);
  const double small = std::min(params.gemm_tile_m, params.gemm_tile_n);
  const double sides[3] = {big, small, small / 2};
  for (int i = 0; i < 3; ++i) {
    tile_sides_[i] = sides[i];
    tile_inv_[i] = 1.0 / sides[i];
  }
  const auto intensity = [](double a, double b) { return a * b / (a + b); };
  const double half = params.gemm_tile_intensity_half;
  const double top = intensity(big, small) / (intensity(big, small) + half);
  const int shapes[5][2] = {{0, 1}, {1, 0}, {1, 1}, {1, 2}, {2, 1}};
  for (int i = 0; i < 5; ++i) {
    const double a = sides[shapes[i][0]], b = sides[shapes[i][1]];
    tile_choices_[i] = {shapes[i][0], shapes[i][1], a * b, intensity(a, b) / (intensity(a, b) + half) / top};
  }
}

double CostModel::gemm_efficiency(int64_t m, int64_t n, int64_t k) const {
  const TileFit t = best_tiles(m, n);
  const double best = t.efficiency, best_tiles = t.tiles, best_rest = t.fill_and_tile;
  const auto k_ramp = [&](double kk) { return kk / (kk + params_.gemm_k_half); };
  double result = best * k_ramp(static_cast<double>(k));
  // Split-K, as cuBLAS heuristics choose it, only when the tiles cannot fill the device.
  for (double split = 2; best_tiles < units_ && split <= 16; split *= 2) {
    const double kk = static_cast<double>(k) / split;
    if (best_tiles * split > 2 * units_ || kk < 256) break;
    result = std::max(result, best_rest * wave_efficiency(best_tiles * split, units_) * k_ramp(kk));
  }
  return result;
}

CostModel::TileFit CostModel::search_tiles(int64_t m, int64_t n) const {
  const double md = static_cast<double>(m), nd = static_cast<double>(n);
  // Tile counts along m and n for the three tile side lengths (large, small, half of small).
  double tm[3], tn[3];
  for (int s = 0; s < 3; ++s) {
    tm[s] = ceil_ratio(md, tile_inv_[s]);
    tn[s] = ceil_ratio(nd, tile_inv_[s]);
  }
  // The library's heuristic picks among tile shapes the one that wastes least (see cost.hpp).
  TileFit best;
  for (const TileChoice& t : tile_choices_) {
    const double tiles = tm[t.side_m] * tn[t.side_n];
    const double fill = md * nd / (tiles * t.area);
    const double waves = ceil_ratio(tiles, units_inv_);
    const double rest = fill * t.efficiency;
    const double e = rest * tiles / (waves * units_);
    if (e > best.efficiency) best = {e, tiles, rest};
  }
  return best;
}

double CostModel::grouped_gemm_efficiency(int64_t groups, int64_t m, int64_t n, int64_t k) const {
  const double md = static_cast<double>(m), nd = static_cast<double>(n), g = static_cast<double>(groups);
  double tm[3], tn[3];
  for (int s = 0; s < 3; ++s) {
    tm[s] = ceil_ratio(md, tile_inv_[s]);
    tn[s] = ceil_ratio(nd, tile_inv_[s]);
  }
  double best = 0;
  for (const TileChoice& t : tile_choices_) {
    const double tiles = g * tm[t.side_m] * tn[t.side_n];
    const double fill = g * md * nd / (tiles * t.area);
    const double waves = ceil_div(tiles, units_);
    best = std::max(best, fill * t.efficiency * tiles / (waves * units_));
  }
  const double kd = static_cast<double>(k);
  return best * kd / (kd + params_.gemm_k_half);
}

namespace {
// The tile search depends only on the output shape and the tiling parameters, and a sweep meets
// the same shapes again and again (weight-gradient GEMMs do not depend on the micro-batch at all).
// A small direct-mapped memo per thread remembers recent results.
struct TileMemoEntry {
  int64_t m = -1, n = -1;
  double units = 0, big = 0, small = 0, half = 0;
  double efficiency = 0, tiles = 0, fill_and_tile = 0;
};
thread_local std::array<TileMemoEntry, 1024> tile_memo;
}  // namespace

CostModel::TileFit CostModel::best_tiles(int64_t m, int64_t n) const {
  const uint64_t h =
      (static_cast<uint64_t>(m) * 0x9E3779B97F4A7C15ULL) ^ (static_cast<uint64_t>(n) * 0xC2B2AE3D27D4EB4FULL);
  TileMemoEntry& e = tile_memo[(h >> 54) & (tile_memo.size() - 1)];
  if (e.m == m && e.n == n && e.units == units_ && e.big == tile_sides_[0] && e.small == tile_sides_[1] &&
      e.half == params_.gemm_tile_intensity_half)
    return {e.efficiency, e.tiles, e.fill_and_tile};
  const TileFit t = search_tiles(m, n);
  e = {m,
       n,
       units_,
       tile_sides_[0],
       tile_sides_[1],
       params_.gemm_tile_intensity_half,
       t.efficiency,
       t.tiles,
       t.fill_and_tile};
  return t;
}

double CostModel::attention_efficiency(const Op& op) const {
  const double dh = static_cast<double>(op.head_dim);
  const double h = params_.attn_head_dim_half;
  const double head_factor = (dh / (dh + h)) / (128.0 / (128.0 + h));
  // Query (forward) or key (backward) blocks per (sequence, head); the causal kernel runs the
  // diagonal blocks in full, so it executes nb(nb+1)/2 blocks for nb^2/2 useful ones.
  const double nb = ceil_div(static_cast<double>(op.seq), params_.attn_block);
  double causal = nb / (nb + 1.0);
  if (op.k > 0) {
    // Sliding window of op.k keys: query block i runs min(i + 1, wb + 1) key blocks (wb = the
    // window's blocks, plus the partial block at its far edge), for a useful share the op's FLOPs
    // state relative to the causal nb^2/2 blocks.
    const double wb = ceil_div(static_cast<double>(op.k), params_.attn_block);
    const double full = std::min(nb, wb + 1.0);  // query blocks before the window is full: 1..full
    const double executed = full * (full + 1.0) / 2.0 + (nb - full) * (wb + 1.0);
    causal = nb * nb / 2.0 * sliding_window_fraction(op.seq, op.k) / executed;
  }
  const double blocks = nb * static_cast<double>(op.batch) * static_cast<double>(op.heads);
  const double waves = wave_efficiency(blocks, units_);
  const bool fwd = op.kind == OpKind::kAttentionFwd;
  const double native = !op.native_kernel ? 0.0
                        : fwd             ? params_.attn_native_fwd_efficiency
                                          : params_.attn_native_bwd_efficiency;
  const double base = native > 0 ? native : fwd ? params_.attn_fwd_efficiency : params_.attn_bwd_efficiency;
  return base * head_factor * causal * waves;
}

double CostModel::op_seconds(const Op& op) const {
  const double bytes = op.bytes_read + op.bytes_written;
  const double memory_s = bytes * seconds_per_byte_;
  switch (op.kind) {
    case OpKind::kGemm: {
      const double e =
          op.batch > 1 ? grouped_gemm_efficiency(op.batch, op.m, op.n, op.k) : gemm_efficiency(op.m, op.n, op.k);
      const double rate = rate_[static_cast<int>(op.dtype)] * e;
      return params_.gemm_overhead_s + std::max(op.flops / rate, memory_s);
    }
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd: {
      const double rate = rate_[static_cast<int>(op.dtype)] * attention_efficiency(op);
      return params_.gemm_overhead_s + std::max(op.flops / rate, memory_s);
    }
    case OpKind::kMemoryBound: {
      // The fused cross-entropy kernel runs at xent_efficiency; PyTorch's unfused one (kernels > 1)
      // streams like any element-wise kernel.
      const bool xent =
          (op.mem == MemKind::kCrossEntropy || op.mem == MemKind::kCrossEntropyBackward) && op.kernels == 1;
      return static_cast<double>(op.kernels) * params_.kernel_overhead_s +
             (xent ? memory_s / params_.xent_efficiency : memory_s);
    }
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
    const double nic =
        device_.inter_node_bytes_per_s * params_.inter_node_link_efficiency / static_cast<double>(g.groups_per_node);
    seconds = std::max(seconds, (nodes - 1.0) / nodes * bytes / nic);
    latency = params_.inter_node_latency_s;
  }
  const double one_pass = seconds + (n - 1.0) * latency;
  return kind == CollectiveKind::kAllReduce ? 2.0 * one_pass : one_pass;
}

}  // namespace tpsim
