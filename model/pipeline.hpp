// The timeline of one pipeline-parallel training step: every micro-batch's forward and backward
// through every pipeline stage, then the flush, in the order Megatron-LM runs them
// (megatron/core/pipeline_parallel/schedules.py: forward_backward_pipelining_without_interleaving
// and forward_backward_pipelining_with_interleaving, with get_pp_rank_microbatches' warm-up counts
// and get_schedule_table's order of chunks and micro-batches).
//
// Each stage runs its ops strictly in the schedule's order; an op starts when its stage is free and
// its input has arrived. The forward of model chunk c on micro-batch i needs chunk c-1's forward of
// i plus one p2p send; the backward of chunk c needs chunk c+1's backward of i plus one send; the
// last chunk's backward needs only its own forward. A send delays only its receiver; a send between
// chunks on the same stage (p = 1) costs nothing. Left out: a sender held until its receiver posts
// the matching receive (Megatron batches each send with the next receive), data loading, and the
// gradient reduction and optimizer after the flush (each stage's flush time is returned so that a
// caller can lay them after it).
//
// The steady-state skip: with identical micro-batches, every stage repeats its ops every micro-batch
// (1F1B) or every group of p micro-batches (interleaved) once past stage 0's warm-up. Every 16
// positions the last max(2, p) op ends of every stage (all that later ops read) are compared with
// those 1, 2, ... periods earlier (up to 4, or p under 1F1B, whose critical cycle can span p
// micro-batches); once they differ by one time, the schedule being max-plus linear, the simulator
// moves every stage as many whole periods ahead as stay in the steady state, then runs the cool-down.
// Exact up to rounding (a few ulps of the clock per op); a state that never repeats is run op by op.
//
// Closed forms the tests check, for equal stages of forward f and backward b per micro-batch and a
// send of d seconds (derived by the max-plus critical cycle, and confirmed numerically):
//   1F1B:        (m + p - 1)(f + b) + 2 (p - 1 + floor((p - 1)(m - 1) / p)) d.
//                The d term beyond the fill and drain's 2 (p - 1) d comes from the steady state:
//                stage s's backward of micro-batch i waits for stage s + 1's, which runs right after
//                s + 1's forward of the micro-batch that s sent only two ops earlier; the cycle that
//                goes up through all p stages and back exposes 2 (p - 1) sends per p micro-batches.
//                With d = 0 (or m <= 2) this is the textbook (m + p - 1)(f + b).
//   interleaved: (m + (p - 1) / v)(f + b) + 2 (p v - 1) d, with chunks of f / v and b / v, for
//                d <= min(f, b) / v: the warm-up's 2 (p - s - 1) extra forwards leave one op of
//                slack between dependent ops, which hides each send in the steady state, so only the
//                fill and drain's p v - 1 chunk boundaries, crossed twice, show.
//   p = 1:       m (f + b).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tpsim {

enum class PipelineSchedule : uint8_t { k1F1B, kInterleaved1F1B };

struct PipelineCosts {
  int64_t stages = 1;          // p
  int64_t virtual_stages = 1;  // v, model chunks per stage; v > 1 is interleaved 1F1B
  // m. Interleaved requires m % p == 0: Megatron's default microbatch_group_size_per_vp_stage is p,
  // and it refuses a last group of fewer than p micro-batches (a dependency bubble).
  int64_t micro_batches = 1;
  // Seconds of one micro-batch's forward and backward of model chunk c, c = 0..p*v-1 in model order;
  // chunk c runs on stage c % p (with v = 1, chunk c is stage c). Backward includes any recompute.
  std::span<const double> fwd_s, bwd_s;
  double p2p_s = 0;  // one activation (forward) or gradient (backward) send between adjacent stages
  // Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm; pipeline_parallel/
  // combined_1f1b.py): every stage runs one more warm-up forward (get_pp_rank_microbatches; with
  // p = 1, the first micro-batch's forward alone), and each steady-state backward is merged with the
  // forward run just before it, of another micro-batch, layer by layer, the one's expert-parallel
  // all-to-alls hidden behind the other's compute. Costed as the forward, then the backward shortened
  // by pair_hidden_s per layer the two chunks pair (the fewer of pair_layers[forward's chunk] and
  // pair_layers[backward's chunk]). The forward's output counts as ready at the forward's own end
  // (in Megatron, at the merged step's end): only the fill and drain can tell. Interleaved only when
  // p > 1 (Megatron requires virtual stages there).
  bool combined_1f1b = false;
  std::span<const int64_t> pair_layers;  // per model chunk, with combined_1f1b
  double pair_hidden_s = 0;              // per paired layer, at most that layer's backward
  // Identical micro-batches reach a periodic steady state; skip it exactly instead of running every
  // op. false: run every op (the slow reference the tests use).
  bool skip_steady_state = true;

