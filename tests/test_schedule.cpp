// The two-stream FSDP timeline: hand-checkable cases, and the steady-state skip against stepping
// through every block (the slow reference).
#define BOOST_TEST_MODULE schedule
#include <array>
#include <boost/test/unit_test.hpp>
#include <random>
#include <stdexcept>

#include "model/schedule.hpp"

using namespace tpsim;
namespace tt = boost::test_tools;

namespace {
constexpr double kExact = 1e-9;

MicroBatchCosts compute_only(double fwd, double bwd) {
  MicroBatchCosts m;
  m.embed_fwd_s = 0.001;
  m.block_fwd_s = fwd;
  m.head_s = 0.01;
  m.block_bwd_s = bwd;
  m.embed_bwd_s = 0.002;
  m.overhead_s = 0.003;
  return m;
}

// compute_only's blocks with no per-micro-batch overhead, each block gathering its weights for
// `gather_s` in the forward and again in the backward and reduce-scattering for `reduce_s`.
MicroBatchCosts with_comm(double fwd, double bwd, double gather_s, double reduce_s) {
  MicroBatchCosts m = compute_only(fwd, bwd);
  m.overhead_s = 0;
  m.block_gather_fwd_s = m.block_gather_bwd_s = gather_s;
  m.block_reduce_s = reduce_s;
  return m;
}

// A step of `n_micro` micro-batches alike (the last one included) through `n_layers` blocks.
StepCosts uniform_step(int64_t n_layers, int64_t n_micro, const MicroBatchCosts& m) {
  StepCosts c;
  c.n_layers = n_layers;
  c.n_micro = n_micro;
  c.full = c.last = m;
  return c;
}
}  // namespace

