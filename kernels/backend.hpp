// Measurement backends: run the ops the simulator costs (model/ops.hpp) on real hardware and time
// them. One interface, one implementation per backend:
//   cpu/   Eigen, real and run everywhere; its plain reference kernels (reference.hpp) check the
//          CPU kernels and, on a GPU, the CUDA and HIP ones.
//   cuda/  cuBLASLt GEMMs, fused attention, own memory-bound kernels; NCCL collectives.
//   hip/   the CUDA sources through a header of renames, built with hipcc.
// make_backend() is the factory; a backend this build lacks is a clear Error, not a crash.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/ops.hpp"

namespace tpsim {

enum class BackendKind : uint8_t { kCpu, kCuda, kHip };
std::optional<BackendKind> parse_backend(std::string_view s);  // "cpu", "cuda", "hip"
std::string_view to_string(BackendKind k);

// How an op is timed. Every run uses fresh random inputs (never zeros) allocated once per op.
struct TimingOptions {
  int warmup = 3;             // runs discarded before timing
  int min_repetitions = 5;    // timed runs, at least
  int max_repetitions = 200;  // and at most
  double min_seconds = 0.02;  // keep repeating until this much time is measured
  double max_seconds = 1.0;   // stop repeating after this much
  // Before each run (warm-up and timed), leave the op's operands cold: GPU backends overwrite a
  // buffer larger than L2; the CPU backend writes the op's own buffers back and drops them from
  // every cache level (cpu::CpuOp::evict_operands), which costs about what reading them once does.
  bool flush_cache = true;
  // CPU backend running one thread: time each run by the calling thread's CPU clock
  // (CLOCK_THREAD_CPUTIME_ID, less the clock's own cost) instead of the host's monotonic clock,
  // so that time the OS gives other processes on a shared machine is not counted. On an idle
  // machine the two agree. With more threads the CPU backend reports runs unsupported; GPU
  // backends time with events and ignore it.
  bool thread_cpu_clock = false;
  // time_sequence: also time each op on its own (SequenceTiming::per_op); false leaves per_op's
  // timings empty where the backend times ops inside the sequence (times_in_sequence).
  bool sequence_ops_alone = true;
};

struct Timing {
  bool supported = true;  // false: this backend cannot run the op (reason says why)
  std::string reason;
  double median_s = 0;          // median of the timed runs
  double p10_s = 0, p90_s = 0;  // spread
  int repetitions = 0;
};

// A whole sequence of ops run back to back, as one step runs them.
struct SequenceTiming {
  bool supported = true;
  std::string reason;          // the first op the backend cannot run
  bool out_of_memory = false;  // unsupported because every op's buffers at once exceed the device's
  double total_median_s = 0;   // the sequence end to end, median of the timed runs
  std::vector<Timing> per_op;  // each op timed on its own
  // Each op inside the timed runs of the sequence (after the ops before it, as in a step): median,
  // p10, p90, runs; empty when the backend does not time ops inside the sequence.
  std::vector<Timing> in_sequence;
};

struct CheckResult {
  bool supported = true;
  std::string reason;
  double max_rel_error = 0;  // over the outputs, against the reference, relative to their scale
};

struct BackendInfo {
  std::string backend;           // "cpu", "cuda", "hip"
  std::string device_name;       // e.g. "Intel Xeon ... (2 threads)", "NVIDIA H100 80GB HBM3"
  std::string driver_version;    // e.g. "CUDA driver 13.0"; "-" on the CPU
  std::string library_versions;  // e.g. "Eigen 3.4.0"; "cuBLASLt 13.0.0, cuDNN 9.12, NCCL 2.27"
  int compute_units = 0;         // threads (CPU) or SMs / CUs
  double memory_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendInfo info() const = 0;

  // "" when the backend can run `op` (kind, memory-bound kind and number format), else why not.
  virtual std::string unsupported(const Op& op) const = 0;

  // Runs the op on fresh random inputs of its shape and times it.
  virtual Timing time_op(const Op& op, const TimingOptions& options) = 0;

  // Runs the ops in order, back to back, and times the whole and each op.
  virtual SequenceTiming time_sequence(std::span<const Op> ops, const TimingOptions& options) = 0;
  // Whether time_sequence times each op inside the sequence (SequenceTiming::in_sequence): the
  // CPU backend does; the GPU backends time each op alone after an L2 flush.
  virtual bool times_in_sequence() const { return false; }

  // Runs the op on fresh random inputs and compares its outputs with the plain reference kernels.
  virtual CheckResult check_op(const Op& op) = 0;
};

// The backend of `kind` on device `index`; Error when this build has no such backend or no such
// device ("this build has no CUDA backend (CUDA toolkit not found at configure time)").
std::unique_ptr<Backend> make_backend(BackendKind kind, int index = 0);

// Which backends this build has.
bool backend_built(BackendKind kind);

// Why no backend runs `op` as the simulator costs it yet, or "": a grouped GEMM (the experts of a
// mixture of experts: `batch` groups) and sliding-window attention (a window `k` shorter than the
// sequence) would otherwise run as one plain GEMM and as full causal attention, timing other work;
// the Mamba-2 mixer's kernels have no implementation in any backend yet.
// Inline: the CPU, CUDA and HIP backend libraries each call it without linking the others.
inline std::string unsupported_by_every_backend(const Op& op) {
  if (op.kind == OpKind::kGemm && op.batch > 1)
    return "a grouped GEMM of " + std::to_string(op.batch) +
           " groups (mixture-of-experts experts): no backend runs it yet";
  if (op.kind == OpKind::kMemoryBound &&
      (op.mem == MemKind::kCausalConv1d || op.mem == MemKind::kCausalConv1dBackward || op.mem == MemKind::kSsdScan ||
       op.mem == MemKind::kSsdScanBackward || op.mem == MemKind::kGatedRmsNorm ||
       op.mem == MemKind::kGatedRmsNormBackward || op.mem == MemKind::kGatedDeltaRule ||
       op.mem == MemKind::kGatedDeltaRuleBackward))
    return "a Mamba-2 or Gated DeltaNet mixer's kernel (convolution, chunked scan or delta rule, gated norm): no "
           "backend runs it yet";
  if ((op.kind == OpKind::kAttentionFwd || op.kind == OpKind::kAttentionBwd) && op.k > 0 && op.k < op.seq)
    return "sliding-window attention (window " + std::to_string(op.k) + " of " + std::to_string(op.seq) +
           " positions): no backend runs it yet";
  return "";
}

}  // namespace tpsim
