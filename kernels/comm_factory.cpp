// The communicator factory (comm.hpp): which library times the collectives of each backend.
#include "io/error.hpp"
#include "kernels/comm.hpp"
#include "kernels/cuda/nccl_comm.hpp"

namespace tpsim {

bool communicator_built(BackendKind backend) {
  switch (backend) {
    case BackendKind::kCpu: return TPSIM_BUILT_MPI;
    case BackendKind::kCuda: return TPSIM_BUILT_NCCL_COMM;
    case BackendKind::kHip: return false;
  }
  return false;
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
