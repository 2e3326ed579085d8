#include "model/pipeline.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <stdexcept>

namespace tpsim {
namespace {

// Up to this many periods apart (and p under 1F1B), two states of the steady state are compared: the
// timing may repeat only every few structural periods (the max-plus cyclicity). Under 1F1B with
// sends, the critical cycle runs through all p stages and repeats every p micro-batches.
constexpr int64_t kMinLags = 4;
// Positions per stage between two comparisons of the state with earlier ones, at most: often enough
// to skip soon after the warm-up, seldom enough to cost little. Without the skip, one round.
constexpr int64_t kCheckEvery = 16;
constexpr int64_t kSlowRound = 256;
// Rounding per op when comparing two states a period apart: each op's end is one addition, so two
// chains of n ops that are equal in exact arithmetic differ by up to about n ulps of the clock.
constexpr double kRoundingPerOp = 4 * DBL_EPSILON;
// Bounds that keep every index far from overflow and the buffers (about 16 p^2 v op ends) within
// 64 MiB. A chunk holds at least one layer, and the largest models have about 130.
constexpr int64_t kMaxStages = 256;
constexpr int64_t kMaxChunks = 2048;
constexpr int64_t kMaxMicroBatches = int64_t{1} << 32;

}  // namespace

std::string check_pipeline(const PipelineCosts& c) {
  if (c.stages < 1 || c.stages > kMaxStages) return "pipeline stages must be in 1.." + std::to_string(kMaxStages);
  if (c.virtual_stages < 1 || c.virtual_stages > kMaxChunks / c.stages)
    return "virtual stages must be in 1.." + std::to_string(kMaxChunks / c.stages) + " (at most " +
           std::to_string(kMaxChunks) + " model chunks)";
  if (c.micro_batches < 1 || c.micro_batches > kMaxMicroBatches) return "micro-batches must be in 1..2^32";
  if (c.virtual_stages > 1 && c.micro_batches % c.stages != 0)
    return "interleaved 1F1B needs the micro-batches (" + std::to_string(c.micro_batches) +
           ") to be a multiple of the pipeline stages (" + std::to_string(c.stages) + ")";
  const auto chunks = static_cast<size_t>(c.stages * c.virtual_stages);
  if (c.fwd_s.size() != chunks || c.bwd_s.size() != chunks)
    return "pipeline costs need one forward and one backward time per model chunk (" + std::to_string(chunks) + ")";
  const auto bad = [](double x) { return !std::isfinite(x) || x < 0; };
  if (std::any_of(c.fwd_s.begin(), c.fwd_s.end(), bad) || std::any_of(c.bwd_s.begin(), c.bwd_s.end(), bad))
    return "pipeline chunk times must be finite and at least 0";
  if (bad(c.p2p_s)) return "pipeline send time must be finite and at least 0";
  if (c.combined_1f1b) {
    if (c.stages > 1 && c.virtual_stages == 1)
      return "combined 1F1B with pipeline parallelism runs the interleaved schedule: virtual stages must be at least 2";
    if (c.pair_layers.size() != chunks) return "combined 1F1B needs the layers of every model chunk";
    if (std::any_of(c.pair_layers.begin(), c.pair_layers.end(), [](int64_t n) { return n < 0; }) ||
        bad(c.pair_hidden_s))
      return "combined 1F1B's paired layers and hidden time must be at least 0";
  }
  return {};
}

int64_t pipeline_warmup(int64_t stages, int64_t virtual_stages, int64_t micro_batches, int64_t stage,
                        bool combined_1f1b) {
  const int64_t total = micro_batches * virtual_stages;
  const int64_t extra = combined_1f1b ? 1 : 0;  // F and B of different micro-batches in every merged step
  if (virtual_stages == 1) return std::min(stages - stage - 1 + extra, total);
  // Megatron: (v - 1) * microbatch_group_size_per_vp_stage (default p) forwards on every stage,
  // then two more per stage behind, so that later stages can start 1F1B at once.
  return std::min(2 * (stages - stage - 1) + (virtual_stages - 1) * stages + extra, total);
}

// Stage s's ops in order, by position: `w` warm-up forwards (virtual micro-batches 0..w-1), then
// forward k + w and backward k alternately for k = 0..m v - w - 1, then the remaining backwards.
// A virtual micro-batch k is get_schedule_table's entry k: groups of p micro-batches, each group run
// through chunk 0, then chunk 1, ...: micro-batch (k / (p v)) p + k % p, local chunk (k / p) % v.
// Backwards take the local chunks in reverse (v - 1 - that).
//
// An op's input is the same micro-batch on the neighbouring chunk, so its virtual micro-batch
// differs only by whole rows of the table: forward of chunk l p + s needs, on stage s - 1, the same
// k; on stage 0, stage p - 1's k - p (the previous local chunk). Backward of l p + s needs stage
// s + 1's same k, or on stage p - 1, stage 0's k - p; the last chunk's backward needs its own forward,
// v - 1 rows further on: k + (v - 1) p.
//
// List scheduling in one fixed topological order: position by position, the forwards up the stages,
// then the backwards down them. Every input sits at an earlier position, or at the same position
// only on the stage before (a forward's) or after (a backward's): a forward's position max(k, 2k - w)
// and a backward's min(w + 2k + 1, m v + k) move monotonically with the warm-up w, which shrinks
// from stage to stage (by 2 across the wrap from stage p - 1 to stage 0, which puts that input
// strictly earlier). So each op runs once, when its input is known, and no stage ever waits in a
// queue.
template <bool kCombined>
void PipelineSimulator::run_positions(int64_t from, int64_t to) {
  const int64_t mask = ring_ - 1, last = p_ - 1;
  const double hop = p_ > 1 ? c_->p2p_s : 0;  // chunks c and c +- 1 share a stage only when p = 1
  const double* const fwd_s = c_->fwd_s.data();
  const double* const bwd_s = c_->bwd_s.data();
  int64_t reach = reach_;
  const auto end_at = [&](int64_t s, int64_t pos, int64_t dep_pos) {
    reach = std::max(reach, pos - dep_pos);
    return end_s_[s * ring_ + (dep_pos & mask)];
  };
  for (int64_t pos = from; pos < to; ++pos) {
    for (int64_t s = 0; s < p_; ++s) {
      if (!forward_at(s, pos)) continue;
      Cursor& f = fwd_at_[s];
      double ready = 0;
      if (s > 0) {
        ready = end_at(s - 1, pos, forward_position(s - 1, f.k)) + hop;
      } else if (f.local > 0) {
        ready = end_at(last, pos, forward_position(last, f.k - p_)) + hop;
      }
      free_s_[s] = std::max(free_s_[s], ready) + fwd_s[f.local * p_ + s];
      end_s_[s * ring_ + (pos & mask)] = free_s_[s];
      f.advance(p_, v_);
    }
    for (int64_t s = last; s >= 0; --s) {
      if (forward_at(s, pos)) continue;
      Cursor& b = bwd_at_[s];
      double ready = 0;
      if (s < last) {
        ready = end_at(s + 1, pos, backward_position(s + 1, b.k)) + hop;
      } else if (b.local == 0) {  // the last chunk: its own forward
        ready = end_at(s, pos, forward_position(s, b.k + (v_ - 1) * p_));
      } else {
        ready = end_at(0, pos, backward_position(0, b.k - p_)) + hop;
      }
      double seconds = bwd_s[(v_ - 1 - b.local) * p_ + s];
      if (kCombined && b.k < total_ - warmup_[s]) seconds -= merged_saving(s, b.k);
      free_s_[s] = std::max(free_s_[s], ready) + seconds;
      end_s_[s * ring_ + (pos & mask)] = free_s_[s];
      b.advance(p_, v_);
    }
  }
  t_.ops_simulated += p_ * (to - from);
  reach_ = reach;
  // Past window_, an input would have been read from a slot the ring had reused, or not rewritten by
  // a jump: a bug in window_'s bound, which this makes loud.
  if (reach_ > window_) throw std::logic_error("pipeline: an op's input lies further back than max(2, p) positions");
}

// Whether the ends of the last window_ positions of every stage (everything a later op can read)
// are those `lag` positions earlier moved by one time `shift`: then, the schedule being max-plus
// linear and periodic there, everything after repeats them too.
bool PipelineSimulator::shifted_by(int64_t until, int64_t lag, double* shift) const {
  *shift = end_s_[slot(0, until - 1)] - end_s_[slot(0, until - 1 - lag)];
  const double tol = kRoundingPerOp * static_cast<double>(lag + period_);
  for (int64_t s = 0; s < p_; ++s) {
    for (int64_t pos = until - window_; pos < until; ++pos) {
      const double now = end_s_[slot(s, pos)];
      if (std::abs(now - end_s_[slot(s, pos - lag)] - *shift) > tol * std::abs(now)) return false;
    }
  }
  return true;
}

// Moves every stage `positions` ahead: the last window_ positions' ends, each plus `shift`.
void PipelineSimulator::jump(int64_t until, int64_t positions, double shift) {
  for (int64_t s = 0; s < p_; ++s) {
    double* const held = &block_[s * window_];
    for (int64_t i = 0; i < window_; ++i) held[i] = end_s_[slot(s, until - window_ + i)];
    for (int64_t i = 0; i < window_; ++i) end_s_[slot(s, until + positions - window_ + i)] = held[i] + shift;
    free_s_[s] = end_s_[slot(s, until + positions - 1)];
    // A steady period runs as many forwards as backwards.
    fwd_at_[s].set(fwd_at_[s].k + positions / 2, p_, v_);
    bwd_at_[s].set(bwd_at_[s].k + positions / 2, p_, v_);
  }
}

// What combined 1F1B saves on stage s's backward of virtual micro-batch k (k < m v - w), merged with
// the forward of k + w: pair_hidden_s per layer the two chunks pair, at most the backward itself.
double PipelineSimulator::merged_saving(int64_t s, int64_t k) const {
  const int64_t bwd_chunk = (v_ - 1 - (k / p_) % v_) * p_ + s, fwd_chunk = (((k + warmup_[s]) / p_) % v_) * p_ + s;
  const int64_t pairs = std::min(c_->pair_layers[bwd_chunk], c_->pair_layers[fwd_chunk]);
  return std::min(static_cast<double>(pairs) * c_->pair_hidden_s, c_->bwd_s[bwd_chunk]);
}

// All that stage s's merged steps save. Their chunks repeat every p v virtual micro-batches: whole
// cycles, then the rest.
double PipelineSimulator::merged_saving(int64_t s) const {
  const int64_t merged = total_ - warmup_[s], cycle = p_ * v_;
  const auto saving = [&](int64_t k) { return merged_saving(s, k); };
  double per_cycle = 0, rest = 0;
  if (merged >= cycle)
    for (int64_t k = 0; k < cycle; ++k) per_cycle += saving(k);
  for (int64_t k = 0; k < merged % cycle; ++k) rest += saving(k);
  const int64_t whole_cycles = merged / cycle;
  return static_cast<double>(whole_cycles) * per_cycle + rest;
}

void PipelineSimulator::summarize() {
  t_.step_s = 0;
  double busiest = 0;
  for (int64_t s = 0; s < p_; ++s) {
    double per_micro = 0;
    for (int64_t local = 0; local < v_; ++local) per_micro += c_->fwd_s[local * p_ + s] + c_->bwd_s[local * p_ + s];
    t_.stage_merged_s[s] = c_->combined_1f1b ? merged_saving(s) : 0.0;
    t_.stage_busy_s[s] = static_cast<double>(m_) * per_micro - t_.stage_merged_s[s];
    t_.stage_end_s[s] = free_s_[s];
    t_.peak_in_flight[s] = std::min(warmup_[s] + 1, total_);  // the warm-up, then one more forward
    t_.step_s = std::max(t_.step_s, free_s_[s]);
    busiest = std::max(busiest, t_.stage_busy_s[s]);
  }
  t_.bubble_s = t_.step_s - busiest;
}

const PipelineTimeline& PipelineSimulator::simulate(const PipelineCosts& c) {
  if (const std::string why = check_pipeline(c); !why.empty()) throw std::invalid_argument(why);
  c_ = &c;
  p_ = c.stages, v_ = c.virtual_stages, m_ = c.micro_batches;
  total_ = m_ * v_;
  len_ = 2 * total_;
  // The schedule repeats every micro-batch under 1F1B, every group of p micro-batches through all
  // v chunks under interleaving: that many forwards and as many backwards per stage.
  period_ = v_ == 1 ? 2 : 2 * p_ * v_;
  lags_ = v_ == 1 ? std::max(p_, kMinLags) : kMinLags;
  // Rounds after each of which the state is compared with earlier ones (without the skip, longer
  // ones). The ring holds the compared states, a round, and a period of inputs before it.
  const int64_t round = c.skip_steady_state ? std::min(period_, kCheckEvery) : kSlowRound;
  ring_ = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>((lags_ + 2) * period_ + round)));
  warmup_.resize(p_);
  fwd_at_.assign(p_, Cursor{});
  bwd_at_.assign(p_, Cursor{});
  free_s_.assign(p_, 0.0);
  end_s_.resize(p_ * ring_);
  // How far back an op reads its input, at most: 1F1B's inputs lie at most one position back (the
  // neighbour's warm-up is one longer); interleaving's two, except across the wrap from stage p - 1
  // to stage 0 in the warm-up and cool-down, p back (stage 0's forward k reads stage p - 1's k - p;
  // stage p - 1's cool-down backward at m v + k reads stage 0's at m v + k - p).
  // Combined 1F1B's extra warm-up forward on every stage keeps the neighbours' distances and puts a
  // last chunk's backward two positions further from its own forward: 3 back.
  window_ = std::max<int64_t>(v_ == 1 ? 2 : std::max<int64_t>(2, p_), c.combined_1f1b ? 3 : 0);
  reach_ = 0;
  block_.resize(p_ * window_);
  t_.stage_end_s.resize(p_);
  t_.stage_busy_s.resize(p_);
  t_.stage_merged_s.resize(p_);
  t_.peak_in_flight.resize(p_);
  t_.ops_simulated = 0;
  for (int64_t s = 0; s < p_; ++s) warmup_[s] = pipeline_warmup(p_, v_, m_, s, c.combined_1f1b);

  // Positions where every stage is in its steady state: past stage 0's warm-up (the longest) and
  // before its cool-down.
  const int64_t steady_from = warmup_[0], steady_to = len_ - warmup_[0];
  bool skipped = !c.skip_steady_state;
  for (int64_t until = 0; until < len_;) {
    const int64_t from = until;
    until = std::min(until + round, len_);
    if (c.combined_1f1b) run_positions<true>(from, until);
    else run_positions<false>(from, until);
    for (int64_t lag = 1; !skipped && lag <= lags_; ++lag) {
      // The older state and the inputs of every op after it are steady: from there on, every op is
      // the one `lag` periods before it, with its inputs as far back, and a cost alike.
      if (until - lag * period_ - window_ < steady_from || until > steady_to) break;
      double shift = 0;
      if (!shifted_by(until, lag * period_, &shift)) continue;
      const int64_t repeats = (steady_to - until) / (lag * period_);
      if (repeats > 0) jump(until, repeats * lag * period_, static_cast<double>(repeats) * shift);
      until += repeats * lag * period_;
      skipped = true;
    }
  }
  summarize();
  return t_;
}

PipelineTimeline simulate_pipeline(const PipelineCosts& c) {
  PipelineSimulator sim;
  return sim.simulate(c);
}

}  // namespace tpsim
