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
// Positions per stage of one round of the full simulation (skip_steady_state false).
constexpr int64_t kSlowRound = 256;
// Rounding per op when comparing two states a period apart: each op's end is one addition, so two
// chains of n ops that are equal in exact arithmetic differ by up to about n ulps of the clock.
constexpr double kRoundingPerOp = 4 * DBL_EPSILON;
// Bounds that keep every index an int64_t far from overflow and the buffers within memory.
constexpr int64_t kMaxStages = 1 << 12;
constexpr int64_t kMaxVirtualStages = 1 << 8;
constexpr int64_t kMaxMicroBatches = int64_t{1} << 32;

}  // namespace

std::string check_pipeline(const PipelineCosts& c) {
  if (c.stages < 1 || c.stages > kMaxStages) return "pipeline stages must be in 1.." + std::to_string(kMaxStages);
  if (c.virtual_stages < 1 || c.virtual_stages > kMaxVirtualStages)
    return "virtual stages must be in 1.." + std::to_string(kMaxVirtualStages);
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
  return {};
}

int64_t pipeline_warmup(int64_t stages, int64_t virtual_stages, int64_t micro_batches, int64_t stage) {
  const int64_t total = micro_batches * virtual_stages;
  if (virtual_stages == 1) return std::min(stages - stage - 1, total);
  // Megatron: (v - 1) * microbatch_group_size_per_vp_stage (default p) forwards on every stage,
  // then two more per stage behind, so that later stages can start 1F1B at once.
  return std::min(2 * (stages - stage - 1) + (virtual_stages - 1) * stages, total);
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
// List scheduling: sweeps over the stages, alternately up (forwards flow that way) and down
// (backwards), each stage running its ops in order until one's input is not ready, until every
// stage has run every op below position `limit`. Every op's input sits at the same or an earlier
// position, so no round can deadlock.
void PipelineSimulator::run_until(int64_t limit) {
  const int64_t lim = std::min(limit, len_), mask = ring_ - 1, last = p_ - 1;
  const double hop = p_ > 1 ? c_->p2p_s : 0;  // chunks c and c +- 1 share a stage only when p = 1
  const double* const fwd_s = c_->fwd_s.data();
  const double* const bwd_s = c_->bwd_s.data();
  for (bool up = true;; up = !up) {
    bool progress = false, done = true;
    for (int64_t i = 0; i < p_; ++i) {
      const int64_t s = up ? i : last - i;
      const int64_t w = warmup_[s], steady_to = 2 * total_ - w, start = next_[s];
      double* const mine = &end_s_[s * ring_];
      Cursor& f = fwd_at_[s];
      Cursor& b = bwd_at_[s];
      double free = free_s_[s];
      int64_t pos = start;
      for (; pos < lim; ++pos) {
        const bool forward = pos < w || (pos < steady_to && ((pos - w) & 1) == 0);
        int64_t dep_stage = s, dep_pos = -1;
        double sent = hop;
        if (forward) {
          if (s > 0) {
            dep_stage = s - 1, dep_pos = forward_position(s - 1, f.k);
          } else if (f.local > 0) {
            dep_stage = last, dep_pos = forward_position(last, f.k - p_);
          }
        } else if (s < last) {
          dep_stage = s + 1, dep_pos = backward_position(s + 1, b.k);
        } else if (b.local == 0) {  // the last chunk: its own forward
          dep_pos = forward_position(s, b.k + (v_ - 1) * p_), sent = 0;
        } else {
          dep_stage = 0, dep_pos = backward_position(0, b.k - p_);
        }
        double ready = 0;
        if (dep_pos >= 0) {
          if (dep_pos >= (dep_stage == s ? pos : next_[dep_stage])) break;
          // A look further back than a period would read a slot the ring has reused.
          if (pos - dep_pos > period_) throw std::logic_error("pipeline: an op's input lies more than a period back");
          ready = end_s_[dep_stage * ring_ + (dep_pos & mask)] + sent;
        }
        if (forward) {
          free = std::max(free, ready) + fwd_s[f.local * p_ + s];
          f.advance(p_, v_);
        } else {
          free = std::max(free, ready) + bwd_s[(v_ - 1 - b.local) * p_ + s];
          b.advance(p_, v_);
        }
        mine[pos & mask] = free;
      }
      progress = progress || pos > start;
      t_.ops_simulated += pos - start;
      next_[s] = pos;
      free_s_[s] = free;
      done = done && pos >= lim;
    }
    if (done) return;
    if (!progress) throw std::logic_error("pipeline: the schedule deadlocked");
  }
}

// Whether the last period of every stage, [until - period, until), is the period `lag` positions
// earlier moved by one time `shift`: then, being max-plus linear, everything after repeats it.
bool PipelineSimulator::shifted_by(int64_t until, int64_t lag, double* shift) const {
  *shift = end_s_[slot(0, until - 1)] - end_s_[slot(0, until - 1 - lag)];
  const double tol = kRoundingPerOp * static_cast<double>(lag + period_);
  for (int64_t s = 0; s < p_; ++s) {
    for (int64_t pos = until - period_; pos < until; ++pos) {
      const double now = end_s_[slot(s, pos)];
      if (std::abs(now - end_s_[slot(s, pos - lag)] - *shift) > tol * std::abs(now)) return false;
    }
  }
  return true;
}

// Moves every stage `positions` ahead: the last period's ends, each plus `shift`.
void PipelineSimulator::jump(int64_t until, int64_t positions, double shift) {
  for (int64_t s = 0; s < p_; ++s) {
    for (int64_t pos = until - period_; pos < until; ++pos) block_[s * period_ + pos - until + period_] = end_s_[slot(s, pos)];
    for (int64_t pos = until - period_; pos < until; ++pos)
      end_s_[slot(s, pos + positions)] = block_[s * period_ + pos - until + period_] + shift;
    next_[s] = until + positions;
    free_s_[s] = end_s_[slot(s, until + positions - 1)];
    // A steady period runs as many forwards as backwards.
    fwd_at_[s].set(fwd_at_[s].k + positions / 2, p_, v_);
    bwd_at_[s].set(bwd_at_[s].k + positions / 2, p_, v_);
  }
}

void PipelineSimulator::summarize() {
  t_.step_s = 0;
  double busiest = 0;
  for (int64_t s = 0; s < p_; ++s) {
    double per_micro = 0;
    for (int64_t local = 0; local < v_; ++local) per_micro += c_->fwd_s[local * p_ + s] + c_->bwd_s[local * p_ + s];
    t_.stage_busy_s[s] = static_cast<double>(m_) * per_micro;
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
  // Rounds of one period, after each of which the state is compared with earlier ones; without the
  // skip, longer rounds (fewer sweeps over the stages). The ring holds the compared periods, a
  // round, and a period of inputs before it.
  const int64_t round = c.skip_steady_state ? period_ : period_ * ((kSlowRound + period_ - 1) / period_);
  ring_ = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>((lags_ + 2) * period_ + round)));
  warmup_.resize(p_);
  next_.assign(p_, 0);
  fwd_at_.assign(p_, Cursor{});
  bwd_at_.assign(p_, Cursor{});
  free_s_.assign(p_, 0.0);
  end_s_.resize(p_ * ring_);
  block_.resize(p_ * period_);
  t_.stage_end_s.resize(p_);
  t_.stage_busy_s.resize(p_);
  t_.peak_in_flight.resize(p_);
  t_.ops_simulated = 0;
  for (int64_t s = 0; s < p_; ++s) warmup_[s] = pipeline_warmup(p_, v_, m_, s);

  // Positions where every stage is in its steady state: past stage 0's warm-up (the longest) and
  // before its cool-down.
  const int64_t steady_from = warmup_[0], steady_to = len_ - warmup_[0];
  bool skipped = !c.skip_steady_state;
  for (int64_t until = 0; until < len_;) {
    until = std::min(until + round, len_);
    run_until(until);
    for (int64_t lag = 1; !skipped && lag <= lags_; ++lag) {
      // The compared periods, and the inputs of the round that made the older one, are steady.
      if (until - (lag + 1) * period_ < steady_from || until > steady_to) break;
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
