// The communicator factory (comm.hpp): which library times the collectives of each backend.
#include "io/error.hpp"
#include "kernels/comm.hpp"
#ifdef TPSIM_HAVE_NCCL_COMM
#include "kernels/cuda/nccl_comm.hpp"
#endif

namespace tpsim {

bool communicator_built(BackendKind backend) {
  switch (backend) {
    case BackendKind::kCpu:
#ifdef TPSIM_HAVE_MPI
      return true;
#else
      return false;
#endif
    case BackendKind::kCuda:
#ifdef TPSIM_HAVE_NCCL_COMM
      return true;
#else
      return false;
#endif
    case BackendKind::kHip: return false;
  }
  return false;
}

std::unique_ptr<Communicator> make_communicator(BackendKind backend, CommScope scope) {
  switch (backend) {
    case BackendKind::kCpu:
#ifdef TPSIM_HAVE_MPI
      return make_mpi_communicator(scope);
#else
      throw Error("this build has no MPI communicator (MPI was not found when it was configured)");
#endif
    case BackendKind::kCuda:
#ifdef TPSIM_HAVE_NCCL_COMM
      return make_nccl_communicator(-1, scope);
#else
      throw Error(
          "this build has no NCCL communicator (it needs the CUDA toolkit, NCCL and MPI when it is configured)");
#endif
    case BackendKind::kHip: break;
  }
  (void)scope;
  throw Error("--backend " + std::string(to_string(backend)) + ": this build has no communicator for it");
}

}  // namespace tpsim
