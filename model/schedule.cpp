#include "model/schedule.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "model/profile.hpp"

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
  bool coupled = false;   // a comparison that any drift would change (a wait, a partial overlap)
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

  // Runs compute once the stream and `gathered` (a communication-stream time, or kNoGather) are
  // free, slowed where collectives overlap it; returns its end. Every other input of a compute is
  // an earlier compute on the same stream, and idle never moves its clock back (costs are at least
  // 0; cost_param_registry bounds the overheads), so the stream's own clock covers them.
  static constexpr double kNoGather = -kInf;
  double compute(double gathered, double seconds) {
    const double own = compute_free_;
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
  double comm_free() const { return comm_free_; }
  const Totals& totals() const { return totals_; }

  // True when, `idle` seconds after the compute clock, the communication stream has finished
  // everything: the state every step starts from.
  bool drained_after(double idle) const { return comm_free_ <= compute_free_ + idle; }

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

  int64_t blocks_stepped = 0;  // block forwards and backwards simulated one by one

 private:
  size_t newest() const { return next_ == 0 ? recent_.size() - 1 : next_ - 1; }
  void note(double Relations::*slack, double value) {
    for (Relations& r : rel_) r.*slack = std::min(r.*slack, value);
  }
  void note_coupled() {
    for (Relations& r : rel_) r.coupled = true;
  }

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

// ---- The extrapolator: steps a loop of identical repetitions (blocks, micro-batches) and skips
// exactly what repeats. It knows nothing of FSDP; the steps further down know nothing of it.
//
// Identical repetitions on shift-invariant streams settle into a repeating pattern; once one is
// seen, the rest of it is skipped exactly. Two patterns are recognised:
//  - the same state relative to the compute clock as after the repetition before (both clocks move
//    by the same period): every later repetition repeats it;
//  - the two streams no longer wait for each other nor overlap (say, a communication backlog that
//    grows every block): each keeps its own period, for as many repetitions as every comparison
//    between them keeps its outcome (Relations).

// The times a loop carries from one repetition to the next besides the streams (when a block's
// forward finished, when a prefetched gather ends), by the clock each moves with when repetitions
// are skipped. Streams::kNoGather (-inf) stands for one that never comes, in every repetition alike.
template <size_t NC, size_t NM>
struct Carried {
  std::array<double*, NC> compute;  // on the compute clock
  std::array<double*, NM> comm;     // on the communication clock
  double& operator[](size_t i) const { return i < NC ? *compute[i] : *comm[i - NC]; }
};
using NothingCarried = Carried<0, 0>;
// The carried times minus the compute clock.
template <size_t NC, size_t NM>
using Offsets = std::array<double, NC + NM>;

struct Loop {
  Streams::Level level;  // whose Relations a repetition's comparisons are kept in
  int64_t n = 0;         // repetitions
  bool skip = true;      // false: step through every repetition (the slow reference)
  // Micro-batches: the first starts from drained streams, and each begins `lead_idle_s` after the
  // one before ended; if the first leaves them drained again by then, every one repeats it.
  bool starts_drained = false;
  double lead_idle_s = 0;
};

// x == y first: two times that never come (-inf) sit at the same place.
bool same_offset(double x, double y, double tol) { return x == y || std::fabs(x - y) <= tol; }

// Whether the carried times sit where they sat after the repetition before: relative to the compute
// clock (with the streams' relative state, the first pattern), or each relative to its own
// stream's clock (the second). offsets: now; before_offsets: after the repetition before.
struct CarriedMatch {
  bool relative = true, per_stream = true;
};

template <size_t NC, size_t NM>
CarriedMatch match_carried(const Carried<NC, NM>& carried, const Offsets<NC, NM>& before_offsets, const Streams& before,
                           const Offsets<NC, NM>& offsets, const Streams& s) {
  CarriedMatch m;
  const double tol = 1e-9 * std::max(1.0, s.compute_free());
  for (size_t i = 0; i < NC; ++i) m.relative = m.relative && same_offset(offsets[i], before_offsets[i], tol);
  m.per_stream = m.relative;
  for (size_t i = NC; i < NC + NM; ++i) {
    m.relative = m.relative && same_offset(offsets[i], before_offsets[i], tol);
    const double was = before_offsets[i] + before.compute_free() - before.comm_free();
    m.per_stream = m.per_stream && same_offset(carried[i] - s.comm_free(), was, tol);
  }
  return m;
}

// Moves the streams and the carried times `times` repetitions ahead, the compute clock by dc and
// the communication clock by dm each; the totals by the last repetition's (s minus before).
template <size_t NC, size_t NM>
void skip_ahead(const Carried<NC, NM>& carried, double dc, double dm, double times, const Streams& before, Streams& s) {
  s.skip(dc, dm, s.totals() - before.totals(), times);
  for (double* t : carried.compute) *t += dc * times;
  for (double* t : carried.comm) *t += dm * times;
}

// After repetition k (before: the state before it, with its carried times' offsets), skips what
// repeats of the remaining repetitions and returns how many it skipped. offsets: the carried times'
// now, kept right for the next comparison.
template <size_t NC, size_t NM>
int64_t skip_repeats(const Loop& loop, const Carried<NC, NM>& carried, int64_t k, const Streams& before,
                     const Offsets<NC, NM>& before_offsets, Streams& s, Offsets<NC, NM>& offsets) {
  const int64_t remaining = loop.n - 1 - k;
  const double period = s.compute_free() - before.compute_free();
  if (k == 0) {
    if (!loop.starts_drained || !s.drained_after(loop.lead_idle_s)) return 0;
    skip_ahead(carried, period, period, static_cast<double>(remaining), before, s);
    return remaining;
  }
  const CarriedMatch m = match_carried(carried, before_offsets, before, offsets, s);
  if (m.relative && s.same_relative_state(before)) {
    skip_ahead(carried, period, period, static_cast<double>(remaining), before, s);
    return remaining;
  }
  if (!m.per_stream) return 0;
  const double dm = s.comm_free() - before.comm_free();
  const Relations& rel = s.relations(loop.level);
  const double times = std::min(rel.repetitions(period, dm), static_cast<double>(remaining));
  if (!(times >= 1 && s.same_comm_state(before))) return 0;
  // The skipped blocks' comparisons belong to their micro-batch's too.
  if (loop.level == Streams::kBlock) s.merge_relations(Streams::kMicroBatch, rel.shifted(period, dm, times));
  skip_ahead(carried, period, dm, times, before, s);
  // A time on the compute clock kept its offset from it (both moved by the same amount); one on
  // the communication clock drifted with it.
  for (size_t i = NC; i < NC + NM; ++i) offsets[i] = carried[i] - s.compute_free();
  return static_cast<int64_t>(times);
}

// Runs `step` loop.n times, skipping what repeats unless loop.skip is false.
template <size_t NC, size_t NM, class Step>
void repeat(const Loop& loop, const Carried<NC, NM>& carried, Streams& s, Step&& step) {
  if (!loop.skip) {
    for (int64_t k = 0; k < loop.n; ++k) step();
    return;
  }
  Streams before = s;
  Offsets<NC, NM> before_offsets{}, offsets{};
  for (int64_t k = 0; k < loop.n; ++k) {
    s.reset_relations(loop.level);
    step();
    if (k + 1 == loop.n) break;
    for (size_t i = 0; i < NC + NM; ++i) offsets[i] = carried[i] - s.compute_free();
    if (k > 0 || loop.starts_drained) {
      const int64_t skipped = skip_repeats(loop, carried, k, before, before_offsets, s, offsets);
      if (k + 1 + skipped == loop.n) break;
      k += skipped;
    }
    before = s;
    before_offsets = offsets;
  }
}

// ---- The physics: one block's forward, one block's backward, one micro-batch.

// Forward: when blocks i-1 and i-2 finished their forward (the start for the first two blocks,
// whose gathers wait for nothing).
struct Forward {
  double done1 = 0, done2 = 0;
};

// Limit on gathered blocks in flight (Composer's limit_all_gathers): block i's gather waits for
// block i-2 to free its parameters; block i's forward waits for its gather.
void forward_block(const MicroBatchCosts& c, Streams& s, Forward& f) {
  ++s.blocks_stepped;
  const double gathered = c.block_gather_fwd_s > 0 ? s.comm(f.done2, c.block_gather_fwd_s) : Streams::kNoGather;
  s.idle(c.block_overhead_s);
  f.done2 = f.done1;
  f.done1 = s.compute(gathered, c.block_fwd_s);
}

// Backward, blocks L-1 .. 0: when the block before the one about to run (L-1 first) freed its
// gathered parameters, and when the gather of the next one ends (kNoGather without re-gathering).
struct Backward {
  double freed = 0, gathered_next = Streams::kNoGather;
};

// The gather of block i-1 (`next_gather_s`: its own, 0 for block 0, which gathers nothing next) is
// issued once block i+1's gathered parameters are freed (after its backward), then block i
// computes, then its gradients are reduced.
void backward_block(const MicroBatchCosts& c, double next_gather_s, Streams& s, Backward& b) {
  ++s.blocks_stepped;
  const double gathered = b.gathered_next;
  if (next_gather_s > 0) b.gathered_next = s.comm(b.freed, next_gather_s);
  s.idle(c.block_overhead_s);
  b.freed = s.compute(gathered, c.block_bwd_s);
  s.comm(b.freed, c.block_reduce_s);
}

// A run of `n` equal blocks, each costing what `block`'s block fields say.
struct BlockRun {
  const MicroBatchCosts* block;
  int64_t n;
};

// One micro-batch: root gather and embedding, the blocks' forwards run by run, the head, the
// blocks' backwards in reverse, the embedding's backward and the root's reduce.
void simulate_micro_batch(const MicroBatchCosts& c, std::span<const BlockRun> runs, bool skip, Streams& s) {
  s.idle(c.overhead_s);
  const double start = s.compute_free();
  const double root = s.comm(start, c.root_gather_s);
  // NOLINTNEXTLINE(bugprone-narrowing-conversions): clang-tidy 14 reads -infinity as a narrowing
  s.compute(c.root_gather_s > 0 ? root : Streams::kNoGather, c.embed_fwd_s);
  Forward f{start, start};
  const Carried<2, 0> forward_times{{&f.done1, &f.done2}, {}};
  for (const BlockRun& r : runs)
    repeat({Streams::kBlock, r.n, skip}, forward_times, s, [&] { forward_block(*r.block, s, f); });

  // Loss and head; the last block's backward gather is issued as the head's backward starts.
  Backward b{s.compute_free()};
  s.compute(Streams::kNoGather, c.head_s);
  const MicroBatchCosts& last_block = *runs.back().block;
  if (last_block.block_gather_bwd_s > 0 && c.last_block_regathered)
    b.gathered_next = s.comm(b.freed, last_block.block_gather_bwd_s);  // block L-1
  // Each run's blocks but its first repeat, gathering one of their own next; its first gathers the
  // block before the run (none before block 0, which ends the loop).
  const Carried<1, 1> backward_times{{&b.freed}, {&b.gathered_next}};
  for (size_t i = runs.size(); i-- > 0;) {
    const MicroBatchCosts& block = *runs[i].block;
    repeat({Streams::kBlock, std::max<int64_t>(runs[i].n - 1, 0), skip}, backward_times, s,
           [&] { backward_block(block, block.block_gather_bwd_s, s, b); });
    if (runs[i].n > 0) backward_block(block, i > 0 ? runs[i - 1].block->block_gather_bwd_s : 0.0, s, b);
  }
  s.comm(s.compute(Streams::kNoGather, c.embed_bwd_s), c.root_reduce_s);
}

// The block runs of a micro-batch whose costs are `c` (per group: `groups`): one run of `c`'s
// block for a uniform model (in `one`, allocating nothing), else the model's runs (in `many`).
std::span<const BlockRun> block_runs(const StepCosts& costs, const MicroBatchCosts& c,
                                     const std::vector<MicroBatchCosts>& groups, BlockRun& one,
                                     std::vector<BlockRun>& many) {
  if (costs.runs.empty()) {
    one = {&c, costs.n_layers};
    return {&one, 1};
  }
  many.clear();
  for (const LayerRun& r : costs.runs) many.push_back({&groups.at(static_cast<size_t>(r.group)), r.layers});
  return many;
}

}  // namespace

