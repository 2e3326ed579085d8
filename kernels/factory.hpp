// The constructors the factory (backend.cpp) calls; each lives in its backend's folder and is
// compiled only when that backend is built (TPSIM_BUILT_CUDA, TPSIM_BUILT_HIP), the only builds that
// call it.
#pragma once

#include <memory>

#include "kernels/backend.hpp"

namespace tpsim {

std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend(int index);
std::unique_ptr<Backend> make_hip_backend(int index);

}  // namespace tpsim
