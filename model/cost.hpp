// Seconds for ops and collectives on one device, from its datasheet and its cost profile.
#pragma once

#include <array>
#include <cstdint>

#include "model/device.hpp"
#include "model/ops.hpp"
#include "model/profile.hpp"

namespace tpsim {

enum class CollectiveKind : uint8_t { kAllGather, kReduceScatter, kAllReduce };

// A group of ranks taking part in one collective: `ranks` GPUs spread over `nodes` nodes.
// `groups_per_node`: how many such collectives cross a node's NICs at the same time (1 for a
// group holding all of a node's GPUs; the GPUs per node for HYBRID_SHARD's cross-node
// all-reduces, one per local rank).
struct CommGroup {
  int64_t ranks = 1;
  int64_t nodes = 1;
  int64_t groups_per_node = 1;
};

// The parameters a short run of kernels on one device is costed with. compute_clock_ratio is a
// long training run's sustained clock over the clock such runs see, so for them it is 1:
// calibrate kernels fits its rates to them, and replay times one step of them.
inline CostParams at_kernel_run_clock(CostParams params) {
  params.compute_clock_ratio = 1.0;
  return params;
}

class CostModel {
 public:
  CostModel(const DeviceSpec& device, const CostParams& params);
  // It keeps references to both: a temporary would dangle (AddressSanitizer found one).
  CostModel(const DeviceSpec&, CostParams&&) = delete;
  CostModel(DeviceSpec&&, const CostParams&) = delete;

  double op_seconds(const Op& op) const;
  double ops_seconds(const OpList& ops) const;

  // Fraction of the large-GEMM rate a GEMM of this shape reaches: output tiles spread over the
  // compute units in waves (the last wave may be part-empty; tiles overhanging m or n do wasted
  // work), split-K when there are too few tiles to fill the device, and a main-loop ramp in K.
  // As the library's heuristic does, the best of several tile shapes is taken: the largest tile in
  // both orientations, the square of its short side and half of that, a smaller tile running at
  // I/(I + gemm_tile_intensity_half) relative to the largest (I = tm*tn/(tm+tn), its reuse).
  double gemm_efficiency(int64_t m, int64_t n, int64_t k) const;
  // The same for `groups` GEMMs of m x n x k each run as one grouped GEMM (the routed experts of a
  // mixture of experts; CUTLASS's grouped GEMM, MegaBlocks' grouped kernels): the tiles of every
  // group spread over the compute units together, so a group's ragged last tile row is its own
  // padding and the waves are counted over all groups; no split-K. Each group is taken at the
  // mean group's size (ops.hpp grouped_gemm_op): on one device a grouped GEMM runs the sum of the
  // groups' work, and load imbalance between experts changes only the per-group tile padding.
  double grouped_gemm_efficiency(int64_t groups, int64_t m, int64_t n, int64_t k) const;
  // Fraction of the bf16 GEMM rate a causal flash-attention pass reaches. A sliding window (the
  // op's k, ops.hpp attention_op) runs, per query block, only the key blocks the window reaches.
  double attention_efficiency(const Op& op) const;

  // Ring collective over `bytes` (the size of the full, unsharded buffer). All-gather and
  // reduce-scatter: every rank receives (n-1)/n of the buffer over its intra-node link, and every
  // node receives the (N-1)/N of it held by the other N-1 nodes through its NICs (NCCL's rings run
  // one per NIC rail; a byte crosses into a node once and is forwarded over NVLink). The slower
  // of the two phases sets the time, plus (n-1) ring steps of latency. All-reduce: twice that.
  double collective_seconds(CollectiveKind kind, double bytes, const CommGroup& group) const;

  const DeviceSpec& device() const { return device_; }
  const CostParams& params() const { return params_; }

 private:
  struct TileFit {
    double efficiency = 0;     // fill * waves * tile rate of the best tile shape
    double tiles = 0;          // its tile count
    double fill_and_tile = 0;  // its fill * tile rate (for split-K)
  };
  TileFit search_tiles(int64_t m, int64_t n) const;
  TileFit best_tiles(int64_t m, int64_t n) const;  // search_tiles, remembered per thread

  const DeviceSpec& device_;
  const CostParams& params_;
  // Derived once: achieved compute rates at the sustained clock, and reciprocals for the hot path.
  std::array<double, kNumDTypes> rate_{};
  double seconds_per_byte_ = 0;
  double units_ = 0, units_inv_ = 0;
  struct TileChoice {
    int side_m, side_n;  // indexes into tile_inv_
    double area;         // elements of one output tile
    double efficiency;   // relative to the largest tile
  };
  double tile_sides_[3] = {};  // large, small, half-small tile side
  double tile_inv_[3] = {};    // their reciprocals
  std::array<TileChoice, 5> tile_choices_{};
};

}  // namespace tpsim
