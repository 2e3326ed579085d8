// The CPU measurement backend: runs the simulator's ops with the Eigen/OpenMP kernels of
// cpu_kernels.cpp on all hardware threads and times them on the host's monotonic clock (or, when
// TimingOptions asks for it and one thread runs, on that thread's CPU clock).
#include <Eigen/Core>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/factory.hpp"
#include "kernels/timing.hpp"
#include "model/units.hpp"

namespace tpsim {
namespace {

// Buffers may take at most this share of the memory the kernel reports available, leaving room
// for the rest of the process and the page cache.
constexpr double kUsableMemoryShare = 0.8;

std::string name_of(const Op& op) { return op.name ? op.name : "(unnamed op)"; }

// The value of `key` in a "key : value" file such as /proc/cpuinfo, or "".
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon);
    k.erase(k.find_last_not_of(" \t") + 1);
    if (k != key) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
  }
  return "";
}

// /proc/meminfo gives kB (KiB); 0 when the field is missing.
double meminfo_bytes(const std::string& key) {
  const std::string v = proc_field("/proc/meminfo", key);
  return v.empty() ? 0.0 : std::stod(v) * 1024.0;
}

std::string cpu_model_name() {
  std::string name = proc_field("/proc/cpuinfo", "model name");   // x86
  if (name.empty()) name = proc_field("/proc/cpuinfo", "Model");  // some Arm boards
  return name.empty() ? "unknown CPU" : name;
}

std::string openmp_version() {
  switch (_OPENMP) {
    case 201511: return "OpenMP 4.5";
    case 201811: return "OpenMP 5.0";
    case 202011: return "OpenMP 5.1";
    case 202111: return "OpenMP 5.2";
    default: return "OpenMP " + std::to_string(_OPENMP);
  }
}

// CPU time the calling thread has used, in seconds.
double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// What two back-to-back reads of the thread CPU clock measure (a system call each, some 0.3 us
// here, against 0.05 us for the monotonic clock): subtracted from every run it times, so that
// microsecond kernels are not inflated by it. The median of a thousand pairs, taken once.
double thread_clock_cost_s() {
  static const double cost = [] {
    std::vector<double> pairs;
    for (int i = 0; i < 1001; ++i) {
      const double a = thread_cpu_seconds();
      pairs.push_back(thread_cpu_seconds() - a);
    }
    return median(pairs);
  }();
  return cost;
}

std::string gib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", bytes / kGiB);
  return s;
}

class CpuBackend final : public Backend {
 public:
  // All hardware threads, unless OMP_NUM_THREADS asks for fewer (a shared machine, a pinned run).
  CpuBackend() : threads_(cpu::default_threads()) { cpu::set_threads(threads_); }