  PipelineSchedule schedule() const {
    return virtual_stages > 1 ? PipelineSchedule::kInterleaved1F1B : PipelineSchedule::k1F1B;
  }
};

struct PipelineTimeline {
  double step_s = 0;  // first forward's start (time 0) to the last backward's end on any stage
  // Per stage: when its last backward ends (the flush; its data-parallel gradient reduction and
  // optimizer start then).
  std::vector<double> stage_end_s;
  std::vector<double> stage_busy_s;    // per stage: compute seconds
  std::vector<double> stage_merged_s;  // per stage: what combined 1F1B's merged steps saved (0 without)
  double bubble_s = 0;                 // step_s minus the busiest stage's compute
  // Per stage: the most chunk-micro-batches whose forward is done and whose backward is not (what
  // its activation memory holds at its peak). 1F1B: min(p - s, m); interleaved: Megatron's warm-up
  // plus one, at most m v.
  std::vector<int64_t> peak_in_flight;
  int64_t ops_simulated = 0;  // ops timed one by one; the rest were skipped as repeats of a period
};

// Empty when simulate() can run `c`, else the reason, naming the value at fault.
std::string check_pipeline(const PipelineCosts& c);

// Forwards stage `stage` runs before its first backward (Megatron's get_pp_rank_microbatches):
// 1F1B: p - s - 1; interleaved: 2 (p - s - 1) + (v - 1) p; one more under combined 1F1B; at most
// the stage's m v ops of each kind.
int64_t pipeline_warmup(int64_t stages, int64_t virtual_stages, int64_t micro_batches, int64_t stage,
                        bool combined_1f1b = false);

// Reusable buffers: a simulator called again with no larger a pipeline allocates nothing.
// Not thread-safe; use one per thread.
class PipelineSimulator {
 public:
  // Requires check_pipeline(c) to be empty (throws std::invalid_argument with its reason otherwise).
  // The reference stays valid until the next call.
  const PipelineTimeline& simulate(const PipelineCosts& c);

 private:
  // Where a stage is in one of its two streams (forwards, backwards): the next virtual micro-batch
  // k of get_schedule_table, k % p, and the chunk of the table's entry, (k / p) % v, kept
  // incrementally (no division per op).
  struct Cursor {
    int64_t k = 0, in_group = 0, local = 0;
    void set(int64_t k_, int64_t p, int64_t v) { k = k_, in_group = k_ % p, local = (k_ / p) % v; }
    void advance(int64_t p, int64_t v) {
      ++k;
      if (++in_group == p) in_group = 0, local = local + 1 == v ? 0 : local + 1;
    }
  };
  // Stage s's position of its forward (backward) of virtual micro-batch k.
  int64_t forward_position(int64_t s, int64_t k) const { return k < warmup_[s] ? k : 2 * k - warmup_[s]; }
  int64_t backward_position(int64_t s, int64_t k) const {
    return k < total_ - warmup_[s] ? warmup_[s] + 2 * k + 1 : total_ + k;
  }
  bool forward_at(int64_t s, int64_t pos) const {
    const int64_t w = warmup_[s];
    return pos < w || (pos < 2 * total_ - w && (pos - w) % 2 == 0);
  }
  template <bool kCombined>  // combined 1F1B's merged backwards, or none (the loop without the test)
  void run_positions(int64_t from, int64_t to);
  bool shifted_by(int64_t until, int64_t lag, double* shift) const;
  void jump(int64_t until, int64_t positions, double shift);
  double merged_saving(int64_t s, int64_t k) const;  // backward k's
  double merged_saving(int64_t s) const;             // the stage's, all step (combined 1F1B only)
  void summarize();

  int64_t slot(int64_t s, int64_t pos) const { return s * ring_ + (pos & (ring_ - 1)); }

  const PipelineCosts* c_ = nullptr;
  int64_t p_ = 1, v_ = 1, m_ = 1;
  int64_t total_ = 1;   // m v: forwards (and backwards) per stage
  int64_t len_ = 2;     // ops per stage
  int64_t period_ = 2;  // positions per stage after which the steady state's ops repeat
  int64_t lags_ = 1;    // periods apart that two states are compared, at most
  int64_t ring_ = 1;    // positions kept per stage, a power of 2 covering every look back
  int64_t window_ = 2;  // positions back an op may read its input, at most (max(2, p), at most a period)
  int64_t reach_ = 0;   // the farthest back an op has read its input, so far
  std::vector<int64_t> warmup_;
  std::vector<Cursor> fwd_at_, bwd_at_;
  std::vector<double> free_s_;
  std::vector<double> end_s_;  // op ends, stage s's position pos at slot(s, pos)
  std::vector<double> block_;  // the last window_ positions of every stage, while they are moved
  PipelineTimeline t_;
};

// One-off convenience: a fresh PipelineSimulator's result.
PipelineTimeline simulate_pipeline(const PipelineCosts& c);

}  // namespace tpsim