BOOST_AUTO_TEST_CASE(without_communication_the_step_is_the_sum_of_compute) {
  StepCosts c = uniform_step(10, 3, compute_only(0.02, 0.04));
  c.optimizer_s = 0.05;
  c.step_overhead_s = 0.1;
  const Timeline t = simulate_step(c);
  const double per_micro = 0.003 + 0.001 + 10 * 0.02 + 0.01 + 10 * 0.04 + 0.002;
  BOOST_TEST(t.step_s == 3 * per_micro + 0.05 + 0.1, tt::tolerance(kExact));
  BOOST_TEST(t.exposed_comm_s == 0.0, tt::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(hidden_gathers_expose_only_the_first_and_the_last_reduce) {
  const Timeline t = simulate_step(uniform_step(10, 1, with_comm(0.02, 0.04, 0.005, 0.006)));
  // The first block waits for its gather; the last reduce-scatter runs after the embedding backward
  // started; everything else hides behind compute.
  const double compute = 0.001 + 10 * 0.02 + 0.01 + 10 * 0.04 + 0.002;
  BOOST_TEST(t.step_s >= compute + 0.005);
  BOOST_TEST(t.exposed_comm_s < 0.005 + 0.006 + 1e-9);
}

BOOST_AUTO_TEST_CASE(communication_bound_steps_take_the_communication_time) {
  const Timeline t = simulate_step(uniform_step(20, 2, with_comm(0.001, 0.002, 0.01, 0.02)));
  const double comm = 2 * 20 * (0.01 + 0.01 + 0.02);
  BOOST_TEST(t.comm_s == comm, tt::tolerance(kExact));
  BOOST_TEST(t.step_s >= comm);
  BOOST_TEST(t.step_s <= comm + 0.05);
}

BOOST_AUTO_TEST_CASE(skipping_the_steady_state_matches_stepping_through_every_block) {
  std::mt19937_64 rng(20261122);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double worst = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    StepCosts c;
    c.n_layers = 1 + static_cast<int64_t>(rng() % 100);
    c.n_micro = 1 + static_cast<int64_t>(rng() % 24);
    c.overlap_slowdown = 0.3 * u(rng);
    const auto draw = [&](double scale) {
      MicroBatchCosts m;
      m.embed_fwd_s = 0.01 * scale * u(rng);
      m.block_fwd_s = 0.02 * scale * u(rng);
      m.head_s = 0.05 * scale * u(rng);
      m.block_bwd_s = m.block_fwd_s * (2 + 2 * u(rng));
      m.embed_bwd_s = 0.01 * scale * u(rng);
      const int strategy = static_cast<int>(rng() % 3);  // FULL_SHARD, SHARD_GRAD_OP, NO_SHARD
      const double gather = 0.04 * u(rng);
      m.root_gather_s = strategy < 2 ? 0.01 * u(rng) : 0;
      m.root_reduce_s = 0.01 * u(rng);
      m.block_gather_fwd_s = strategy < 2 ? gather : 0;
      m.block_gather_bwd_s = strategy == 0 ? gather : 0;
      m.block_reduce_s = 0.05 * u(rng);
      m.overhead_s = 0.005 * u(rng);
      m.block_overhead_s = rng() % 2 ? 0.002 * u(rng) : 0.0;
      return m;
    };
    c.full = draw(1.0);
    c.last = rng() % 2 ? c.full : draw(u(rng));
    c.skip_steady_state = false;
    const Timeline slow = simulate_step(c);
    c.skip_steady_state = true;
    const Timeline fast = simulate_step(c);
    worst = std::max(worst, std::abs(fast.step_s - slow.step_s) / slow.step_s);
    BOOST_TEST_REQUIRE(fast.step_s == slow.step_s, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.compute_s == slow.compute_s, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.comm_s == slow.comm_s, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.slowdown_s + 1.0 == slow.slowdown_s + 1.0, tt::tolerance(kExact));
  }
  BOOST_TEST_MESSAGE("worst relative difference " << worst);
}

// NO_SHARD's gradient all-reduces outrunning compute: the communication backlog grows every block
// and every micro-batch, so the state never repeats; the skip still finds the pattern (each stream
// on its own period) and must match stepping through every block.
BOOST_AUTO_TEST_CASE(a_growing_communication_backlog_is_skipped_exactly) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int64_t stepped = 0, total = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    StepCosts c;
    c.n_layers = 1 + static_cast<int64_t>(rng() % 96);
    c.n_micro = 1 + static_cast<int64_t>(rng() % 300);
    c.overlap_slowdown = rng() % 4 ? 0.3 * u(rng) : 0.0;
    MicroBatchCosts m = compute_only(0.001 + 0.01 * u(rng), 0.002 + 0.02 * u(rng));
    m.block_overhead_s = rng() % 2 ? 0.0005 * u(rng) : 0.0;
    m.block_reduce_s = m.block_bwd_s * (0.5 + 3 * u(rng));  // often slower than compute
    m.root_reduce_s = 0.01 * u(rng);
    c.full = m;
    c.last = rng() % 2 ? m : compute_only(0.0005, 0.001);
    if (!(c.last == m)) c.last.block_reduce_s = m.block_reduce_s;
    c.skip_steady_state = false;
    const Timeline slow = simulate_step(c);
    c.skip_steady_state = true;
    const Timeline fast = simulate_step(c);
    BOOST_TEST_REQUIRE(fast.step_s == slow.step_s, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.compute_s == slow.compute_s, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.comm_s == slow.comm_s, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.slowdown_s + 1.0 == slow.slowdown_s + 1.0, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(slow.blocks_stepped == 2 * c.n_layers * c.n_micro);
    stepped += fast.blocks_stepped;
    total += slow.blocks_stepped;
  }
  // What the skip is for: a small fraction of the blocks is simulated one by one.
  BOOST_TEST_MESSAGE("blocks stepped " << stepped << " of " << total);
  BOOST_TEST(static_cast<double>(stepped) < 0.05 * static_cast<double>(total));
}

// The case that made sweeps slow: 80 blocks, 256 micro-batches, all-reduces twice as slow as the
// backward. Stepping through it takes 40,960 block steps; the skip needs a few hundred at most.
BOOST_AUTO_TEST_CASE(a_long_backlogged_step_is_simulated_in_a_few_hundred_blocks) {
  MicroBatchCosts m = compute_only(0.002, 0.004);
  m.block_overhead_s = 0.0001;
  m.block_reduce_s = 0.008;
  m.root_reduce_s = 0.003;
  StepCosts c = uniform_step(80, 256, m);
  c.overlap_slowdown = 0.2;
  const Timeline fast = simulate_step(c);
  c.skip_steady_state = false;
  const Timeline slow = simulate_step(c);
  BOOST_TEST(fast.step_s == slow.step_s, tt::tolerance(kExact));
  BOOST_TEST(slow.blocks_stepped == 2 * 80 * 256);
  BOOST_TEST(fast.blocks_stepped < 500);
}