  BackendInfo info() const override {
    BackendInfo i;
    i.backend = "cpu";
    i.device_name = cpu_model_name() + " (" + std::to_string(threads_) + (threads_ == 1 ? " thread)" : " threads)");
    i.driver_version = "-";
    i.library_versions = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) +
                         "." + std::to_string(EIGEN_MINOR_VERSION) + ", " + openmp_version();
    i.compute_units = threads_;
    i.memory_bytes = meminfo_bytes("MemTotal");
    return i;
  }

  std::string unsupported(const Op& op) const override {
    std::string why = cpu::unsupported_reason(op);
    if (why.empty()) why = memory_shortfall(cpu::op_buffer_bytes(op));
    return why;
  }

  // With options.flush_cache every run finds the op's operands cold (evicted from every cache
  // level), as in a step whose other ops have run since; without, an op repeats on the buffers its
  // previous run left in the caches.
  Timing time_op(const Op& op, const TimingOptions& options) override {
    validate(options);
    if (std::string why = unsupported(op); !why.empty()) return unsupported_timing(why);
    if (std::string why = clock_unsupported(options); !why.empty()) return unsupported_timing(why);
    const auto cpu_op = cpu::make_cpu_op(op, next_seed());
    return summarize_timings(repeat_timed(options, [&] { return timed_run(*cpu_op, options); }));
  }

  SequenceTiming time_sequence(std::span<const Op> ops, const TimingOptions& options) override {
    validate(options);
    SequenceTiming result = check_sequence(ops, options);
    if (!result.supported) return result;
    // Every op keeps its own buffers, as a training step's ops do.
    std::vector<std::unique_ptr<cpu::CpuOp>> cpu_ops;
    for (const Op& op : ops) cpu_ops.push_back(cpu::make_cpu_op(op, next_seed()));
    if (options.sequence_ops_alone)
      for (size_t i = 0; i < cpu_ops.size(); ++i)
        result.per_op[i] = summarize_timings(repeat_timed(options, [&] { return timed_run(*cpu_ops[i], options); }));
    // The sequence as a step runs it: with flush_cache after the caches were filled with other
    // data (as the GPU backends flush L2 once before the list), a clock read between ops: each op's
    // time in the sequence, and the total less the reads' own cost.
    std::vector<std::vector<double>> in_sequence(cpu_ops.size());
    const std::vector<double> totals_s = repeat_timed(options, [&] {
      if (options.flush_cache) evict_caches();
      std::vector<double> marks(cpu_ops.size() + 1);
      marks[0] = now_s(options);
      for (size_t i = 0; i < cpu_ops.size(); ++i) {
        cpu_ops[i]->run();
        marks[i + 1] = now_s(options);
      }
      for (size_t i = 0; i < cpu_ops.size(); ++i) in_sequence[i].push_back(interval_s(options, marks[i], marks[i + 1]));
      return interval_s(options, marks[0], marks.back(), cpu_ops.size() - 1);
    });
    result.total_median_s = median(totals_s);
    // The warm-up runs' entries come first: left out, as repeat_timed leaves them out.
    for (auto& v : in_sequence) {
      const auto warm = static_cast<std::ptrdiff_t>(v.size() - totals_s.size());
      result.in_sequence.push_back(summarize_timings(std::vector<double>(v.begin() + warm, v.end())));
    }
    return result;
  }

  bool times_in_sequence() const override { return true; }

  CheckResult check_op(const Op& op) override {
    CheckResult result;
    if (std::string why = unsupported(op); !why.empty()) {
      result.supported = false;
      result.reason = why;
      return result;
    }
    result.max_rel_error = cpu::make_cpu_op(op, next_seed())->check();
    return result;
  }

 private:
  static Timing unsupported_timing(const std::string& why) {
    Timing t;
    t.supported = false;
    t.reason = why;
    return t;
  }

  static double timed_run(cpu::CpuOp& op, const TimingOptions& options) {
    if (options.flush_cache) op.evict_operands();
    const double start_s = now_s(options);
    op.run();
    return elapsed_s(options, start_s);
  }

  // The clock TimingOptions asks for: the host's monotonic clock, or the thread's CPU clock.
  static double now_s(const TimingOptions& options) {
    return options.thread_cpu_clock ? thread_cpu_seconds() : host_seconds();
  }
  static double elapsed_s(const TimingOptions& options, double start_s) {
    return interval_s(options, start_s, now_s(options));
  }
  // Seconds between two readings of the clock with `reads` more readings between them (each
  // thread CPU clock reading costs thread_clock_cost_s, left out).
  static double interval_s(const TimingOptions& options, double start_s, double end_s, size_t reads = 0) {
    if (!options.thread_cpu_clock) return end_s - start_s;
    return std::max(0.0, end_s - start_s - (1.0 + static_cast<double>(reads)) * thread_clock_cost_s());
  }

  // The thread CPU clock sees only the calling thread's work.
  std::string clock_unsupported(const TimingOptions& options) const {
    if (!options.thread_cpu_clock || threads_ == 1) return "";
    return "the thread CPU clock times one thread; this backend runs " + std::to_string(threads_) +
           " (OMP_NUM_THREADS=1, or time by the monotonic clock)";
  }

  // Whether every op of the sequence runs here and their buffers fit together; per_op sized.
  SequenceTiming check_sequence(std::span<const Op> ops, const TimingOptions& options) const {
    SequenceTiming result;
    if (std::string why = clock_unsupported(options); !why.empty()) {
      result.supported = false;
      result.reason = why;
      return result;
    }
    double bytes = 0;
    for (const Op& op : ops) {
      const std::string why = cpu::unsupported_reason(op);
      if (!why.empty() && result.supported) {
        result.supported = false;
        result.reason = name_of(op) + ": " + why;
      }
      result.per_op.push_back(why.empty() ? Timing{} : unsupported_timing(why));
      bytes += cpu::op_buffer_bytes(op);
    }
    if (result.supported) {
      if (std::string why = memory_shortfall(bytes); !why.empty()) {
        result.supported = false;
        result.out_of_memory = true;
        result.reason = "the sequence's buffers: " + why;
      }
    }
    return result;
  }

  // Fills the caches with other, dirty data, as a step's earlier ops leave them for the next: an
  // in-place pass over twice the L2 and L3 the OS reports, within 32 to 64 MiB. The cap is one
  // core's share of a large shared L3 (a Zen CCD's is 32 MiB; this development VM reports its
  // host's 508 MiB, while one core's bandwidth falls to the memory's beyond ~16 MiB) and keeps the
  // pass at ~2 ms, once per run of a sequence.
  void evict_caches() {
    if (evictor_.empty()) evictor_.assign(static_cast<size_t>(evictor_bytes() / sizeof(float)), 1.0f);
    float* x = evictor_.data();
    const size_t n = evictor_.size();
    for (size_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] + 0.5f;
  }
  static double evictor_bytes() {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const double caches = 2.0 * static_cast<double>(std::max(0L, l2) + std::max(0L, l3));
    return std::clamp(caches, 32.0 * (1 << 20), 64.0 * (1 << 20));
  }

  static std::string memory_shortfall(double bytes) {
    const double available = meminfo_bytes("MemAvailable");
    if (available <= 0 || bytes <= kUsableMemoryShare * available) return "";
    return "its buffers need " + gib(bytes) + ", more than " + gib(kUsableMemoryShare * available) +
           " (80% of the memory available)";
  }

  // Each op's buffers get their own seeds (an op uses up to 16 consecutive ones): fresh values for
  // every op, the same values in every run of the program.
  uint64_t next_seed() {
    seed_ += 16;
    return seed_;
  }

  int threads_;
  uint64_t seed_ = 0x5eed;
  std::vector<float> evictor_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tpsim
