#include "model/schedule.hpp"

#include <algorithm>
#include <array>

namespace tpsim {
namespace {

class Streams {
 public:
  explicit Streams(double slowdown) : slowdown_(slowdown) {}

  // Runs a collective once `ready` and the stream are free; returns its end.
  double comm(double ready, double seconds) {
    if (seconds <= 0) return std::max(ready, 0.0);
    const double start = std::max(comm_free_, ready);
    comm_free_ = start + seconds;
    recent_[next_] = {start, comm_free_};
    next_ = (next_ + 1) % recent_.size();
    comm_busy_ += seconds;
    return comm_free_;
  }

  // Runs compute once `ready` and the stream are free, slowed where collectives overlap it.
  double compute(double ready, double seconds) {
    const double start = std::max(compute_free_, ready);
    double overlap = 0;
    for (const auto& [cs, ce] : recent_)
      overlap += std::max(0.0, std::min(ce, start + seconds) - std::max(cs, start));
    const double extra = slowdown_ * overlap;
    compute_free_ = start + seconds + extra;
    compute_busy_ += seconds;
    slowed_ += extra;
    return compute_free_;
  }

  void idle(double seconds) {
    compute_free_ += seconds;
    idle_ += seconds;
  }

  // Moves both streams `periods` steady-state periods ahead.
  void advance(double compute_delta, double comm_delta, double busy_delta, double slowed_delta,
               double comm_busy_delta, double idle_delta, double periods) {
    compute_free_ += compute_delta * periods;
    comm_free_ += comm_delta * periods;
    for (auto& iv : recent_) {
      iv.first += comm_delta * periods;
      iv.second += comm_delta * periods;
    }
    compute_busy_ += busy_delta * periods;
    slowed_ += slowed_delta * periods;
    comm_busy_ += comm_busy_delta * periods;
    idle_ += idle_delta * periods;
  }

  double compute_free() const { return compute_free_; }
  double comm_free() const { return comm_free_; }
  double compute_busy() const { return compute_busy_; }
  double slowed() const { return slowed_; }
  double comm_busy() const { return comm_busy_; }
  double idle_time() const { return idle_; }

 private:
  double slowdown_;
  double compute_free_ = 0, comm_free_ = 0;
  double compute_busy_ = 0, slowed_ = 0, comm_busy_ = 0, idle_ = 0;
  std::array<std::pair<double, double>, 4> recent_{};  // the last collectives, for overlap
  size_t next_ = 0;
};

// Limit on gathered blocks in flight (Composer's limit_all_gathers: two).
constexpr int64_t kGathersInFlight = 2;

void simulate_micro_batch(const MicroBatchCosts& c, int64_t n_layers, Streams& s) {
  s.idle(c.overhead_s);
  const double start = s.compute_free();

  // Forward. `done[i % 2]`: when block i's forward finished (block i-2 for the limiter).
  const double root = s.comm(start, c.root_gather_s);
  double prev = s.compute(root, c.embed_fwd_s);
  std::array<double, kGathersInFlight> done{start, start};
  for (int64_t i = 0; i < n_layers; ++i) {
    const double issue = i >= kGathersInFlight ? done[i % kGathersInFlight] : start;
    const double gathered = c.block_gather_fwd_s > 0 ? s.comm(issue, c.block_gather_fwd_s) : 0.0;
    prev = s.compute(std::max(prev, gathered), c.block_fwd_s);
    done[i % kGathersInFlight] = prev;
  }

  // Loss and head; the last block's backward gather is issued as the head's backward starts.
  const double head_start = prev;
  prev = s.compute(prev, c.head_s);

  // Backward, blocks L-1 .. 0.
  const bool regather = c.block_gather_bwd_s > 0;
  double gathered_next = regather ? s.comm(head_start, c.block_gather_bwd_s) : 0.0;  // block L-1
  done = {head_start, head_start};
  for (int64_t i = n_layers - 1; i >= 0; --i) {
    const double gathered = gathered_next;
    if (regather && i > 0) {
      // Gather block i-1 once block i+1's gathered parameters are freed.
      const int64_t freed = i + 1;
      const double issue = freed <= n_layers - 1 ? done[freed % kGathersInFlight] : head_start;
      gathered_next = s.comm(issue, c.block_gather_bwd_s);
    }
    prev = s.compute(std::max(prev, gathered), c.block_bwd_s);
    done[i % kGathersInFlight] = prev;
    s.comm(prev, c.block_reduce_s);
  }
  prev = s.compute(prev, c.embed_bwd_s);
  s.comm(prev, c.root_reduce_s);
}

}  // namespace

Timeline simulate_step(const StepCosts& costs) {
  Streams s(costs.overlap_slowdown);
  const int64_t n = costs.n_micro;
  if (n <= 3) {
    for (int64_t j = 0; j + 1 < n; ++j) simulate_micro_batch(costs.full, costs.n_layers, s);
  } else {
    // Two full micro-batches give the steady-state period; skip ahead over the other n-3 full ones.
    simulate_micro_batch(costs.full, costs.n_layers, s);
    const double c0 = s.compute_free(), m0 = s.comm_free(), b0 = s.compute_busy(), w0 = s.slowed(),
                 k0 = s.comm_busy(), i0 = s.idle_time();
    simulate_micro_batch(costs.full, costs.n_layers, s);
    s.advance(s.compute_free() - c0, s.comm_free() - m0, s.compute_busy() - b0, s.slowed() - w0,
              s.comm_busy() - k0, s.idle_time() - i0, static_cast<double>(n - 3));
  }
  simulate_micro_batch(costs.last, costs.n_layers, s);

  // The optimizer needs every reduced gradient.
  const double optimizer_start = std::max(s.compute_free(), s.comm_free());
  Timeline t;
  t.optimizer_s = costs.optimizer_s;
  t.step_s = optimizer_start + costs.optimizer_s + costs.step_overhead_s;
  t.compute_s = s.compute_busy();
  t.slowdown_s = s.slowed();
  t.comm_s = s.comm_busy();
  t.overhead_s = s.idle_time() + costs.step_overhead_s;
  t.exposed_comm_s = std::max(0.0, t.step_s - t.compute_s - t.optimizer_s - t.overhead_s);
  return t;
}

}  // namespace tpsim
