// NCCL collectives behind kernels/comm.hpp's Communicator: ncclAllGather, ncclReduceScatter and
// ncclAllReduce on fp32 device buffers, on one stream per rank, timed with an event pair after an
// MPI barrier; every repetition counts the slowest rank (MPI_Allreduce of the maximum), so all
// ranks see the same samples and stop after the same repetition (kernels/timing.hpp).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gpu_kernels.cuh"
#include "kernels/cuda/nccl_check.hpp"
#include "kernels/cuda/nccl_comm.hpp"
#include "kernels/mpi_init.hpp"
#include "kernels/timing.hpp"

namespace tpsim::TPSIM_GPU_NS {

// "MPI error (message) in `statement` at file:line" (throw_api_error).
[[noreturn]] void throw_mpi_error(int code, const char* statement, const char* file, int line) {
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  throw_api_error("MPI error (" + std::string(message, static_cast<size_t>(length)) + ")", statement, file, line);
}

}  // namespace tpsim::TPSIM_GPU_NS

#define MPI_CHECK(statement) TPSIM_API_CHECK(int, MPI_SUCCESS, throw_mpi_error, statement, #statement)

namespace tpsim::TPSIM_GPU_NS {
namespace {

// This rank's node as a colour for MPI_Comm_split: the index of its processor name among the
// sorted names of all ranks (CommScope::kNode groups the ranks sharing a node_name()).
int node_color() {
  constexpr int kSlot = MPI_MAX_PROCESSOR_NAME + 1;
  int rank = 0, size = 0, length = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::vector<char> mine(kSlot, '\0'), all(static_cast<size_t>(size) * kSlot, '\0');
  MPI_CHECK(MPI_Get_processor_name(mine.data(), &length));
  MPI_CHECK(MPI_Allgather(mine.data(), kSlot, MPI_CHAR, all.data(), kSlot, MPI_CHAR, MPI_COMM_WORLD));
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) names.emplace_back(all.data() + static_cast<size_t>(r) * kSlot);
  const std::string own = names[static_cast<size_t>(rank)];
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return static_cast<int>(std::lower_bound(names.begin(), names.end(), own) - names.begin());
}

// A device buffer of fp32 values.
class Floats {
 public:
  explicit Floats(int64_t count) : buf_(static_cast<size_t>(count) * sizeof(float)), count_(count) {}
  float* get() const { return static_cast<float*>(buf_.get()); }
  int64_t count() const { return count_; }

