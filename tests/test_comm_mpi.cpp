// MPI collectives: each one against its definition, and timed. ctest runs the suite twice: as a
// single rank without mpirun, and under mpirun with 2 ranks (TPSIM_TEST_RANKS says how many).
// Every rank runs every test case (the collectives need them all); the communicator returns the
// worst value over the ranks, so rank 0 sees every failure, and only rank 0 prints.
#define BOOST_TEST_MODULE comm_mpi
#include <boost/test/results_reporter.hpp>
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "io/error.hpp"
#include "kernels/comm.hpp"

using namespace tpsim;

namespace {
// Two ranks' fp32 sums round once, as the double reference rounded to fp32 does; more ranks add
// one rounding per rank.
constexpr double kCollectiveRelTol = 1e-6;

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllReduce};

Communicator& world() {
  static const std::unique_ptr<Communicator> c = make_mpi_communicator();
  return *c;
}

// Silences Boost.Test's log and report on every rank but 0 (whose exit status mpirun still
// collects from all ranks).
struct OnlyRankZeroPrints {
  OnlyRankZeroPrints() {
    if (world().rank() == 0) return;
    boost::unit_test::unit_test_log.set_stream(null_);
    boost::unit_test::results_reporter::set_stream(null_);
  }
  std::ostream null_{nullptr};  // no buffer: every write is dropped
};
}  // namespace

BOOST_TEST_GLOBAL_CONFIGURATION(OnlyRankZeroPrints);

BOOST_AUTO_TEST_CASE(ranks_are_the_ones_started) {
  const Communicator& c = world();
  if (const char* expected = std::getenv("TPSIM_TEST_RANKS")) BOOST_TEST(c.size() == std::atoi(expected));
  BOOST_TEST(c.rank() >= 0);
  BOOST_TEST(c.rank() < c.size());
  BOOST_TEST(!c.node_name().empty());
  BOOST_TEST(!c.library_version().empty());
  if (c.rank() == 0) std::cout << c.size() << " rank(s) on " << c.node_name() << ", " << c.library_version() << "\n";
}

BOOST_AUTO_TEST_CASE(every_collective_matches_its_definition) {
  Communicator& c = world();
  for (CollectiveKind kind : kKinds) {
    BOOST_TEST_CONTEXT("collective " << to_string(kind)) {
      for (int64_t per_rank : {1, 1000, 65536}) {
        const CheckResult r = c.check_collective(kind, per_rank * c.size());
        BOOST_TEST(r.supported);
        BOOST_TEST(r.max_rel_error <= kCollectiveRelTol);
      }
      BOOST_CHECK_THROW(c.check_collective(kind, 0), Error);
      if (c.size() > 1) BOOST_CHECK_THROW(c.check_collective(kind, c.size() + 1), Error);
    }
  }
}

BOOST_AUTO_TEST_CASE(collective_timings_are_positive_and_agree_across_ranks) {
  Communicator& c = world();
  const TimingOptions options{2, 5, 50, 0.01, 0.5, false};
  if (c.rank() == 0) std::cout << "collective        bytes   median us    p10 us    p90 us  reps  bus GB/s\n";
  for (CollectiveKind kind : kKinds) {
    for (double bytes : {64.0 * 1024, 4.0 * 1024 * 1024}) {
      BOOST_TEST_CONTEXT("collective " << to_string(kind) << " of " << bytes << " bytes") {
        const Timing t = c.time_collective(kind, bytes, options);
        BOOST_TEST(t.supported);
        BOOST_TEST(t.median_s > 0);
        BOOST_TEST(std::isfinite(t.median_s));
        BOOST_TEST(t.repetitions >= options.min_repetitions);
        BOOST_TEST(t.repetitions <= options.max_repetitions);
        // Ring bus bandwidth, as nccl-tests reports it: (n-1)/n of the buffer per pass, two
        // passes for an all-reduce.
        const double n = c.size();
        const double passes = kind == CollectiveKind::kAllReduce ? 2.0 : 1.0;
        const double bus = passes * (n - 1) / n * bytes / t.median_s;
        if (c.rank() == 0) {
          std::printf("%-14s %8.0f %11.1f %9.1f %9.1f %5d %9.2f\n", std::string(to_string(kind)).c_str(), bytes,
                      t.median_s * 1e6, t.p10_s * 1e6, t.p90_s * 1e6, t.repetitions, bus / 1e9);
          std::fflush(stdout);
        }
      }
    }
  }
  BOOST_CHECK_THROW(c.time_collective(CollectiveKind::kAllReduce, 0.0, options), Error);
}

BOOST_AUTO_TEST_CASE(a_node_communicator_spans_the_ranks_sharing_a_node_name) {
  MpiJob job;
  const std::vector<std::string> names = job.node_names();
  BOOST_TEST(static_cast<int>(names.size()) == job.size());
  BOOST_TEST(names[static_cast<size_t>(job.rank())] == world().node_name());
  const auto same_node = std::count(names.begin(), names.end(), names[static_cast<size_t>(job.rank())]);
  const std::unique_ptr<Communicator> node = make_mpi_communicator(CommScope::kNode);
  BOOST_TEST(node->size() == same_node);
  const Timing t =
      node->time_collective(CollectiveKind::kAllGather, 64.0 * 1024, TimingOptions{1, 5, 20, 0.001, 0.1, false});
  BOOST_TEST(t.median_s > 0);
}

BOOST_AUTO_TEST_CASE(the_ranks_agree_on_the_first_failure) {
  MpiJob job;
  constexpr double kTimeout_s = 60;
  BOOST_TEST(job.first_failure("", kTimeout_s).empty());
  BOOST_TEST(job.max_over_ranks(static_cast<double>(job.rank())) == job.size() - 1.0);
  // The last rank fails: every rank gets its message, with where it came from unless it is rank 0.
  const int last = job.size() - 1;
  const std::string failure = job.first_failure(job.rank() == last ? "disk full" : "", kTimeout_s);
  if (last == 0) {
    BOOST_TEST(failure == "disk full");
  } else {
    BOOST_TEST(failure ==
               "rank " + std::to_string(last) + " on " + job.node_names()[static_cast<size_t>(last)] + ": disk full");
  }
  // Several fail: the lowest rank's failure wins.
  BOOST_TEST(job.first_failure("rank " + std::to_string(job.rank()), kTimeout_s) == "rank 0");
}
