// Collectives over MPI_COMM_WORLD on host fp32 buffers: MPI_Allgather, MPI_Reduce_scatter_block
// and MPI_Allreduce, timed with MPI_Wtime.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "io/error.hpp"
#include "kernels/comm.hpp"
#include "kernels/mpi_init.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/reference.hpp"
#include "kernels/timing.hpp"

namespace tpsim {
namespace {

// Reports the failing MPI call with its file:line and MPI's own message. The communicator's error
// handler is MPI_ERRORS_RETURN, so failures come back here instead of aborting every rank.
void mpi_check(int code, const char* statement, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + statement +
              " failed: " + std::string(message, static_cast<size_t>(length)));
}
#define TPSIM_MPI_CHECK(statement) mpi_check((statement), #statement, __FILE__, __LINE__)

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string processor_name() {
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  TPSIM_MPI_CHECK(MPI_Get_processor_name(name, &length));
  return std::string(name, static_cast<size_t>(length));
}

// Every rank's processor name, indexed by rank. Collective over `comm`.
std::vector<std::string> all_node_names(MPI_Comm comm) {
  int size = 0;
  TPSIM_MPI_CHECK(MPI_Comm_size(comm, &size));
  // Fixed-size, zero-padded slots: [size][kSlot] chars.
  constexpr int kSlot = MPI_MAX_PROCESSOR_NAME + 1;
  std::vector<char> mine(kSlot, '\0'), all(static_cast<size_t>(size) * kSlot, '\0');
  const std::string name = processor_name();
  std::memcpy(mine.data(), name.data(), std::min<size_t>(name.size(), kSlot - 1));
  TPSIM_MPI_CHECK(MPI_Allgather(mine.data(), kSlot, MPI_CHAR, all.data(), kSlot, MPI_CHAR, comm));
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) {
    const char* slot = all.data() + static_cast<size_t>(r) * kSlot;
    names.emplace_back(slot, strnlen(slot, kSlot));
  }
  return names;
}

int count_of(int64_t elements) {
  if (elements > INT_MAX)
    throw Error("collective of " + std::to_string(elements) + " fp32 elements per rank: MPI counts stop at " +
                std::to_string(INT_MAX));
  return static_cast<int>(elements);
}

// The buffers of one collective. `per_rank` elements are each rank's share of the full buffer.
struct Buffers {
  std::vector<float> send, recv;
};

