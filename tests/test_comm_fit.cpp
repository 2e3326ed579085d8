// Fitting collective parameters (calibrate/comm_fit): recovery of known link efficiencies and
// latencies from timings the cost model itself generates, with noise.
#define BOOST_TEST_MODULE comm_fit
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <random>

#include "calibrate/comm_fit.hpp"
#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/profile_io.hpp"

using namespace tpsim;
namespace tt = boost::test_tools;

namespace {

// Timings get lognormal noise of this relative size: what repeated MPI and NCCL runs scatter by.
constexpr double kNoise = 0.03;
// Recovery tolerances, relative. Efficiencies are set by many bandwidth-bound sizes and come back
// within about the noise; a latency only by the few smallest sizes of each kind.
constexpr double kEfficiencyRelTol = 0.03;
constexpr double kLatencyRelTol = 0.08;
// The truth must lie within this many of the fit's standard deviations.
constexpr double kStddevs = 4.0;

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllReduce};

// Powers of two from 1 KiB to 1 GiB: latency-bound at the small end, bandwidth-bound at the large.
std::vector<double> sizes_bytes() {
  std::vector<double> s;
  for (double b = 1024; b <= 1024.0 * 1024 * 1024; b *= 2) s.push_back(b);
  return s;
}

// Measurements of every kind and size over `group`, timed as the cost model predicts under `truth`
// times lognormal noise.
std::vector<CommMeasurement> simulate(const DeviceSpec& device, const CostParams& truth, const CommGroup& group,
                                      std::mt19937_64& rng) {
  std::normal_distribution<double> noise(0.0, kNoise);
  const CostModel cost(device, truth);
  std::vector<CommMeasurement> ms;
  for (CollectiveKind kind : kKinds)
    for (double bytes : sizes_bytes()) {
      CommMeasurement m;
      m.kind = kind;
      m.bytes = bytes;
      m.ranks = group.ranks;
      m.nodes = group.nodes;
      m.median_s = cost.collective_seconds(kind, bytes, group) * std::exp(noise(rng));
      m.p10_s = m.median_s * (1 - kNoise);
      m.p90_s = m.median_s * (1 + kNoise);
      m.repetitions = 5;
      ms.push_back(m);
    }
  return ms;
}

CostParams defaults_of(const std::string& device) {
  return load_profile(std::string(TPSIM_DATA) + "/profiles/defaults/" + device + ".json").params;
}

// `start` with the intra-node tier's truth: a link efficiency and a latency per ring step.
CostParams with_intra_node(const CostParams& start, double efficiency, double latency_s) {
  CostParams truth = start;
  truth.intra_node_link_efficiency = efficiency;
  truth.intra_node_latency_s = latency_s;
  return truth;
}

const FittedParameter& fitted(const CommFitResult& r, std::string_view name) {
  for (const auto& f : r.fitted)
    if (f.param->name == name) return f;
  throw Error("no fitted parameter " + std::string(name));
}

