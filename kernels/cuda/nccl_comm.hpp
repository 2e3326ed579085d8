// The NCCL communicator: kernels/comm.hpp's collectives on device buffers, one GPU per rank,
// bootstrapped over MPI (rank 0 creates the NCCL unique id and broadcasts it). Built when NCCL and
// MPI were both found (TPSIM_HAVE_NCCL_COMM); declared in every build, called only in those.
#pragma once

#include <memory>

#include "kernels/comm.hpp"

namespace tpsim {

// The communicator over MPI_COMM_WORLD's ranks, or over those on this rank's node (`scope`; MPI is
// initialised on first use, as make_mpi_communicator does). Each rank takes GPU `device_index`,
// or, when it is -1, its rank among the ranks on its node modulo the node's GPUs. Error, on every
// rank that finds it, when there is no CUDA device. Collective.
std::unique_ptr<Communicator> make_nccl_communicator(int device_index = -1, CommScope scope = CommScope::kWorld);

}  // namespace tpsim
