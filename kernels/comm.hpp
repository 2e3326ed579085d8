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
  virtual std::string node_name() const = 0;  // the host this rank runs on
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

#ifdef TPSIM_HAVE_MPI
// The MPI_COMM_WORLD communicator. Initialises MPI on first use (MPI_Init_thread, funneled) and
// finalises it at exit; without mpirun it is a single rank.
std::unique_ptr<Communicator> make_mpi_communicator();
#endif

}  // namespace tpsim