// The extrapolator's edges: 0 to 3 blocks (loops too short to compare two repetitions), costs on a
// grid of 1/1024 s so that repetitions tie exactly, zero costs, and each strategy's collectives
// (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD's root gather without block gathers).
BOOST_AUTO_TEST_CASE(the_extrapolator_matches_stepping_on_short_loops_and_exact_ties) {
  std::mt19937_64 rng(20261123);
  const auto grid = [&](double max_s) { return static_cast<double>(rng() % 9) * max_s / 8; };
  for (int trial = 0; trial < 20000; ++trial) {
    StepCosts c;
    c.n_layers = trial % 2 ? static_cast<int64_t>(rng() % 4) : 1 + static_cast<int64_t>(rng() % 40);
    c.n_micro = 1 + static_cast<int64_t>(rng() % 40);
    c.overlap_slowdown = grid(0.25);
    const auto draw = [&] {
      MicroBatchCosts m;
      m.embed_fwd_s = grid(0.0078125);
      m.block_fwd_s = grid(0.015625);
      m.head_s = grid(0.03125);
      m.block_bwd_s = 2 * m.block_fwd_s + grid(0.015625);
      m.embed_bwd_s = grid(0.0078125);
      const int strategy = static_cast<int>(rng() % 4);
      const double gather = grid(0.03125);
      m.root_gather_s = strategy != 2 ? grid(0.0078125) : 0;
      m.root_reduce_s = grid(0.0078125);
      m.block_gather_fwd_s = strategy < 2 ? gather : 0;
      m.block_gather_bwd_s = strategy == 0 ? gather : 0;
      m.block_reduce_s = grid(0.0625);
      m.overhead_s = grid(0.00390625);
      m.block_overhead_s = grid(0.0009765625);
      return m;
    };
    c.full = draw();
    c.last = rng() % 2 ? c.full : draw();
    c.skip_steady_state = false;
    const Timeline slow = simulate_step(c);
    c.skip_steady_state = true;
    const Timeline fast = simulate_step(c);
    BOOST_TEST_REQUIRE(slow.blocks_stepped == 2 * c.n_layers * c.n_micro);
    BOOST_TEST_REQUIRE(fast.blocks_stepped <= slow.blocks_stepped);
    BOOST_TEST_REQUIRE(fast.step_s == slow.step_s, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.compute_s == slow.compute_s, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.comm_s == slow.comm_s, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.slowdown_s + 1.0 == slow.slowdown_s + 1.0, tt::tolerance(kExact));
    BOOST_TEST_REQUIRE(fast.overhead_s == slow.overhead_s, tt::tolerance(kExact));
  }
}

// Two streams with waits between them (combined 1F1B's layer: model/megatron.cpp), by hand.
BOOST_AUTO_TEST_CASE(two_streams_wait_for_what_they_consume) {
  // Neither waits: side_by_side_seconds.
  BOOST_TEST(two_stream_seconds(std::array<StreamPiece, 1>{{{3.0, -1}}}, std::array<StreamPiece, 1>{{{2.0, -1}}},
                                0.1) == side_by_side_seconds(3.0, 2.0, 0.1),
             tt::tolerance(kExact));
  // Combined 1F1B's middle: the dispatch (2) beside mlp_bwd (4), whose end the dispatch's backward
  // (2) waits for, and mlp_fwd (1) waits for the dispatch: compute 0-4, 4-5; comm 0-2, 4-6. Busy at
  // once 2 + 1 = 3 s.
  const std::array<StreamPiece, 2> compute = {{{4.0, -1}, {1.0, 0}}};
  const std::array<StreamPiece, 2> comm = {{{2.0, -1}, {2.0, 0}}};
  BOOST_TEST(two_stream_seconds(compute, comm, 0.0) == 6.0, tt::tolerance(kExact));
  BOOST_TEST(two_stream_seconds(compute, comm, 0.5) == 6.0 + 0.5 * 3.0, tt::tolerance(kExact));
  // Its weight gradient (3 of the 4) apart: the dispatch's backward starts after the data gradient
  // (1): compute 0-1, 1-4, 4-5; comm 0-2, 2-4. Done at 5, where max(sum, sum) would say 5 too.
  const std::array<StreamPiece, 3> delayed = {{{1.0, -1}, {3.0, -1}, {1.0, 0}}};
  BOOST_TEST(two_stream_seconds(delayed, std::array<StreamPiece, 2>{{{2.0, -1}, {2.0, 0}}}, 0.0) == 5.0,
             tt::tolerance(kExact));
  // Waits that point at each other are a caller's bug, not a number.
  BOOST_CHECK_THROW(
      two_stream_seconds(std::array<StreamPiece, 1>{{{1.0, 0}}}, std::array<StreamPiece, 1>{{{1.0, 0}}}, 0.0),
      std::logic_error);
}
