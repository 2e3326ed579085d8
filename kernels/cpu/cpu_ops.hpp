// One op of the simulator (model/ops.hpp) made runnable on the CPU: its buffers, allocated once and
// filled with random values, and the kernel that runs on them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/ops.hpp"

namespace tpsim::cpu {

// Why the CPU kernels cannot run `op`, "" when they can: only fp32 (the kernels are Eigen and
// vectorised fp32 loops; bf16/fp16/fp8/tf32 arithmetic needs a GPU backend), and for a cast
// only fp32 <-> bf16 conversions. Does not look at the shape (make_cpu_op checks it).
std::string unsupported_reason(const Op& op);

// Bytes of the buffers make_cpu_op allocates for `op`; check() allocates about as much again.
double op_buffer_bytes(const Op& op);

class CpuOp {
 public:
  virtual ~CpuOp() = default;
  // The fast kernel on the op's buffers. Ops that work in place (cross-entropy, scale, AdamW) keep
  // their values bounded over any number of runs: no drift into infinities or denormals.
  virtual void run() = 0;
  // Runs the fast kernel and the reference (kernels/reference.hpp) on the same inputs and returns
  // the largest relative error over the outputs (max_relative_error).
  virtual double check() = 0;
  // Writes the op's buffers back to memory and drops them from every cache level (clflushopt per
  // line on x86, dc civac on Arm; nothing elsewhere: can_evict_operands), so that its next run
  // finds its operands cold, as an op of a training step does once the ops before it have run.
  void evict_operands() const;

 private:
  friend std::unique_ptr<CpuOp> make_cpu_op(const Op& op, uint64_t seed);
  std::vector<std::pair<const void*, size_t>> buffers_;  // what the op allocated when it was made
};

// Whether evict_operands drops lines from the caches on this architecture.
bool can_evict_operands();

// The op with its buffers, filled from `seed` (the same seed gives the same values). Error when
// the shape is not positive or the op is not supported (unsupported_reason).
std::unique_ptr<CpuOp> make_cpu_op(const Op& op, uint64_t seed);

}  // namespace tpsim::cpu