StepCosts data_parallel_step(int64_t n_layers, int64_t n_micro, const MicroBatchCosts& full,
                             const MicroBatchCosts& last, double optimizer_s, const CostParams& params) {
  StepCosts step;
  step.n_layers = n_layers;
  step.n_micro = n_micro;
  step.full = full;
  step.last = last;
  step.optimizer_s = optimizer_s;
  step.step_overhead_s = params.step_overhead_s;
  step.overlap_slowdown = params.overlap_slowdown;
  return step;
}

Timeline simulate_step(const StepCosts& costs) {
  Streams s(costs.overlap_slowdown);
  // Micro-batches in order; the last may be smaller. Full micro-batches settle into a repeating
  // pattern as blocks do, and the rest of it is skipped.
  const int64_t n = costs.n_micro;
  const int64_t n_full = costs.last == costs.full ? n : n - 1;
  Loop micro_batches{Streams::kMicroBatch, n_full, costs.skip_steady_state};
  micro_batches.starts_drained = true;
  micro_batches.lead_idle_s = costs.full.overhead_s;
  BlockRun one;
  std::vector<BlockRun> many;
  const std::span<const BlockRun> full_runs = block_runs(costs, costs.full, costs.full_groups, one, many);
  const auto full = [&] { simulate_micro_batch(costs.full, full_runs, costs.skip_steady_state, s); };
  repeat(micro_batches, NothingCarried{}, s, full);
  if (n_full < n) {
    BlockRun last_one;
    std::vector<BlockRun> last_many;
    simulate_micro_batch(costs.last, block_runs(costs, costs.last, costs.last_groups, last_one, last_many),
                         costs.skip_steady_state, s);
  }

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
