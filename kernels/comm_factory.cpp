// The communicator factory (comm.hpp): which library times the collectives of each backend.
#include "io/error.hpp"
#include "kernels/comm.hpp"
#include "kernels/cuda/nccl_comm.hpp"

namespace tpsim {

// MPI for the CPU, NCCL for CUDA; none for HIP (no RCCL communicator yet).
bool communicator_built(BackendKind backend) {
  return (backend == BackendKind::kCpu && TPSIM_BUILT_MPI) || (backend == BackendKind::kCuda && TPSIM_BUILT_NCCL_COMM);
}

std::unique_ptr<Communicator> make_communicator(BackendKind backend, CommScope scope) {
  switch (backend) {
    case BackendKind::kCpu:
      if constexpr (TPSIM_BUILT_MPI) return make_mpi_communicator(scope);
      throw Error("this build has no MPI communicator (MPI was not found when it was configured)");
    case BackendKind::kCuda:
      if constexpr (TPSIM_BUILT_NCCL_COMM) return make_nccl_communicator(-1, scope);
      throw Error(
          "this build has no NCCL communicator (it needs the CUDA toolkit, NCCL and MPI when it is configured)");
    case BackendKind::kHip: break;
  }
  throw Error("--backend " + std::string(to_string(backend)) + ": this build has no communicator for it");
}

}  // namespace tpsim
