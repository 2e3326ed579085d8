// The pipeline-parallel schedule: Megatron's warm-up counts and order by hand, closed forms for
// equal stages, and the simulator (with and without the steady-state skip) against a slow
// reference written here: each stage's op list built the way Megatron's schedules.py builds it,
// and every op's end found by fixed-point iteration over the dependencies.
#define BOOST_TEST_MODULE pipeline
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <tuple>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "model/pipeline.hpp"

using namespace tpsim;
namespace tt = boost::test_tools;

namespace {
constexpr double kExact = 1e-9;  // relative: the brief's bound between the fast path and the reference

// get_schedule_table (megatron/core/pipeline_parallel/schedules.py): (micro-batch, model chunk) of
// each virtual micro-batch; groups of `group` micro-batches through every chunk in turn, the last
// group taking whatever is left.
std::vector<std::pair<int64_t, int64_t>> schedule_table(int64_t m, int64_t v, int64_t group) {
  std::vector<std::pair<int64_t, int64_t>> table;
  for (int64_t first = 0; first < m; first += group) {
    const int64_t last = first + group >= m ? m : first + group;
    for (int64_t chunk = 0; chunk < v; ++chunk)
      for (int64_t micro = first; micro < last; ++micro) table.emplace_back(micro, chunk);
  }
  return table;
}

struct RefOp {
  bool forward;
  int64_t chunk, micro;
  int64_t merged_with = -1;  // combined 1F1B: a backward merged with the forward of this chunk before it
};

// One stage's ops in Megatron's order: the warm-up forwards, then one forward and one backward
// (1F1B), then the cool-down backwards. Backwards take the chunks in reverse
// (get_model_chunk_id(..., forward=False)).
// Combined 1F1B (Megatron-Core's combined_1f1b.py): one more warm-up forward, and each backward of
// the 1F1B phase merged with the forward just before it.
std::vector<RefOp> stage_order(int64_t p, int64_t v, int64_t m, int64_t s, bool combined = false) {
  const auto table = schedule_table(m, v, p);
  const auto total = static_cast<int64_t>(table.size());
  int64_t warmup = (v == 1 ? p - s - 1 : 2 * (p - s - 1) + (v - 1) * p) + (combined ? 1 : 0);
  warmup = std::min(warmup, total);
  const auto fwd = [&](int64_t k) { return RefOp{true, table[k].second * p + s, table[k].first}; };
  const auto bwd = [&](int64_t k) { return RefOp{false, (v - 1 - table[k].second) * p + s, table[k].first}; };
  std::vector<RefOp> order;
  for (int64_t k = 0; k < warmup; ++k) order.push_back(fwd(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    order.push_back(fwd(k + warmup));
    order.push_back(bwd(k));
    if (combined) order.back().merged_with = order[order.size() - 2].chunk;
  }
  for (int64_t k = total - warmup; k < total; ++k) order.push_back(bwd(k));
  return order;
}

// The slow reference: every op's end as the least fixed point of
//   end = max(end of the stage's previous op, end of the input + send) + cost,
// iterated from zero until nothing moves.
PipelineTimeline reference(const PipelineCosts& c) {
  const int64_t p = c.stages, v = c.virtual_stages, m = c.micro_batches, chunks = p * v;
  const auto id = [&](bool forward, int64_t chunk, int64_t micro) {
    return ((forward ? 0 : chunks) + chunk) * m + micro;
  };
  std::vector<std::vector<RefOp>> orders;
  for (int64_t s = 0; s < p; ++s) orders.push_back(stage_order(p, v, m, s, c.combined_1f1b));
  // An op's seconds: a merged backward saves pair_hidden_s per layer the two chunks pair.
  const auto seconds = [&](const RefOp& op) {
    if (op.forward) return c.fwd_s[op.chunk];
    if (op.merged_with < 0) return c.bwd_s[op.chunk];
    const int64_t pairs = std::min(c.pair_layers[op.chunk], c.pair_layers[op.merged_with]);
    return std::max(c.bwd_s[op.chunk] - static_cast<double>(pairs) * c.pair_hidden_s, 0.0);
  };
  std::vector<double> end(2 * chunks * m, 0.0);
  std::vector<int> seen(end.size(), 0);
  for (const auto& order : orders)
    for (const RefOp& op : order) ++seen[id(op.forward, op.chunk, op.micro)];
  BOOST_REQUIRE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));  // every op once
  for (bool changed = true; changed;) {
    changed = false;
    for (int64_t s = 0; s < p; ++s) {
      double free = 0;
      for (const RefOp& op : orders[s]) {
        double ready = 0;
        const double hop = p > 1 ? c.p2p_s : 0;
        if (op.forward && op.chunk > 0) ready = end[id(true, op.chunk - 1, op.micro)] + hop;
        if (!op.forward && op.chunk < chunks - 1) ready = end[id(false, op.chunk + 1, op.micro)] + hop;
        if (!op.forward && op.chunk == chunks - 1) ready = end[id(true, op.chunk, op.micro)];
        const double e = std::max(free, ready) + seconds(op);
        double& slot = end[id(op.forward, op.chunk, op.micro)];
        if (e != slot) changed = true;
        slot = e;
        free = e;
      }
    }
  }
  PipelineTimeline t;
  double busiest = 0;
  for (int64_t s = 0; s < p; ++s) {
    const RefOp& last = orders[s].back();
    t.stage_end_s.push_back(end[id(last.forward, last.chunk, last.micro)]);
    double busy = 0;
    int64_t held = 0, peak = 0;
    for (const RefOp& op : orders[s]) {
      busy += seconds(op);
      held += op.forward ? 1 : -1;
      peak = std::max(peak, held);
    }
    t.stage_busy_s.push_back(busy);
    t.peak_in_flight.push_back(peak);
    t.step_s = std::max(t.step_s, t.stage_end_s.back());
    busiest = std::max(busiest, busy);
  }
  t.bubble_s = t.step_s - busiest;
  return t;
}

