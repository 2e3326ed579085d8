// Timing helpers shared by every measurement backend (CPU, CUDA, HIP) and the communicators:
// order statistics of run times and the repetition loop that TimingOptions describes. Standard
// library only, so that GPU backends can use them with their own clocks (events, streams).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

namespace tpsim {

// Error naming the first option that makes no sense (negative warm-up, max below min, ...).
void validate(const TimingOptions& options);

// The q-quantile (0 <= q <= 1) of `samples_s`, interpolating linearly between order statistics
// (numpy's default). Error when `samples_s` is empty.
double percentile(std::vector<double> samples_s, double q);
double median(std::vector<double> samples_s);

// Median, 10th and 90th percentiles and count of the timed runs.
Timing summarize_timings(const std::vector<double>& samples_s);

// Runs `run_once` options.warmup times untimed, then repeats it and collects the seconds each
// call returns. `run_once` measures itself (a host clock around a synchronised kernel, GPU events,
// MPI_Wtime) and returns the seconds of that one run.
//   - options.min_repetitions timed runs always happen (the median needs them), at most
//     options.max_repetitions;
//   - between the two, repetition stops once the timed runs sum to options.min_seconds, or once
//     warm-up and timed runs together sum to options.max_seconds (a slow op is not repeated
//     for long);
//   - the warm-up itself ends early once it has taken options.max_seconds (at least one run).
//
// The loop decides from the returned seconds only, never from a clock of its own: ranks that feed
// it the same values (the maximum over ranks of a collective) stop after the same repetition.
std::vector<double> repeat_timed(const TimingOptions& options, const std::function<double()>& run_once);

// Seconds on a monotonic host clock, from an arbitrary origin.
double host_seconds();

}  // namespace tpsim