Buffers buffers_for(CollectiveKind kind, int64_t per_rank, int ranks) {
  const auto share = static_cast<size_t>(per_rank), full = static_cast<size_t>(per_rank * ranks);
  switch (kind) {
    case CollectiveKind::kAllGather: return {std::vector<float>(share), std::vector<float>(full)};
    case CollectiveKind::kReduceScatter: return {std::vector<float>(full), std::vector<float>(share)};
    case CollectiveKind::kAllReduce: return {std::vector<float>(full), std::vector<float>(full)};
  }
  throw Error("unknown collective kind");
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(CommScope scope) {
    ensure_mpi_initialized();
    // A communicator of our own, so that its error handler and traffic stay apart from the
    // program's use of MPI_COMM_WORLD.
    if (scope == CommScope::kWorld) {
      TPSIM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    } else {
      // One communicator per node name: the colour is the name's index among the sorted names.
      std::vector<std::string> names = all_node_names(MPI_COMM_WORLD);
      int world_rank = 0;
      TPSIM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
      const std::string mine = names[static_cast<size_t>(world_rank)];
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      const auto color = static_cast<int>(std::lower_bound(names.begin(), names.end(), mine) - names.begin());
      TPSIM_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, world_rank, &comm_));
    }
    TPSIM_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    TPSIM_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    TPSIM_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string node_name() const override { return processor_name(); }

  std::string library_version() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    TPSIM_MPI_CHECK(MPI_Get_library_version(version, &length));
    std::string v(version, static_cast<size_t>(length));
    v = v.substr(0, v.find_first_of(",\n"));  // "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4"
    return v;
  }

  Timing time_collective(CollectiveKind kind, double bytes, const TimingOptions& options) override {
    validate(options);
    if (!(bytes > 0) || !std::isfinite(bytes))
      throw Error("collective " + std::string(to_string(kind)) + ": bytes " + std::to_string(bytes) +
                  " must be positive and finite");
    const auto per_rank = std::max<int64_t>(1, static_cast<int64_t>(bytes / 4.0 / size_));
    Buffers b = buffers_for(kind, per_rank, size_);
    cpu::fill_uniform(b.send.data(), static_cast<int64_t>(b.send.size()), -1, 1, seed_for(rank_));
    cpu::fill_uniform(b.recv.data(), static_cast<int64_t>(b.recv.size()), -1, 1, seed_for(rank_) + 1);
    next_call();
    const int count = count_of(per_rank);
    return summarize_timings(repeat_timed(options, [&] {
      TPSIM_MPI_CHECK(MPI_Barrier(comm_));
      const double start_s = MPI_Wtime();
      run(kind, b, count);
      const double local_s = MPI_Wtime() - start_s;
      double slowest_s = 0;
      TPSIM_MPI_CHECK(MPI_Allreduce(&local_s, &slowest_s, 1, MPI_DOUBLE, MPI_MAX, comm_));
      return slowest_s;  // the same on every rank, so every rank's loop stops at the same repetition
    }));
  }

  CheckResult check_collective(CollectiveKind kind, int64_t elements) override {
    if (elements < size_ || elements % size_ != 0)
      throw Error("collective " + std::string(to_string(kind)) + " check: " + std::to_string(elements) +
                  " elements must be a positive multiple of the " + std::to_string(size_) + " ranks");
    const int64_t per_rank = elements / size_;
    const int count = count_of(per_rank);

    // Rank r's input comes from seed_for(r): every rank can rebuild every other rank's input.
    auto input_of = [&](int r) {
      std::vector<float> x(kind == CollectiveKind::kAllGather ? static_cast<size_t>(per_rank)
                                                              : static_cast<size_t>(elements));
      cpu::fill_uniform(x.data(), static_cast<int64_t>(x.size()), -1, 1, seed_for(r));
      return x;
    };
    Buffers b = buffers_for(kind, per_rank, size_);
    b.send = input_of(rank_);
    cpu::fill_uniform(b.recv.data(), static_cast<int64_t>(b.recv.size()), -1, 1, seed_for(rank_) + 1);
    run(kind, b, count);

    std::vector<double> want(b.recv.size(), 0.0);
    for (int r = 0; r < size_; ++r) {
      const std::vector<float> x = input_of(r);
      for (size_t i = 0; i < want.size(); ++i) {
        switch (kind) {
          case CollectiveKind::kAllGather:
            if (i / static_cast<size_t>(per_rank) == static_cast<size_t>(r))
              want[i] = x[i % static_cast<size_t>(per_rank)];
            break;
          case CollectiveKind::kReduceScatter: want[i] += x[static_cast<size_t>(rank_ * per_rank) + i]; break;
          case CollectiveKind::kAllReduce: want[i] += x[i]; break;
        }
      }
    }
    next_call();
    const std::vector<float> want_f(want.begin(), want.end());
    const double local = max_relative_error(b.recv, want_f);
    CheckResult result;
    TPSIM_MPI_CHECK(MPI_Allreduce(&local, &result.max_rel_error, 1, MPI_DOUBLE, MPI_MAX, comm_));
    return result;
  }

 private:
  void run(CollectiveKind kind, Buffers& b, int count) {
    switch (kind) {
      case CollectiveKind::kAllGather:
        TPSIM_MPI_CHECK(MPI_Allgather(b.send.data(), count, MPI_FLOAT, b.recv.data(), count, MPI_FLOAT, comm_));
        return;
      case CollectiveKind::kReduceScatter:
        TPSIM_MPI_CHECK(MPI_Reduce_scatter_block(b.send.data(), b.recv.data(), count, MPI_FLOAT, MPI_SUM, comm_));
        return;
      case CollectiveKind::kAllReduce:
        // Out of place: repeated sums in place would double the values every run.
        TPSIM_MPI_CHECK(
            MPI_Allreduce(b.send.data(), b.recv.data(), count_of(int64_t{count} * size_), MPI_FLOAT, MPI_SUM, comm_));
        return;
    }
  }

  // Fresh data for every call, the same sequence on every rank (calls are collective).
  uint64_t seed_for(int r) const { return calls_ * 4096 + static_cast<uint64_t>(r) * 2 + 1; }
  void next_call() { ++calls_; }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  uint64_t calls_ = 0;
};

}  // namespace