// Stage costs alike: every chunk's forward f / v and backward b / v.
struct Equal {
  std::vector<double> fwd, bwd;
  PipelineCosts costs;
  Equal(int64_t p, int64_t v, int64_t m, double f, double b, double d)
      : fwd(p * v, f / static_cast<double>(v)), bwd(p * v, b / static_cast<double>(v)) {
    costs = {.stages = p, .virtual_stages = v, .micro_batches = m, .fwd_s = fwd, .bwd_s = bwd, .p2p_s = d};
  }
};

void check_same(const PipelineTimeline& got, const PipelineTimeline& want) {
  BOOST_TEST(got.step_s == want.step_s, tt::tolerance(kExact));
  BOOST_TEST(std::abs(got.bubble_s - want.bubble_s) <= kExact * want.step_s);  // a difference of two steps
  BOOST_REQUIRE_EQUAL(got.stage_end_s.size(), want.stage_end_s.size());
  for (size_t s = 0; s < want.stage_end_s.size(); ++s) {
    BOOST_TEST(got.stage_end_s[s] == want.stage_end_s[s], tt::tolerance(kExact));
    BOOST_TEST(got.stage_busy_s[s] == want.stage_busy_s[s], tt::tolerance(kExact));
  }
  BOOST_TEST(got.peak_in_flight == want.peak_in_flight, tt::per_element());
}
}  // namespace

