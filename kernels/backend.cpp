#include "kernels/backend.hpp"

#include "io/error.hpp"
#include "kernels/factory.hpp"
#include "model/enum_names.hpp"

namespace tpsim {

constexpr std::array<std::string_view, 3> kBackendNames = {"cpu", "cuda", "hip"};

std::optional<BackendKind> parse_backend(std::string_view s) { return value_named<BackendKind>(s, kBackendNames); }
std::string_view to_string(BackendKind k) { return name_of(k, kBackendNames); }

bool backend_built(BackendKind kind) {
  return kind == BackendKind::kCpu || (kind == BackendKind::kCuda && TPSIM_BUILT_CUDA) ||
         (kind == BackendKind::kHip && TPSIM_BUILT_HIP);
}

std::unique_ptr<Backend> make_backend(BackendKind kind, int index) {
  switch (kind) {
    case BackendKind::kCpu:
      if (index != 0) throw Error("--device-index " + std::to_string(index) + ": the CPU backend has one device, 0");
      return make_cpu_backend();
    case BackendKind::kCuda:
      if constexpr (TPSIM_BUILT_CUDA) return make_cuda_backend(index);
      throw Error("this build has no CUDA backend (the CUDA toolkit was not found when it was configured)");
    case BackendKind::kHip:
      if constexpr (TPSIM_BUILT_HIP) return make_hip_backend(index);
      throw Error("this build has no HIP backend (hipcc was not found when it was configured)");
  }
  throw Error("unknown backend");
}

}  // namespace tpsim
