// MPI started once per process, by the first communicator that needs it (comm_mpi.cpp's, or the
// NCCL communicator's bootstrap), and finalised at exit. A program that initialised MPI itself
// keeps the job of finalising it. Defined in comm_mpi.cpp (tpsim_comm, built when MPI is found).
#pragma once

namespace tpsim {

void ensure_mpi_initialized();

}  // namespace tpsim
