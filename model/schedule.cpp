#include "model/schedule.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace tpsim {
namespace {

// Accumulated busy times of the streams.
struct Totals {
  double compute = 0, slowed = 0, comm = 0, idle = 0;
};

class Streams {
 public:
  explicit Streams(double slowdown) : slowdown_(slowdown) {}

  // Runs a collective once `ready` and the stream are free; returns its end.
  double comm(double ready, double seconds) {
    if (seconds <= 0) return ready;
    const double start = std::max(comm_free_, ready);
    comm_free_ = start + seconds;
    recent_[next_] = {start, comm_free_};
    next_ = next_ + 1 == recent_.size() ? 0 : next_ + 1;
    totals_.comm += seconds;
    return comm_free_;
  }

  // Runs compute once `ready` and the stream are free, slowed where collectives overlap it.
  double compute(double ready, double seconds) {
    const double start = std::max(compute_free_, ready);
    const double end = start + seconds;
    // Collectives run one after another: walk back from the newest until one ended before start.
    double overlap = 0;
    for (size_t k = 0, i = newest(); k < recent_.size(); ++k, i = i == 0 ? recent_.size() - 1 : i - 1) {
      const auto& [cs, ce] = recent_[i];
      if (ce <= start) break;
      overlap += std::max(0.0, std::min(ce, end) - std::max(cs, start));
    }
    const double extra = slowdown_ * overlap;
    compute_free_ = start + seconds + extra;
    totals_.compute += seconds;
    totals_.slowed += extra;
    return compute_free_;
  }

  void idle(double seconds) {
    compute_free_ += seconds;
    totals_.idle += seconds;
  }

  // Moves the whole state `times` periods ahead: clocks by `period`, totals by `delta`.
  void skip(double period, const Totals& delta, double times) {
    compute_free_ += period * times;
    comm_free_ += period * times;
    for (auto& iv : recent_) {
      iv.first += period * times;
      iv.second += period * times;
    }
    totals_.compute += delta.compute * times;
    totals_.slowed += delta.slowed * times;
    totals_.comm += delta.comm * times;
    totals_.idle += delta.idle * times;
  }

  double compute_free() const { return compute_free_; }
  double comm_free() const { return comm_free_; }
  const Totals& totals() const { return totals_; }

  // Everything that shapes what happens next, relative to the compute clock: the streams are
  // shift-invariant, so two equal relative states evolve identically. Collectives that ended
  // before the compute clock can no longer overlap compute and are left out.
  bool same_relative_state(const Streams& o) const {
    const double tol = 1e-9 * std::max(1.0, std::fabs(compute_free_));
    if (std::fabs((comm_free_ - compute_free_) - (o.comm_free_ - o.compute_free_)) > tol) return false;
    // The live collectives, newest first, must match pairwise.
    size_t i = newest(), j = o.newest();
    for (size_t k = 0; k < recent_.size(); ++k) {
      const auto& a = recent_[i];
      const auto& b = o.recent_[j];
      const bool a_live = a.second > compute_free_, b_live = b.second > o.compute_free_;
      if (a_live != b_live) return false;
      if (!a_live) return true;
      if (std::fabs((a.first - compute_free_) - (b.first - o.compute_free_)) > tol ||
          std::fabs((a.second - compute_free_) - (b.second - o.compute_free_)) > tol)
        return false;
      i = i == 0 ? recent_.size() - 1 : i - 1;
      j = j == 0 ? recent_.size() - 1 : j - 1;
    }
    return true;
  }

 private:
  size_t newest() const { return next_ == 0 ? recent_.size() - 1 : next_ - 1; }

 public:
  // True when, `idle` seconds after the compute clock, the communication stream has finished
  // everything: the state every step starts from.
  bool drained_after(double idle) const { return comm_free_ <= compute_free_ + idle; }

 private:

  double slowdown_;
  double compute_free_ = 0, comm_free_ = 0;
  Totals totals_;
  std::array<std::pair<double, double>, 4> recent_{};  // the last collectives, for overlap
  size_t next_ = 0;
};

Totals operator-(const Totals& a, const Totals& b) {
  return {a.compute - b.compute, a.slowed - b.slowed, a.comm - b.comm, a.idle - b.idle};
}

// Limit on gathered blocks in flight (Composer's limit_all_gathers): block i's gather waits for
// block i-2 to free its parameters.
void simulate_micro_batch(const MicroBatchCosts& c, int64_t n_layers, bool skip, Streams& s) {
  s.idle(c.overhead_s);
  const double start = s.compute_free();

  // Forward. done1, done2: when blocks i-1 and i-2 finished their forward (the start for the
  // first two blocks, whose gathers wait for nothing).
  const double root = s.comm(start, c.root_gather_s);
  double prev = s.compute(root, c.embed_fwd_s);
  double done1 = start, done2 = start;
  // Blocks are identical and the streams shift-invariant: once a block leaves the same relative
  // state as the block before it, every later block repeats it, and the rest are skipped exactly.
  Streams before = s;
  double before_done2 = 0;
  for (int64_t i = 0; i < n_layers; ++i) {
    const double clock = s.compute_free();
    const Totals totals = s.totals();
    const double gathered = c.block_gather_fwd_s > 0 ? s.comm(done2, c.block_gather_fwd_s) : 0.0;
    s.idle(c.block_overhead_s);
    prev = s.compute(std::max(prev, gathered), c.block_fwd_s);
    done2 = done1;
    done1 = prev;
    const double rel_done2 = done2 - prev, period = prev - clock;
    const double tol = 1e-9 * std::max(1.0, prev);
    if (skip && i >= 1 && i + 1 < n_layers && std::fabs(rel_done2 - before_done2) <= tol &&
        s.same_relative_state(before)) {
      const double times = static_cast<double>(n_layers - 1 - i);
      s.skip(period, s.totals() - totals, times);
      prev += period * times;
      done1 += period * times;
      done2 += period * times;
      break;
    }
    before = s;
    before_done2 = rel_done2;
  }

  // Loss and head; the last block's backward gather is issued as the head's backward starts.
  const double head_start = prev;
  prev = s.compute(prev, c.head_s);

  // Backward, blocks L-1 .. 0: the gather of block i-1 is issued once block i+1's gathered
  // parameters are freed (after its backward), then block i computes, then its gradients are
  // reduced.
  const bool regather = c.block_gather_bwd_s > 0;
  double gathered_next = regather ? s.comm(head_start, c.block_gather_bwd_s) : 0.0;  // block L-1
  double freed = head_start;  // when block i+1's backward finished
  before = s;
  double before_gathered = 0;
  for (int64_t i = n_layers - 1; i >= 0; --i) {
    const double clock = s.compute_free();
    const Totals totals = s.totals();
    const double gathered = gathered_next;
    if (regather && i > 0) gathered_next = s.comm(freed, c.block_gather_bwd_s);
    s.idle(c.block_overhead_s);
    prev = s.compute(std::max(prev, gathered), c.block_bwd_s);
    freed = prev;
    s.comm(prev, c.block_reduce_s);
    const double rel_gathered = regather ? gathered_next - prev : 0.0, period = prev - clock;
    const double tol = 1e-9 * std::max(1.0, prev);
    // Skip to block 1, whose gather of block 0 is the last one.
    if (skip && i <= n_layers - 2 && i > 1 && std::fabs(rel_gathered - before_gathered) <= tol &&
        s.same_relative_state(before)) {
      const double times = static_cast<double>(i - 1);
      s.skip(period, s.totals() - totals, times);
      prev += period * times;
      freed += period * times;
      gathered_next += period * times;
      i = 1;
      continue;
    }
    before = s;
    before_gathered = rel_gathered;
  }
  prev = s.compute(prev, c.embed_bwd_s);
  s.comm(prev, c.root_reduce_s);
}

}  // namespace

Timeline simulate_step(const StepCosts& costs) {
  Streams s(costs.overlap_slowdown);
  const int64_t n = costs.n_micro;
  const bool skip = costs.skip_steady_state;
  // Micro-batches in order; the last may be smaller. Once a full micro-batch leaves the streams
  // in the same relative state as the one before it, every further full one repeats it exactly.
  const int64_t n_full = costs.last == costs.full ? n : n - 1;
  Streams before = s;
  for (int64_t j = 0; j < n_full; ++j) {
    const double clock = s.compute_free();
    const Totals totals = s.totals();
    simulate_micro_batch(costs.full, costs.n_layers, skip, s);
    // The first micro-batch starts drained; if it leaves the streams drained again (by the time
    // the next one starts), every full one repeats it. Otherwise compare consecutive states.
    const bool repeats = j == 0 ? s.drained_after(costs.full.overhead_s) : s.same_relative_state(before);
    if (skip && j + 1 < n_full && repeats) {
      s.skip(s.compute_free() - clock, s.totals() - totals, static_cast<double>(n_full - 1 - j));
      break;
    }
    before = s;
  }
  if (n_full < n) simulate_micro_batch(costs.last, costs.n_layers, skip, s);

  // The optimizer needs every reduced gradient.
  const double optimizer_start = std::max(s.compute_free(), s.comm_free());
  const Totals& tot = s.totals();
  Timeline t;
  t.optimizer_s = costs.optimizer_s;
  t.step_s = optimizer_start + costs.optimizer_s + costs.step_overhead_s;
  t.compute_s = tot.compute;
  t.slowdown_s = tot.slowed;
  t.comm_s = tot.comm;
  t.overhead_s = tot.idle + costs.step_overhead_s;
  t.exposed_comm_s = std::max(0.0, t.step_s - t.compute_s - t.optimizer_s - t.overhead_s);
  return t;
}

}  // namespace tpsim
