#include "model/schedule.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace tpsim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Accumulated busy times of the streams.
struct Totals {
  double compute = 0, slowed = 0, comm = 0, idle = 0;
};

// How the two streams met over a stretch of the schedule: each comparison between a compute-stream
// time and a communication-stream time, and how far the two clocks could drift apart before it
// came out the other way. While every comparison keeps its outcome, a stretch repeated with the
// compute clock moved dc and the communication clock dm does exactly what it did, only shifted.
struct Relations {
  bool coupled = false;  // a comparison that any drift would change (a wait, a partial overlap)
  double after = kInf;    // least gap from a compute's end to a later collective's start
  double before = kInf;   // least gap from a collective's end (or a gather's) to a later compute
  double backlog = kInf;  // least time a collective waited for the stream after its input was ready

  void merge(const Relations& o) {
    coupled = coupled || o.coupled;
    after = std::min(after, o.after);
    before = std::min(before, o.before);
    backlog = std::min(backlog, o.backlog);
  }
  // How many more repetitions keep every outcome, when the clocks move dc and dm per repetition.
  // The compute clock gaining on the communication clock closes `after` and `backlog`; falling
  // behind closes `before`.
  double repetitions(double dc, double dm) const {
    if (coupled) return 0;
    double n = kInf;
    if (dc > dm) n = std::min({n, after / (dc - dm), backlog / (dc - dm)});
    if (dm > dc) n = std::min(n, before / (dm - dc));
    return std::floor(n);
  }
  // The same comparisons `times` repetitions later.
  Relations shifted(double dc, double dm, double times) const {
    Relations r = *this;
    r.after -= (dc - dm) * times;
    r.backlog -= (dc - dm) * times;
    r.before -= (dm - dc) * times;
    return r;
  }
};

class Streams {
 public:
  explicit Streams(double slowdown) : slowdown_(slowdown) {}

  // Runs a collective once `ready` (a compute-stream time) and the stream are free; returns its end.
  double comm(double ready, double seconds) {
    if (seconds <= 0) return ready;
    if (ready >= comm_free_) {
      note_coupled();  // started by compute: the clocks move together
    } else {
      note(&Relations::backlog, comm_free_ - ready);
    }
    const double start = std::max(comm_free_, ready);
    comm_free_ = start + seconds;
    recent_[next_] = {start, comm_free_};
    next_ = next_ + 1 == recent_.size() ? 0 : next_ + 1;
    totals_.comm += seconds;
    return comm_free_;
  }

