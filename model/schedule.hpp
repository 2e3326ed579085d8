// The timeline of one FSDP training step on one GPU: a compute stream and a communication
// stream, layer by layer, with PyTorch FSDP's prefetching and Composer's limit_all_gathers.
//
// Forward: block i's all-gather may start once the collective before it is done and block i-2's
// forward has finished (at most two gathered blocks in flight); block i's forward waits for its
// gather. Backward (FULL_SHARD, HYBRID_SHARD re-gather): the gather of block i-1 is issued before
// the reduce-scatter of block i, which waits for block i's gradients. Compute slows by
// `overlap_slowdown` for the time a collective runs beside it (they share SMs and memory
// bandwidth). Whatever compute does not hide is exposed.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "model/architecture.hpp"

namespace tpsim {

// Compute and a collective issued beside it on another stream, taken as overlapping from their
// start: the longer of the two, the compute slowed by `slowdown` (CostParams::overlap_slowdown) for
// the time they overlap, as the stream timeline below charges it.
inline double side_by_side_seconds(double compute, double comm, double slowdown) {
  return std::max(compute, comm) + slowdown * std::min(compute, comm);
}

// A piece of work on one of two streams: its seconds, and the index of the piece on the other
// stream it waits for (-1: none).
struct StreamPiece {
  double s = 0;
  int after = -1;
};

// Two streams each running its pieces in order, a piece starting once its stream is free and the
// piece it waits for has ended (CUDA events between the streams). The seconds until both are done,
// plus `slowdown` times the seconds both are busy at once (side_by_side_seconds' rule, which this
// is when neither waits). Every wait must point at a piece that
// can run first.
template <size_t N, size_t M>
double two_stream_seconds(const std::array<StreamPiece, N>& compute, const std::array<StreamPiece, M>& comm,
                          double slowdown) {
  std::array<double, N> c_start{}, c_end{};
  std::array<double, M> m_start{}, m_end{};
  size_t i = 0, j = 0;
  double c_free = 0, m_free = 0;
  const auto ready = [](int after, size_t done) { return after < 0 || static_cast<size_t>(after) < done; };
  while (i < N || j < M) {
    if (i < N && ready(compute[i].after, j)) {
      c_start[i] = std::max(c_free, compute[i].after < 0 ? 0.0 : m_end[static_cast<size_t>(compute[i].after)]);
      c_free = c_end[i] = c_start[i] + compute[i].s;
      ++i;
    } else if (j < M && ready(comm[j].after, i)) {
      m_start[j] = std::max(m_free, comm[j].after < 0 ? 0.0 : c_end[static_cast<size_t>(comm[j].after)]);
      m_free = m_end[j] = m_start[j] + comm[j].s;
      ++j;
    } else {
      throw std::logic_error("two_stream_seconds: the pieces wait for each other");  // a caller's bug
    }
  }
  double both = 0;
  for (size_t a = 0; a < N; ++a)
    for (size_t b = 0; b < M; ++b)
      both += std::max(0.0, std::min(c_end[a], m_end[b]) - std::max(c_start[a], m_start[b]));
  return std::max(c_free, m_free) + slowdown * both;
}

// Costs of one micro-batch, in seconds, each at least 0. Collective times are 0 where the strategy
// issues none.
struct MicroBatchCosts {
  double embed_fwd_s = 0;
  double block_fwd_s = 0;  // one block's forward (including FSDP casts on the compute stream)
  double head_s = 0;       // final norm, logits, loss and their backward
  double block_bwd_s = 0;  // one block's backward, including its recompute under checkpointing
  double embed_bwd_s = 0;
  double root_gather_s = 0;  // the root unit (embeddings, final norm), gathered once per micro-batch
  double root_reduce_s = 0;
  double block_gather_fwd_s = 0;  // one block's parameter all-gather before its forward
  double block_gather_bwd_s = 0;  // ... and before its backward (FULL_SHARD, HYBRID_SHARD)
  double block_reduce_s = 0;      // one block's gradient reduce-scatter / all-reduce
  double overhead_s = 0;          // GPU idle per micro-batch (data loading, hooks)
  double block_overhead_s = 0;    // GPU idle before each block's forward and backward (CPU-side hooks)
  // false: the last block stays gathered from its forward to its backward, which then gathers
  // nothing first (FSDP2 as torchtitan applies it: reshard_after_forward=False for the last block).
  bool last_block_regathered = true;

  bool operator==(const MicroBatchCosts&) const = default;
};

struct StepCosts {
  int64_t n_layers = 0;
  int64_t n_micro = 1;   // micro-batches per step (gradient accumulation)
  MicroBatchCosts full;  // a full micro-batch
  MicroBatchCosts last;  // the last one, smaller when the micro-batch does not divide the batch
  double optimizer_s = 0;
  double step_overhead_s = 0;
  double overlap_slowdown = 0;
  // A model whose layers differ (layer_pattern): its runs of equal layers in model order and, per
  // group, a full and a last micro-batch's costs whose block fields are that group's block (the
  // other fields are full's and last's). Empty: n_layers blocks of full's and last's.
  std::vector<LayerRun> runs;
  std::vector<MicroBatchCosts> full_groups, last_groups;
  // Identical blocks and micro-batches reach a steady state (within each run of equal layers); skip
  // it exactly instead of stepping through every block. false: step through everything (the slow reference the tests
  // use).
  bool skip_steady_state = true;
};

struct CostParams;

// A data-parallel step of n_micro micro-batches (each `full` but the last) and its optimizer, under
// the profile's per-step overhead and compute slowdown beside collectives: composer's and
// torchtitan's FSDP steps.
StepCosts data_parallel_step(int64_t n_layers, int64_t n_micro, const MicroBatchCosts& full,
                             const MicroBatchCosts& last, double optimizer_s, const CostParams& params);

struct Timeline {
  double step_s = 0;
  double compute_s = 0;   // compute-stream kernel time, without slowdown
  double slowdown_s = 0;  // compute time added by overlapping collectives
  double comm_s = 0;      // communication-stream busy time
  double optimizer_s = 0;
  double overhead_s = 0;       // fixed idle time (micro-batch and step overheads)
  double exposed_comm_s = 0;   // step time not covered by compute, optimizer or overheads (incl. slowdown)
  int64_t blocks_stepped = 0;  // block forwards and backwards simulated one by one (the rest were skipped)
};

Timeline simulate_step(const StepCosts& costs);

}  // namespace tpsim