 private:
  DeviceBuffer buf_;
  int64_t count_ = 0;
};

// Each rank's send and receive counts for a full buffer of `elements` (a multiple of ranks).
struct Counts {
  int64_t send, recv;
};
Counts counts_of(CollectiveKind kind, int64_t elements, int ranks) {
  const int64_t share = elements / ranks;
  switch (kind) {
    case CollectiveKind::kAllGather: return {share, elements};
    case CollectiveKind::kReduceScatter: return {elements, share};
    case CollectiveKind::kAllReduce: return {elements, elements};
  }
  return {0, 0};
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int device_index, CommScope scope) {
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
      (void)cudaGetLastError();
      throw Error(std::string("NCCL communicator: no CUDA device (") +
                  (status != cudaSuccess ? cudaGetErrorString(status) : "the runtime found none") + ")");
    }
    ensure_mpi_initialized();
    int world_rank = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    // The ranks this communicator spans, for the NCCL id's broadcast and the timing's barriers.
    if (scope == CommScope::kWorld) MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &mpi_));
    else MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, node_color(), world_rank, &mpi_));
    MPI_CHECK(MPI_Comm_rank(mpi_, &rank_));
    MPI_CHECK(MPI_Comm_size(mpi_, &size_));
    MPI_Comm node = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
    int local_rank = 0;
    MPI_CHECK(MPI_Comm_rank(node, &local_rank));
    MPI_CHECK(MPI_Comm_free(&node));
    device_ = device_index >= 0 ? device_index : local_rank % devices;
    if (device_ >= devices)
      throw Error("NCCL communicator: device " + std::to_string(device_) + " of " + std::to_string(devices));
    CUDA_CHECK(cudaSetDevice(device_));

    ncclUniqueId id;
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_));
    NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }

  ~NcclCommunicator() override {
    if (stream_) (void)cudaStreamSynchronize(stream_);
    if (comm_) (void)ncclCommDestroy(comm_);
    if (start_) (void)cudaEventDestroy(start_);
    if (stop_) (void)cudaEventDestroy(stop_);
    if (stream_) (void)cudaStreamDestroy(stream_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && mpi_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string node_name() const override {
    char name[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    MPI_CHECK(MPI_Get_processor_name(name, &length));
    return std::string(name, static_cast<size_t>(length));
  }

  std::string library_version() const override {
    int v = 0;
    NCCL_CHECK(ncclGetVersion(&v));
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
           std::to_string(v % 100) + " (MPI bootstrap)";
  }

  Timing time_collective(CollectiveKind kind, double bytes, const TimingOptions& options) override {
    validate(options);
    CUDA_CHECK(cudaSetDevice(device_));
    int64_t elements = static_cast<int64_t>(bytes / 4.0) / size_ * size_;
    if (elements < size_) elements = size_;
    const Counts c = counts_of(kind, elements, size_);
    // Whether the buffers fit must be decided by all ranks together: one rank that skips would
    // leave the others waiting in the collective.
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    const double need = 4.0 * double(c.send + c.recv);
    int fits = need <= 0.9 * double(free) ? 1 : 0, all_fit = 0;
    MPI_CHECK(MPI_Allreduce(&fits, &all_fit, 1, MPI_INT, MPI_MIN, mpi_));
    if (!all_fit) {
      Timing t;
      t.supported = false;
      t.reason = std::string(to_string(kind)) + " of " + std::to_string(need / double(1ull << 30)) +
                 " GiB per rank does not fit in some rank's free device memory";
      return t;
    }
    Floats send(c.send), recv(c.recv);
    fill_uniform(send.get(), Elem::kF32, c.send, 0x6e63636cull + static_cast<uint64_t>(rank_), -1.0f, 1.0f, stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return summarize_timings(repeat_timed(options, [&] {
      MPI_CHECK(MPI_Barrier(mpi_));
      CUDA_CHECK(cudaEventRecord(start_, stream_));
      run(kind, send, recv);
      CUDA_CHECK(cudaEventRecord(stop_, stream_));
      CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      double mine = static_cast<double>(ms) * 1e-3, slowest = 0;
      MPI_CHECK(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, mpi_));
      return slowest;
    }));
  }

  CheckResult check_collective(CollectiveKind kind, int64_t elements) override {
    if (elements < size_ || elements % size_ != 0)
      throw Error("check_collective: " + std::to_string(elements) + " elements is not a positive multiple of the " +
                  std::to_string(size_) + " ranks");
    CUDA_CHECK(cudaSetDevice(device_));
    const Counts c = counts_of(kind, elements, size_);
    // Every rank's input, generated on every rank from the rank's seed, so that each can compute
    // its expected output in double.
    auto input_of = [&](int r) {
      std::mt19937_64 gen(0x6e63636cull + static_cast<uint64_t>(r));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(c.send));
      for (auto& v : x) v = u(gen);
      return x;
    };
    std::vector<double> want(static_cast<size_t>(c.recv), 0.0);
    const int64_t share = elements / size_;
    for (int r = 0; r < size_; ++r) {
      const std::vector<float> x = input_of(r);
      for (int64_t i = 0; i < c.recv; ++i) {
        switch (kind) {
          case CollectiveKind::kAllGather:
            if (i / share == r) want[static_cast<size_t>(i)] = x[static_cast<size_t>(i % share)];
            break;
          case CollectiveKind::kReduceScatter:
            want[static_cast<size_t>(i)] += x[static_cast<size_t>(rank_ * share + i)];
            break;
          case CollectiveKind::kAllReduce: want[static_cast<size_t>(i)] += x[static_cast<size_t>(i)]; break;
        }
      }
    }
    Floats send(c.send), recv(c.recv);
    const std::vector<float> mine = input_of(rank_);
    CUDA_CHECK(cudaMemcpy(send.get(), mine.data(), mine.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());  // the pageable copy has landed before the collective's stream reads it
    run(kind, send, recv);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<float> got(static_cast<size_t>(c.recv));
    CUDA_CHECK(cudaMemcpy(got.data(), recv.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double diff = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
      diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      scale = std::max(scale, std::fabs(want[i]));
    }
    double error = diff / std::max(scale, 1e-30), worst = 0;
    MPI_CHECK(MPI_Allreduce(&error, &worst, 1, MPI_DOUBLE, MPI_MAX, mpi_));
    CheckResult r;
    r.max_rel_error = worst;
    return r;
  }

 private:
  void run(CollectiveKind kind, const Floats& send, const Floats& recv) {
    switch (kind) {
      case CollectiveKind::kAllGather:
        NCCL_CHECK(
            ncclAllGather(send.get(), recv.get(), static_cast<size_t>(send.count()), ncclFloat32, comm_, stream_));
        return;
      case CollectiveKind::kReduceScatter:
        NCCL_CHECK(ncclReduceScatter(send.get(), recv.get(), static_cast<size_t>(recv.count()), ncclFloat32, ncclSum,
                                     comm_, stream_));
        return;
      case CollectiveKind::kAllReduce:
        NCCL_CHECK(ncclAllReduce(send.get(), recv.get(), static_cast<size_t>(send.count()), ncclFloat32, ncclSum, comm_,
                                 stream_));
        return;
    }
  }

  int rank_ = 0, size_ = 1, device_ = 0;  // rank and size within mpi_
  MPI_Comm mpi_ = MPI_COMM_NULL;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace
}  // namespace tpsim::TPSIM_GPU_NS

namespace tpsim {

std::unique_ptr<Communicator> make_nccl_communicator(int device_index, CommScope scope) {
  return std::make_unique<TPSIM_GPU_NS::NcclCommunicator>(device_index, scope);
}

}  // namespace tpsim