BOOST_AUTO_TEST_CASE(the_reference_builds_megatrons_schedule_table) {
  // schedules.py's own example: PP2 N3 M5 with VP2 (groups of 3 micro-batches).
  const auto table = schedule_table(5, 2, 3);
  const std::vector<int64_t> micro = {0, 1, 2, 0, 1, 2, 3, 4, 3, 4}, chunk = {0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
  BOOST_REQUIRE_EQUAL(table.size(), micro.size());
  for (size_t k = 0; k < table.size(); ++k) {
    BOOST_TEST(table[k].first == micro[k]);
    BOOST_TEST(table[k].second == chunk[k]);
  }
}

BOOST_AUTO_TEST_CASE(warmup_counts_are_megatrons) {
  // 1F1B: p - s - 1, at most m.
  BOOST_TEST(pipeline_warmup(4, 1, 8, 0) == 3);
  BOOST_TEST(pipeline_warmup(4, 1, 8, 3) == 0);
  BOOST_TEST(pipeline_warmup(8, 1, 4, 0) == 4);  // min(7, 4)
  BOOST_TEST(pipeline_warmup(8, 1, 4, 6) == 1);
  // Interleaved: 2 (p - s - 1) + (v - 1) p, at most m v.
  BOOST_TEST(pipeline_warmup(4, 2, 8, 0) == 10);   // 2*3 + 1*4
  BOOST_TEST(pipeline_warmup(4, 2, 8, 3) == 4);    // 0 + 4
  BOOST_TEST(pipeline_warmup(4, 3, 4, 1) == 12);   // 2*2 + 2*4
  BOOST_TEST(pipeline_warmup(2, 3, 2, 0) == 6);    // 2 + 4 = 6 = m v: every forward first
  BOOST_TEST(pipeline_warmup(4, 4, 4, 0) == 16);   // 6 + 12 = 18, capped at m v = 16
  BOOST_TEST(pipeline_warmup(8, 2, 16, 5) == 12);  // 2*2 + 8
}

BOOST_AUTO_TEST_CASE(interleaved_order_runs_groups_of_p_through_every_chunk) {
  // p = 2, v = 2, m = 4 on stage 1: warm-up 0 + 2 = 2 forwards, then 1F1B.
  const auto order = stage_order(2, 2, 4, 1);
  // Forwards (micro, chunk): (0,1) (1,1) | (0,3) B(0,3) (1,3) B(1,3) (2,1) B(0,1) (3,1) B(1,1) ...
  BOOST_REQUIRE_EQUAL(order.size(), 16u);
  BOOST_TEST((order[0].forward && order[0].micro == 0 && order[0].chunk == 1));
  BOOST_TEST((order[1].forward && order[1].micro == 1 && order[1].chunk == 1));
  BOOST_TEST((order[2].forward && order[2].micro == 0 && order[2].chunk == 3));
  BOOST_TEST((!order[3].forward && order[3].micro == 0 && order[3].chunk == 3));
  BOOST_TEST((order[6].forward && order[6].micro == 2 && order[6].chunk == 1));
  BOOST_TEST((!order[7].forward && order[7].micro == 0 && order[7].chunk == 1));
}

BOOST_AUTO_TEST_CASE(one_f_one_b_closed_form) {
  // (m + p - 1)(f + b) + 2 (p - 1 + floor((p - 1)(m - 1) / p)) d: pipeline.hpp says where the
  // steady-state sends come from; with d = 0 it is the textbook (m + p - 1)(f + b).
  for (int64_t p : {1, 2, 3, 4, 8, 16}) {
    for (int64_t m : {1, 2, 3, 5, 8, 17, 64, 300}) {
      for (double d : {0.0, 0.05, 0.7, 3.0}) {
        const double f = 0.4, b = 0.9;
        Equal e(p, 1, m, f, b, d);
        const double hops = static_cast<double>(2 * (p - 1 + (p - 1) * (m - 1) / p));
        const double want = static_cast<double>(m + p - 1) * (f + b) + hops * d;
        for (bool skip : {false, true}) {
          e.costs.skip_steady_state = skip;
          const PipelineTimeline t = simulate_pipeline(e.costs);
          BOOST_TEST(t.step_s == want, tt::tolerance(kExact));
          BOOST_TEST(std::abs(t.bubble_s - (want - static_cast<double>(m) * (f + b))) <= kExact * want);
          for (int64_t s = 0; s < p; ++s) BOOST_TEST(t.peak_in_flight[s] == std::min(p - s, m));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(interleaved_closed_form) {
  // Chunks of f / v and b / v: (m + (p - 1) / v)(f + b) + 2 (p v - 1) d while d <= min(f, b) / v.
  for (int64_t p : {2, 3, 4, 8}) {
    for (int64_t v : {2, 3, 4, 8}) {
      for (int64_t groups : {1, 2, 5, 32}) {
        const int64_t m = groups * p;
        const double f = 1.0, b = 2.1;
        for (double d : {0.0, 0.3 * f / static_cast<double>(v), f / static_cast<double>(v)}) {
          Equal e(p, v, m, f, b, d);
          BOOST_TEST((e.costs.schedule() == PipelineSchedule::kInterleaved1F1B));
          const double want = (static_cast<double>(m) + static_cast<double>(p - 1) / static_cast<double>(v)) * (f + b) +
                              static_cast<double>(2 * (p * v - 1)) * d;
          const PipelineTimeline t = simulate_pipeline(e.costs);
          BOOST_TEST(t.step_s == want, tt::tolerance(kExact));
          for (int64_t s = 0; s < p; ++s) {
            const int64_t warmup = 2 * (p - s - 1) + (v - 1) * p;
            BOOST_TEST(t.peak_in_flight[s] == std::min(warmup + 1, m * v));
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(one_stage_is_the_sum_of_compute) {
  for (int64_t v : {1, 2, 4}) {
    Equal e(1, v, 37, 0.3, 0.8, 5.0);  // no sends within one stage, whatever p2p_s says
    const PipelineTimeline t = simulate_pipeline(e.costs);
    BOOST_TEST(t.step_s == 37 * (0.3 + 0.8), tt::tolerance(kExact));
    BOOST_TEST(t.bubble_s == 0.0, tt::tolerance(1e-9));
  }
}

BOOST_AUTO_TEST_CASE(matches_the_reference_on_random_stages) {
  std::mt19937_64 rng(20261201);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  constexpr int kTrials = 1500;
  int skipped = 0;
  PipelineSimulator sim;  // reused: the buffers of one call serve the next
  for (int trial = 0; trial < kTrials; ++trial) {
    const auto p = static_cast<int64_t>(1 + rng() % 8), v = static_cast<int64_t>(1 + rng() % 4);
    int64_t m = static_cast<int64_t>(1 + rng() % 64);
    if (v > 1) m = p * std::max<int64_t>(1, m / p);
    std::vector<double> fwd(p * v), bwd(p * v);
    const double spread = trial % 3 == 0 ? 0.0 : 1.0;  // a third with equal stages (ties everywhere)
    for (auto& x : fwd) x = 0.1 + spread * u(rng);
    for (auto& x : bwd) x = trial % 7 == 0 ? 0.0 : 0.2 + 2 * spread * u(rng);
    PipelineCosts c{.stages = p,
                    .virtual_stages = v,
                    .micro_batches = m,
                    .fwd_s = fwd,
                    .bwd_s = bwd,
                    .p2p_s = trial % 4 == 0 ? 0.0 : (trial % 4 == 1 ? 2.0 : 0.1) * u(rng)};
    BOOST_TEST_CONTEXT("p=" << p << " v=" << v << " m=" << m << " p2p=" << c.p2p_s) {
      const PipelineTimeline want = reference(c);
      c.skip_steady_state = false;
      const PipelineTimeline full = sim.simulate(c);
      BOOST_TEST(full.ops_simulated == 2 * p * v * m);
      check_same(full, want);
      c.skip_steady_state = true;
      const PipelineTimeline& fast = sim.simulate(c);
      check_same(fast, want);
      skipped += fast.ops_simulated < full.ops_simulated ? 1 : 0;
    }
  }
  BOOST_TEST(skipped > kTrials / 3);  // the skip was exercised (short pipelines have no steady state to skip)
}

BOOST_AUTO_TEST_CASE(long_pipelines_skip_the_steady_state_exactly) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  PipelineSimulator fast, slow;
  using Shape = std::tuple<int64_t, int64_t, int64_t>;  // p, v, m
  for (auto [p, v, m] :
       {Shape{8, 1, 512}, {8, 4, 512}, {16, 2, 1024}, {4, 8, 1024}, {64, 1, 1000}, {32, 3, 256}, {64, 8, 1024}}) {
    std::vector<double> fwd(p * v), bwd(p * v);
    for (auto& x : fwd) x = u(rng) / static_cast<double>(v);
    for (auto& x : bwd) x = 2 * u(rng) / static_cast<double>(v);
    PipelineCosts c{.stages = p, .virtual_stages = v, .micro_batches = m, .fwd_s = fwd, .bwd_s = bwd, .p2p_s = 0.02};
    const PipelineTimeline& skipped = fast.simulate(c);
    c.skip_steady_state = false;
    const PipelineTimeline& full = slow.simulate(c);
    BOOST_TEST_CONTEXT("p=" << p << " v=" << v << " m=" << m) {
      check_same(skipped, full);
      BOOST_TEST(skipped.ops_simulated * 3 < full.ops_simulated * 2);  // (p = 32, v = 3: 8 groups of p, half skipped)
    }
  }
}

BOOST_AUTO_TEST_CASE(a_reused_simulator_keeps_its_buffers) {
  Equal big(8, 4, 64, 1, 2, 0.01), small(4, 2, 16, 1, 2, 0.01);
  PipelineSimulator sim;
  const double* ends = sim.simulate(big.costs).stage_end_s.data();
  BOOST_TEST(sim.simulate(small.costs).stage_end_s.data() == ends);
  BOOST_TEST(sim.simulate(big.costs).stage_end_s.data() == ends);
}

BOOST_AUTO_TEST_CASE(what_cannot_run_is_named) {
  Equal e(4, 2, 6, 1, 2, 0);
  BOOST_TEST(check_pipeline(e.costs).find("multiple of the pipeline stages") != std::string::npos);
  BOOST_CHECK_THROW(simulate_pipeline(e.costs), std::invalid_argument);
  Equal ok(4, 2, 8, 1, 2, 0);
  BOOST_TEST(check_pipeline(ok.costs).empty());
  ok.costs.fwd_s = std::span<const double>(ok.fwd).first(3);
  BOOST_TEST(check_pipeline(ok.costs).find("one forward and one backward time per model chunk (8)") !=
             std::string::npos);
  Equal neg(2, 1, 3, 1, 2, -1);
  BOOST_TEST(check_pipeline(neg.costs).find("send time") != std::string::npos);
  Equal zero(2, 1, 3, 1, 2, 0);
  zero.costs.micro_batches = 0;
  BOOST_TEST(check_pipeline(zero.costs).find("micro-batches") != std::string::npos);
  Equal wide(64, 32, 64, 1, 2, 0);  // 2048 chunks: the most a pipeline may have
  BOOST_TEST(check_pipeline(wide.costs).empty());
  wide.costs.virtual_stages = 33;
  BOOST_TEST(check_pipeline(wide.costs) == "virtual stages must be in 1..32 (at most 2048 model chunks)");
}

BOOST_AUTO_TEST_CASE(uneven_stages_by_hand_and_against_the_reference) {
  // Two stages, two micro-batches, no send time; stage 1 three times stage 0 (an uneven split:
  // 1 layer and 3). Stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1 (warm-up 1 and 0):
  //   s0.F0 0-1, s1.F0 1-4, s0.F1 1-2, s1.B0 4-10, s0.B0 10-12, s1.F1 10-13, s1.B1 13-19, s0.B1 19-21.
  const std::vector<double> fwd = {1.0, 3.0}, bwd = {2.0, 6.0};
  PipelineCosts c;
  c.stages = 2;
  c.micro_batches = 2;
  c.fwd_s = fwd;
  c.bwd_s = bwd;
  const PipelineTimeline t = simulate_pipeline(c);
  BOOST_TEST(t.step_s == 21.0, tt::tolerance(kExact));
  BOOST_TEST(t.stage_end_s[0] == 21.0, tt::tolerance(kExact));
  BOOST_TEST(t.stage_end_s[1] == 19.0, tt::tolerance(kExact));
  BOOST_TEST(t.bubble_s == 21.0 - 18.0, tt::tolerance(kExact));
  // Megatron-Bridge's Llama 3.1 405B split: pp 8 x vp 8 chunks of 2 layers, the first and last of 1
  // (the embedding and the loss counted as layers), with the embedding's and head's own time on
  // them; skipped exactly as the slow reference runs it.
  std::vector<double> f(64, 2.0), b(64, 4.0);
  f.front() = 1.0 + 0.3, b.front() = 2.0 + 0.2;
  f.back() = 1.0 + 0.9, b.back() = 2.0 + 0.9;
  PipelineCosts big;
  big.stages = 8;
  big.virtual_stages = 8;
  big.micro_batches = 64;
  big.fwd_s = f;
  big.bwd_s = b;
  big.p2p_s = 0.05;
  const PipelineTimeline fast = simulate_pipeline(big);
  check_same(fast, reference(big));
  BOOST_TEST(fast.ops_simulated < 2 * 64 * 64);
}

BOOST_AUTO_TEST_CASE(combined_1f1b_merges_each_steady_backward_with_the_forward_before_it) {
  // One more warm-up forward on every stage (get_pp_rank_microbatches under
  // overlap_moe_expert_parallel_comm).
  BOOST_TEST(pipeline_warmup(4, 2, 8, 0, true) == 11);  // 2*3 + 4 + 1
  BOOST_TEST(pipeline_warmup(4, 2, 8, 3, true) == 5);
  BOOST_TEST(pipeline_warmup(1, 1, 8, 0, true) == 1);  // no pipelining: the first forward alone
  BOOST_TEST(pipeline_warmup(2, 2, 2, 0, true) == 4);  // capped at m v

  // No pipelining, by hand: F0, then (F1, B0) ... (F7, B6) merged, then B7:
  // 8 (f + b) less 7 merged backwards' 4 layers x 0.25 s.
  const std::vector<double> fwd{1.0}, bwd{2.0};
  const std::vector<int64_t> layers{4};
  PipelineCosts c;
  c.micro_batches = 8;
  c.fwd_s = fwd;
  c.bwd_s = bwd;
  c.combined_1f1b = true;
  c.pair_layers = layers;
  c.pair_hidden_s = 0.25;
  const PipelineTimeline t = simulate_pipeline(c);
  BOOST_TEST(t.step_s == 8 * 3.0 - 7 * 1.0, tt::tolerance(kExact));
  BOOST_TEST(t.stage_busy_s[0] == 17.0, tt::tolerance(kExact));
  BOOST_TEST(t.peak_in_flight[0] == 2);  // the merged step's forward beside the backward's micro-batch
  c.pair_hidden_s = 1.0;                 // more than a backward: it cannot take less than nothing
  BOOST_TEST(simulate_pipeline(c).step_s == 8 * 3.0 - 7 * 2.0, tt::tolerance(kExact));

  // With pipeline parallelism only interleaved, as Megatron-Core asserts.
  const std::vector<double> four(4, 1.0);
  const std::vector<int64_t> four_layers(4, 2);
  PipelineCosts plain;
  plain.stages = 4;
  plain.micro_batches = 8;
  plain.fwd_s = plain.bwd_s = four;
  plain.combined_1f1b = true;
  plain.pair_layers = four_layers;
  BOOST_TEST(check_pipeline(plain).find("virtual stages must be at least 2") != std::string::npos);
  plain.stages = 2, plain.virtual_stages = 2;
  plain.pair_layers = layers;
  BOOST_TEST(check_pipeline(plain).find("layers of every model chunk") != std::string::npos);

  // Against the reference on random interleaved pipelines, unequal chunks and layers, with and
  // without the steady-state skip.
  std::mt19937_64 rng(20261128);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  PipelineSimulator sim;
  int skipped = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const auto p = static_cast<int64_t>(1 + rng() % 8);
    const int64_t v = p == 1 ? 1 : static_cast<int64_t>(2 + rng() % 3);
    const int64_t m = p * std::max<int64_t>(1, static_cast<int64_t>(1 + rng() % 64) / p);
    std::vector<double> f(p * v), b(p * v);
    std::vector<int64_t> l(p * v);
    for (auto& x : f) x = 0.1 + u(rng);
    for (auto& x : b) x = 0.2 + 2 * u(rng);
    for (auto& x : l) x = static_cast<int64_t>(1 + rng() % 4);
    PipelineCosts r{.stages = p,
                    .virtual_stages = v,
                    .micro_batches = m,
                    .fwd_s = f,
                    .bwd_s = b,
                    .p2p_s = trial % 3 == 0 ? 0.0 : 0.2 * u(rng),
                    .combined_1f1b = true,
                    .pair_layers = l,
                    .pair_hidden_s = 0.3 * u(rng)};
    BOOST_TEST_CONTEXT("p=" << p << " v=" << v << " m=" << m) {
      const PipelineTimeline want = reference(r);
      r.skip_steady_state = false;
      const PipelineTimeline full = sim.simulate(r);
      check_same(full, want);
      r.skip_steady_state = true;
      const PipelineTimeline& fast = sim.simulate(r);
      check_same(fast, want);
      skipped += fast.ops_simulated < full.ops_simulated ? 1 : 0;
    }
  }
  BOOST_TEST(skipped > 100);
}