  // Runs compute once `ready` (a compute-stream time), `gathered` (a communication-stream time, or
  // kNoGather) and the stream are free, slowed where collectives overlap it.
  static constexpr double kNoGather = -kInf;
  double compute(double ready, double gathered, double seconds) {
    const double own = std::max(compute_free_, ready);
    if (gathered > own) {
      note_coupled();  // waited for a collective
    } else if (gathered != kNoGather) {
      note(&Relations::before, own - gathered);
    }
    const double start = std::max(own, gathered);
    const double end = start + seconds;
    // Collectives run one after another: walk back from the newest until one ended before start.
    double overlap = 0;
    for (size_t k = 0, i = newest(); k < recent_.size(); ++k, i = i == 0 ? recent_.size() - 1 : i - 1) {
      const auto& [cs, ce] = recent_[i];
      if (ce <= start) {
        note(&Relations::before, start - ce);
        break;
      }
      if (cs >= end) {
        note(&Relations::after, cs - end);
        continue;
      }
      note_coupled();
      overlap += std::min(ce, end) - std::max(cs, start);
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

  // Moves the whole state `times` repetitions ahead: the compute clock by dc and the communication
  // clock (and the collectives it ran) by dm each, the totals by `delta` each.
  void skip(double dc, double dm, const Totals& delta, double times) {
    compute_free_ += dc * times;
    comm_free_ += dm * times;
    for (auto& iv : recent_) {
      iv.first += dm * times;
      iv.second += dm * times;
    }
    totals_.compute += delta.compute * times;
    totals_.slowed += delta.slowed * times;
    totals_.comm += delta.comm * times;
    totals_.idle += delta.idle * times;
  }

  double compute_free() const { return compute_free_; }
  int64_t blocks_stepped = 0;
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

  // The communication stream's own state relative to its clock: the same in both means it repeats
  // shifted by the clocks' difference, whatever the compute stream did meanwhile.
  bool same_comm_state(const Streams& o) const {
    const double tol = 1e-9 * std::max(1.0, std::fabs(comm_free_));
    for (size_t k = 0, i = newest(), j = o.newest(); k < recent_.size(); ++k) {
      if (std::fabs((recent_[i].first - comm_free_) - (o.recent_[j].first - o.comm_free_)) > tol ||
          std::fabs((recent_[i].second - comm_free_) - (o.recent_[j].second - o.comm_free_)) > tol)
        return false;
      i = i == 0 ? recent_.size() - 1 : i - 1;
      j = j == 0 ? recent_.size() - 1 : j - 1;
    }
    return true;
  }

  // Relations since the last reset, at two levels: a block and a micro-batch.
  enum Level { kBlock = 0, kMicroBatch = 1 };
  const Relations& relations(Level l) const { return rel_[l]; }
  void reset_relations(Level l) { rel_[l] = Relations{}; }
  // Repetitions skipped at block level stand for comparisons the micro-batch level did not see.
  void merge_relations(Level l, const Relations& r) { rel_[l].merge(r); }

 private:
  size_t newest() const { return next_ == 0 ? recent_.size() - 1 : next_ - 1; }
  void note(double Relations::*slack, double value) {
    for (Relations& r : rel_) r.*slack = std::min(r.*slack, value);
  }
  void note_coupled() {
    for (Relations& r : rel_) r.coupled = true;
  }

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
  std::array<Relations, 2> rel_{};
};

Totals operator-(const Totals& a, const Totals& b) {
  return {a.compute - b.compute, a.slowed - b.slowed, a.comm - b.comm, a.idle - b.idle};
}

// Limit on gathered blocks in flight (Composer's limit_all_gathers): block i's gather waits for
// block i-2 to free its parameters.
//
// Blocks are identical, and the streams shift-invariant, so the blocks settle into a repeating
// pattern; once one is seen, the rest of it is skipped exactly (skip = false steps through every
// block: the slow reference the tests compare with). Two patterns are recognised:
//  - the same state relative to the compute clock as after the block before (both clocks move by
//    the same period): every later block repeats it;
//  - the two streams no longer wait for each other nor overlap (say, a communication backlog that
//    grows every block): each keeps its own period, for as many blocks as every comparison between
//    them keeps its outcome (Relations).
void simulate_micro_batch(const MicroBatchCosts& c, int64_t n_layers, bool skip, Streams& s) {
  using Level = Streams::Level;
  s.idle(c.overhead_s);
  const double start = s.compute_free();
  const bool gathers_fwd = c.block_gather_fwd_s > 0;
  const auto gather_or_none = [](bool gathers, double t) { return gathers ? t : Streams::kNoGather; };

  // Forward. done1, done2: when blocks i-1 and i-2 finished their forward (the start for the
  // first two blocks, whose gathers wait for nothing).
  const double root = s.comm(start, c.root_gather_s);
  double prev = s.compute(start, gather_or_none(c.root_gather_s > 0, root), c.embed_fwd_s);
  double done1 = start, done2 = start;
  Streams before = s;
  double before_done2 = 0;
  for (int64_t i = 0; i < n_layers; ++i) {
    ++s.blocks_stepped;
    const double clock = s.compute_free();
    const Totals totals = s.totals();
    s.reset_relations(Level::kBlock);
    const double gathered = gathers_fwd ? s.comm(done2, c.block_gather_fwd_s) : Streams::kNoGather;
    s.idle(c.block_overhead_s);
    prev = s.compute(prev, gathered, c.block_fwd_s);
    done2 = done1;
    done1 = prev;
    const double rel_done2 = done2 - prev, period = prev - clock;
    const double tol = 1e-9 * std::max(1.0, prev);
    if (skip && i >= 1 && i + 1 < n_layers && std::fabs(rel_done2 - before_done2) <= tol) {
      const double remaining = static_cast<double>(n_layers - 1 - i);
      if (s.same_relative_state(before)) {
        s.skip(period, period, s.totals() - totals, remaining);
        prev += period * remaining;
        done1 += period * remaining;
        done2 += period * remaining;
        break;
      }
      const double dm = s.comm_free() - before.comm_free();
      const Relations& rel = s.relations(Level::kBlock);
      const double times = std::min(rel.repetitions(period, dm), remaining);
      if (times >= 1 && s.same_comm_state(before)) {
        s.merge_relations(Level::kMicroBatch, rel.shifted(period, dm, times));
        s.skip(period, dm, s.totals() - totals, times);
        prev += period * times;
        done1 += period * times;
        done2 += period * times;
        i += static_cast<int64_t>(times);
      }
    }
    before = s;
    before_done2 = rel_done2;
  }

  // Loss and head; the last block's backward gather is issued as the head's backward starts.
  const double head_start = prev;
  prev = s.compute(prev, Streams::kNoGather, c.head_s);

  // Backward, blocks L-1 .. 0: the gather of block i-1 is issued once block i+1's gathered
  // parameters are freed (after its backward), then block i computes, then its gradients are
  // reduced.
  const bool regather = c.block_gather_bwd_s > 0;
  double gathered_next = regather ? s.comm(head_start, c.block_gather_bwd_s) : Streams::kNoGather;  // block L-1
  double freed = head_start;  // when block i+1's backward finished
  before = s;
  double before_gathered = 0;
  for (int64_t i = n_layers - 1; i >= 0; --i) {
    ++s.blocks_stepped;
    const double clock = s.compute_free();
    const Totals totals = s.totals();
    s.reset_relations(Level::kBlock);
    const double gathered = gathered_next;
    if (regather && i > 0) gathered_next = s.comm(freed, c.block_gather_bwd_s);
    s.idle(c.block_overhead_s);
    prev = s.compute(prev, gathered, c.block_bwd_s);
    freed = prev;
    s.comm(prev, c.block_reduce_s);
    const double period = prev - clock;
    // Skip to block 1, whose gather of block 0 is the last one.
    if (skip && i <= n_layers - 2 && i > 1) {
      const double remaining = static_cast<double>(i - 1);
      const double tol = 1e-9 * std::max(1.0, prev);
      const double rel_gathered = regather ? gathered_next - prev : 0.0;
      if (std::fabs(rel_gathered - before_gathered) <= tol && s.same_relative_state(before)) {
        s.skip(period, period, s.totals() - totals, remaining);
        prev += period * remaining;
        freed += period * remaining;
        if (regather) gathered_next += period * remaining;
        i = 1;
        continue;
      }
      // The gather in flight belongs to the communication stream: it must keep its place there.
      const double dm = s.comm_free() - before.comm_free();
      const double comm_gathered = regather ? gathered_next - s.comm_free() : 0.0;
      const double before_comm_gathered = regather ? before_gathered + before.compute_free() - before.comm_free() : 0.0;
      const Relations& rel = s.relations(Level::kBlock);
      const double times = std::min(rel.repetitions(period, dm), remaining);
      if (times >= 1 && std::fabs(comm_gathered - before_comm_gathered) <= tol && s.same_comm_state(before)) {
        s.merge_relations(Level::kMicroBatch, rel.shifted(period, dm, times));
        s.skip(period, dm, s.totals() - totals, times);
        prev += period * times;
        freed += period * times;
        if (regather) gathered_next += dm * times;
        i -= static_cast<int64_t>(times);
        before = s;
        before_gathered = regather ? gathered_next - prev : 0.0;
        continue;
      }
    }
    before = s;
    before_gathered = regather ? gathered_next - prev : 0.0;
  }
  prev = s.compute(prev, Streams::kNoGather, c.embed_bwd_s);
  s.comm(prev, c.root_reduce_s);
}

}  // namespace

Timeline simulate_step(const StepCosts& costs) {
  using Level = Streams::Level;
  Streams s(costs.overlap_slowdown);
  const int64_t n = costs.n_micro;
  const bool skip = costs.skip_steady_state;
  // Micro-batches in order; the last may be smaller. Full micro-batches settle into a repeating
  // pattern as blocks do (see simulate_micro_batch), and the rest of it is skipped.
  const int64_t n_full = costs.last == costs.full ? n : n - 1;
  Streams before = s;
  for (int64_t j = 0; j < n_full; ++j) {
    const double clock = s.compute_free();
    const Totals totals = s.totals();
    s.reset_relations(Level::kMicroBatch);
    simulate_micro_batch(costs.full, costs.n_layers, skip, s);
    if (skip && j + 1 < n_full) {
      const double remaining = static_cast<double>(n_full - 1 - j);
      const double period = s.compute_free() - clock;
      // The first micro-batch starts drained; if it leaves the streams drained again (by the time
      // the next one starts), every full one repeats it. Otherwise compare consecutive states.
      if (j == 0 ? s.drained_after(costs.full.overhead_s) : s.same_relative_state(before)) {
        s.skip(period, period, s.totals() - totals, remaining);
        break;
      }
      const double dm = s.comm_free() - before.comm_free();
      const Relations& rel = s.relations(Level::kMicroBatch);
      const double times = std::min(rel.repetitions(period, dm), remaining);
      if (j >= 1 && times >= 1 && s.same_comm_state(before)) {
        s.skip(period, dm, s.totals() - totals, times);
        j += static_cast<int64_t>(times);
      }
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
  t.blocks_stepped = s.blocks_stepped;
  return t;
}

}  // namespace tpsim
