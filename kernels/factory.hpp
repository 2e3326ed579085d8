// The constructors the factory (backend.cpp) calls; each lives in its backend's folder and is
// compiled only when that backend is built.
#pragma once

#include <memory>

#include "kernels/backend.hpp"

namespace tpsim {

std::unique_ptr<Backend> make_cpu_backend();
#ifdef TPSIM_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int index);
#endif
#ifdef TPSIM_HAVE_HIP
std::unique_ptr<Backend> make_hip_backend(int index);
#endif

}  // namespace tpsim
