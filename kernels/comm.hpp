// Collective communication measured across ranks: the all-gathers, reduce-scatters and
// all-reduces that FSDP issues (model/cost.hpp: CollectiveKind), timed on real links so that the
// cost model's link efficiencies and latencies can be fitted. One interface, one implementation
// per library:
//   comm_mpi.cpp  MPI (host buffers), when the build found MPI (TPSIM_HAVE_MPI);
//   NCCL          on device buffers, with the CUDA backend.
// Nothing here names a library's types.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.hpp"
#include "model/cost.hpp"

namespace tpsim {

inline std::string_view to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
  }
  return "?";
}

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string node_name() const = 0;        // the host this rank runs on
  virtual std::string library_version() const = 0;  // e.g. "Open MPI v4.1.4"

  // Times `kind` over a buffer of `bytes` (the full, unsharded buffer, as the cost model counts
  // it: an all-gather's output, a reduce-scatter's input, an all-reduce's buffer) of fp32 values.
  // The buffer is rounded down to whole fp32 elements that split evenly over the ranks (at least
  // one element per rank). Each repetition starts after a barrier and counts the slowest rank's
  // time; the result is the same on every rank. Collective: every rank must call it with the same
  // arguments.
  virtual Timing time_collective(CollectiveKind kind, double bytes, const TimingOptions& options) = 0;

  // Runs `kind` over `elements` fp32 values (the full buffer; a positive multiple of size()) of
  // random rank-dependent data and compares each rank's result with what the collective must give,
  // computed in double from every rank's inputs. max_rel_error is the largest over all ranks, the
  // same on every rank. Collective.
  virtual CheckResult check_collective(CollectiveKind kind, int64_t elements) = 0;
};

// Which of the job's ranks a communicator's collectives span.
enum class CommScope : uint8_t {
  kWorld,  // every rank of the job
  // The ranks sharing this rank's node_name(): one communicator per node. The nodes' collectives
  // run at the same time, each timed on its own (a rank's Timing is its node's).
  kNode,
};

// The factory over the communicators this build has (comm_factory.cpp), as make_backend is over
// the backends: cpu -> MPI on host buffers, cuda -> NCCL on device buffers (each rank its GPU among
// its node's, kernels/cuda/nccl_comm.hpp). Error "this build has no X communicator" for one the
// build lacks (hip has none). Collective.
std::unique_ptr<Communicator> make_communicator(BackendKind backend, CommScope scope = CommScope::kWorld);
// Whether this build has the communicator make_communicator makes for `backend`.
bool communicator_built(BackendKind backend);

#ifdef TPSIM_HAVE_MPI
// The communicator over MPI_COMM_WORLD's ranks, or over those on this rank's node. Initialises MPI
// on first use (MPI_Init_thread, funneled) and finalises it at exit; without mpirun it is a single
// rank. Collective.
std::unique_ptr<Communicator> make_mpi_communicator(CommScope scope = CommScope::kWorld);

// What a command run on every rank of an MPI job (mpirun -np N tpsim ...) needs besides timed
// collectives: where the ranks run, and agreeing on failure, so that every rank ends the same way
// and one line reports it. Initialises MPI on first use, as make_mpi_communicator does.
class MpiJob {
 public:
  MpiJob();
  ~MpiJob();
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  int rank() const;
  int size() const;

  // Every rank's node_name() (the host it runs on), indexed by rank. Collective.
  std::vector<std::string> node_names();

  // The largest `value` over the ranks, on every rank; no rank returns before all have called it,
  // so it also starts what follows on all ranks together. Collective.
  double max_over_ranks(double value);

  // Every rank passes what went wrong on it ("" when nothing did) and gets the failure of the
  // lowest failing rank: its message as it is for rank 0, "rank R on NODE: message" for another;
  // "" when no rank failed. Collective.
  // A rank that failed inside a collective may leave the others blocked in it: a rank that has
  // waited `timeout_s` for the others prints its own failure (or that it waited) to stderr as one
  // line and ends the whole job (MPI_Abort, exit status 2) rather than hang.
  std::string first_failure(const std::string& mine, double timeout_s);

 private:
  struct State;
  std::unique_ptr<State> state_;
};
#endif

}  // namespace tpsim