void ensure_mpi_initialized() {
  int initialized = 0;
  TPSIM_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) return;
  int provided = 0;
  // Funneled: only the main thread calls MPI; the CPU kernels' OpenMP threads never do.
  TPSIM_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  std::atexit(finalize_mpi);
}

std::unique_ptr<Communicator> make_mpi_communicator(CommScope scope) {
  return std::make_unique<MpiCommunicator>(scope);
}

struct MpiJob::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
};

MpiJob::MpiJob() : state_(std::make_unique<State>()) {
  ensure_mpi_initialized();
  // Its own communicator: agreeing never mixes with a measurement's traffic.
  TPSIM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &state_->comm));
  TPSIM_MPI_CHECK(MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN));
  TPSIM_MPI_CHECK(MPI_Comm_rank(state_->comm, &state_->rank));
  TPSIM_MPI_CHECK(MPI_Comm_size(state_->comm, &state_->size));
}

MpiJob::~MpiJob() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&state_->comm);
}

int MpiJob::rank() const { return state_->rank; }
int MpiJob::size() const { return state_->size; }

std::vector<std::string> MpiJob::node_names() { return all_node_names(state_->comm); }

double MpiJob::max_over_ranks(double value) {
  double result = 0;
  TPSIM_MPI_CHECK(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, state_->comm));
  return result;
}

std::string MpiJob::first_failure(const std::string& mine, double timeout_s) {
  const int rank = state_->rank, size = state_->size;
  // The lowest failing rank, or size when none failed: a non-blocking reduction, so that a rank
  // whose peers never arrive can tell after timeout_s instead of waiting for ever.
  int failing = mine.empty() ? size : rank, first = size;
  MPI_Request request = MPI_REQUEST_NULL;
  TPSIM_MPI_CHECK(MPI_Iallreduce(&failing, &first, 1, MPI_INT, MPI_MIN, state_->comm, &request));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (int done = 0;;) {
    TPSIM_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << "tpsim: error: rank " << rank << " on " << processor_name() << ": "
                << (mine.empty() ? "the other ranks did not answer" : mine) << " (after waiting " << timeout_s
                << " s for the other ranks, ending the job)" << std::endl;
      MPI_Abort(state_->comm, 2);
    }
    // Waiting ranks sleep rather than spin: they share the cores with the ranks still working.
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (first == size) return "";
  // Everyone has arrived: the failing rank's message (length, then characters) goes to all.
  std::string message = rank == first ? mine : std::string();
  int length = static_cast<int>(message.size());
  TPSIM_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first, state_->comm));
  message.resize(static_cast<size_t>(length));
  TPSIM_MPI_CHECK(MPI_Bcast(message.data(), length, MPI_CHAR, first, state_->comm));
  if (first == 0) return message;
  const std::string where = all_node_names(state_->comm)[static_cast<size_t>(first)];
  return "rank " + std::to_string(first) + " on " + where + ": " + message;
}

}  // namespace tpsim
