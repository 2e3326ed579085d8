// Collective calibration (`mpirun -np N tpsim calibrate comm`): time all-gather, reduce-scatter and
// all-reduce across the ranks of an MPI job and fit the cost model's link efficiency and per-step
// latency of every link tier the job spans (comm_fit.hpp), then hand rank 0 the profile to write.
//
// Tiers: the ranks sharing rank 0's node name measure the same-node tier (CommScope::kNode; every
// node runs its own collectives at the same time); when the job spans several node names, all
// ranks together measure the across-nodes tier. A tier the job cannot measure keeps the base
// profile's values and provenance, and the record says so.
//
// Every rank runs the calibration. Only rank 0 fits and writes. After each step the ranks agree on
// failure (CommJob::agree): a failure on any rank ends every rank, rank 0 with the one line
// (tpsim: error: ...) and the others silently (ReportedError), all with exit status 2.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "calibrate/comm_fit.hpp"
#include "io/profile_io.hpp"
#include "kernels/backend.hpp"
#include "kernels/comm.hpp"
#include "model/device.hpp"
#include "model/units.hpp"

namespace tpsim {

constexpr CollectiveKind kCommCalibrationKinds[] = {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                                    CollectiveKind::kAllReduce};

// The largest buffer a calibration times: 64 GiB, far beyond what one host or GPU holds twice.
constexpr double kMaxCommBytes = 64.0 * kGiB;

struct CommCalibrationOptions {
  BackendKind backend = BackendKind::kCpu;  // cpu: MPI on host buffers; cuda: NCCL on GPU buffers
  std::string base_path;                    // the profile to start from; "": data/profiles/defaults/cpu.json (cpu only)
  std::string out_path;                     // the profile rank 0 writes; its folder must exist
  // Full-buffer sizes in bytes. Empty: default_comm_sizes(backend).
  std::vector<double> sizes_bytes;
  double budget_s = 30;  // seconds of timed collectives to aim for, all sizes and kinds

  // "" when the options are consistent, else one line naming the broken constraint.
  std::string check() const;
};

// From latency-bound (4 KiB) to bandwidth-bound, by powers of two. On the CPU up to 64 MiB, which
// the shared-memory transport moves in tens of milliseconds; on GPUs up to 1 GiB, where NVLink's
// hundreds of GB/s still take milliseconds (FSDP's gathers of large blocks are that big).
std::vector<double> default_comm_sizes(BackendKind backend);

// The MPI job every rank of the calibration belongs to, and its agreement on failure: agree(step)
// runs `step` on every rank; when it failed on any rank, rank 0 throws the first failure as an
// Error (main prints it as the one line) and the other ranks throw ReportedError. A rank that waits
// at an agreement longer than a minute plus four times the longest step it has run ends the job
// (MpiJob::first_failure). Error when this build has no MPI.
class CommJob {
 public:
  CommJob();
  ~CommJob();
  CommJob(const CommJob&) = delete;
  CommJob& operator=(const CommJob&) = delete;

  int rank() const;
  int size() const;
  void agree(const std::function<void()>& step);
  // Every rank's node name, indexed by rank; the largest `value` over the ranks (MpiJob). Collective.
  std::vector<std::string> node_names();
  double max_over_ranks(double value);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// How far the fit is from a set of measurements: the median and largest of predicted/measured - 1,
// and the RMS of the log errors.
struct ResidualSummary {
  double median_error = 0, largest_error = 0, rms_log_error = 0;
  size_t measurements = 0;
};
ResidualSummary summarize_residuals(const std::vector<double>& log_errors);

// What rank 0 knows after the calibration; on the other ranks only `ranks` is set.
struct CommCalibration {
  BackendKind backend = BackendKind::kCpu;
  std::string library;  // the communicator's library and version
  int64_t ranks = 0;
  int64_t nodes = 0;
  std::map<std::string, int64_t> ranks_per_node;
  std::string node0;         // rank 0's node
  std::string base_profile;  // the base profile's origin
  DeviceSpec device;         // the links' bandwidths the efficiencies are relative to
  std::string device_note;   // how the spec was obtained
  std::vector<CommMeasurement> measurements;
  std::vector<std::string> skipped;  // "kind of N bytes: why", for collectives a communicator cannot run
  CommFitOptions fit_options;
  CommFitResult fit;
  ResidualSummary residuals;  // over every measurement
  // The same per collective kind, in kCommCalibrationKinds' order: the formula is one for all
  // three, the libraries' algorithms are not.
  std::vector<std::pair<CollectiveKind, ResidualSummary>> residuals_by_kind;
  std::string date;       // utc_timestamp() of the fit
  DeviceProfile profile;  // the base with the fitted values, each marked "comm"; extra as the base's
};

// Runs the calibration on every rank of `job`; on rank 0, `write` is given the result to write
// within the last agreement, so that a failure to write ends every rank alike. Error (on rank 0;
// ReportedError on the others) when the options do not check or any step fails on any rank.
CommCalibration calibrate_comm(const CommCalibrationOptions& options, CommJob& job,
                               const std::function<void(const CommCalibration&)>& write);

}  // namespace tpsim