void check_recovered(const CommFitResult& r, std::string_view name, double truth, double rel_tol) {
  BOOST_TEST_CONTEXT(name) {
    const FittedParameter& f = fitted(r, name);
    BOOST_TEST(f.value == truth, tt::tolerance(rel_tol));
    BOOST_TEST(f.stddev > 0.0);
    BOOST_TEST(std::fabs(f.value - truth) <= kStddevs * f.stddev);
    BOOST_TEST(!f.at_bound);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_node_fit_recovers_the_intra_node_efficiency_and_latency) {
  const DeviceSpec device = load_device("h100_80gb");
  const CostParams start = defaults_of("h100_80gb");
  const CostParams truth = with_intra_node(start, 0.62, 7.5e-6);
  std::mt19937_64 rng(11);
  const std::vector<CommMeasurement> ms = simulate(device, truth, {8, 1, 1}, rng);

  const CommFitResult r = fit_comm(ms, device, start);
  BOOST_TEST(r.tiers.size() == 1u);
  BOOST_TEST((r.tiers[0] == LinkTier::kIntraNode));
  BOOST_TEST(r.fitted.size() == 2u);
  check_recovered(r, "intra_node_link_efficiency", truth.intra_node_link_efficiency, kEfficiencyRelTol);
  check_recovered(r, "intra_node_latency_s", truth.intra_node_latency_s, kLatencyRelTol);
  // The tier the job did not measure keeps its starting values.
  BOOST_TEST(r.params.inter_node_link_efficiency == start.inter_node_link_efficiency);
  BOOST_TEST(r.params.inter_node_latency_s == start.inter_node_latency_s);
  // Residuals: one per measurement, of the size of the noise.
  BOOST_TEST(r.residuals.size() == ms.size());
  double sum_sq = 0;
  for (double e : r.residuals) sum_sq += e * e;
  BOOST_TEST(std::sqrt(sum_sq / static_cast<double>(ms.size())) < 2 * kNoise);
}

BOOST_AUTO_TEST_CASE(two_node_fit_recovers_both_tiers) {
  // Two nodes of 8: node-local groups measure the intra-node tier, the 16-rank group the
  // inter-node one (its time is the slower of the two phases plus 15 inter-node latencies). The
  // truth makes the NICs the slower phase (1/2 B at 0.3 x 400 GB/s against 15/16 B at
  // 0.7 x 450 GB/s), else the 16-rank timings would not depend on their efficiency at all.
  const DeviceSpec device = load_device("h100_80gb");
  const CostParams start = defaults_of("h100_80gb");
  CostParams truth = with_intra_node(start, 0.7, 4e-6);
  truth.inter_node_link_efficiency = 0.3;
  truth.inter_node_latency_s = 14e-6;
  std::mt19937_64 rng(5);
  std::vector<CommMeasurement> ms = simulate(device, truth, {8, 1, 1}, rng);
  const std::vector<CommMeasurement> world = simulate(device, truth, {16, 2, 1}, rng);
  ms.insert(ms.end(), world.begin(), world.end());

  const CommFitResult r = fit_comm(ms, device, start);
  BOOST_TEST(r.tiers.size() == 2u);
  check_recovered(r, "intra_node_link_efficiency", truth.intra_node_link_efficiency, kEfficiencyRelTol);
  check_recovered(r, "intra_node_latency_s", truth.intra_node_latency_s, kLatencyRelTol);
  check_recovered(r, "inter_node_link_efficiency", truth.inter_node_link_efficiency, kEfficiencyRelTol);
  check_recovered(r, "inter_node_latency_s", truth.inter_node_latency_s, kLatencyRelTol);
}

BOOST_AUTO_TEST_CASE(a_start_far_from_the_truth_still_converges) {
  // A CPU's shared memory measured against a GPU-like start: microseconds of latency instead of
  // nanoseconds' worth, an efficiency at the other end of its range.
  DeviceSpec device = load_device("h100_80gb");
  device.intra_node_bytes_per_s = 6e9;
  CostParams start = defaults_of("h100_80gb");
  start.intra_node_link_efficiency = 0.9;
  start.intra_node_latency_s = 1e-4;
  const CostParams truth = with_intra_node(start, 0.35, 1.2e-6);
  std::mt19937_64 rng(3);
  const std::vector<CommMeasurement> ms = simulate(device, truth, {2, 1, 1}, rng);
  const CommFitResult r = fit_comm(ms, device, start);
  check_recovered(r, "intra_node_link_efficiency", truth.intra_node_link_efficiency, kEfficiencyRelTol);
  check_recovered(r, "intra_node_latency_s", truth.intra_node_latency_s, kLatencyRelTol);
}

BOOST_AUTO_TEST_CASE(a_few_odd_sizes_do_not_drag_the_fit) {
  // A library switching algorithm at some sizes: every seventh measurement three times too slow.
  const DeviceSpec device = load_device("h100_80gb");
  const CostParams start = defaults_of("h100_80gb");
  const CostParams truth = with_intra_node(start, 0.55, 6e-6);
  std::mt19937_64 rng(9);
  std::vector<CommMeasurement> ms = simulate(device, truth, {4, 1, 1}, rng);
  for (size_t i = 0; i < ms.size(); i += 7) ms[i].median_s *= 3.0;
  const CommFitResult r = fit_comm(ms, device, start);
  BOOST_TEST(fitted(r, "intra_node_link_efficiency").value == truth.intra_node_link_efficiency, tt::tolerance(0.05));
  BOOST_TEST(fitted(r, "intra_node_latency_s").value == truth.intra_node_latency_s, tt::tolerance(0.15));
}

BOOST_AUTO_TEST_CASE(bad_measurements_are_errors) {
  const DeviceSpec device = load_device("h100_80gb");
  const CostParams start = defaults_of("h100_80gb");
  BOOST_CHECK_THROW(fit_comm({}, device, start), Error);
  CommMeasurement one_rank{CollectiveKind::kAllGather, 1024, 1, 1, 1e-6, 1e-6, 1e-6, 5};
  BOOST_CHECK_THROW(fit_comm({one_rank}, device, start), Error);
  CommMeasurement no_time{CollectiveKind::kAllGather, 1024, 2, 1, 0, 0, 0, 5};
  BOOST_CHECK_THROW(fit_comm({no_time}, device, start), Error);
}
