#include "calibrate/replay.hpp"

#include <cmath>

#include "io/error.hpp"
#include "model/cost.hpp"

namespace tpsim {

std::string ReplayOptions::check() const {
  if (step.layers > model.n_layers)
    return "--layers " + std::to_string(step.layers) + ": model " + model.name + " has " +
           std::to_string(model.n_layers) + " blocks (1.." + std::to_string(model.n_layers) + ")";
  if (!gpu && threads < 1) return "--threads " + std::to_string(threads) + " must be at least 1";
  return "";
}

TimingOptions replay_timing(bool thread_cpu_clock) {
  return {.warmup = 1,
          .min_repetitions = 5,
          .max_repetitions = 50,
          .min_seconds = 0.2,
          .max_seconds = 3.0,
          .flush_cache = true,
          .thread_cpu_clock = thread_cpu_clock};
}

std::vector<StepOp> replay_ops(const ReplayOptions& options) {
  if (const std::string why = options.check(); !why.empty()) throw Error(why);
  StepOptions step = options.step;
  if (step.layers == 0) step.layers = options.model.n_layers;
  return training_step_ops(options.model, step);
}

Replay replay_step(const ReplayOptions& options, const std::vector<StepOp>& ops, Backend& backend,
                   const DeviceSpec& device, const CostParams& params) {
  Replay r;
  r.ops = ops;
  if (options.reference) {
    const Timing now = backend.time_op(options.reference->op, options.reference->timing);
    if (now.supported && now.median_s > 0) {
      r.reference_now_s = now.median_s;
      r.reference_calibrated_s = options.reference->median_s;
    }
  }
  std::vector<Op> sequence;
  for (const StepOp& s : ops) sequence.push_back(s.op);
  const SequenceTiming timing = backend.time_sequence(sequence, replay_timing(options.thread_clock));
  if (!timing.supported)
    throw Error("replay: " + timing.reason +
                (timing.out_of_memory
                     ? " (every op of the step keeps its own buffers, as no allocator reuses them here: "
                       "run fewer blocks with --layers K, or a smaller --micro-batch)"
                     : ""));
  r.sequence_s = timing.total_median_s;

  // One step on one device, as short as the kernel runs: costed at their clock, not a long run's.
  const CostParams at_run_clock = at_kernel_run_clock(params);
  const CostModel cost(device, at_run_clock);
  const int64_t layers = options.step.layers > 0 ? options.step.layers : options.model.n_layers;
  r.block_scale = static_cast<double>(options.model.n_layers) / static_cast<double>(layers);
  const bool in_step = timing.in_sequence.size() == ops.size();
  if (in_step)
    for (const Timing& t : timing.in_sequence) r.in_step_s.push_back(t.median_s);
  double block_measured = 0, block_predicted = 0, other_predicted = 0, block_alone = 0, other_alone = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    r.measured_s.push_back(timing.per_op[i].median_s);
    r.predicted_s.push_back(cost.op_seconds(ops[i].op));
    if (is_block_part(ops[i].part)) {
      block_measured += in_step ? r.in_step_s[i] : r.measured_s.back();
      block_alone += r.measured_s.back();
      block_predicted += r.predicted_s.back();
    } else {
      other_alone += r.measured_s.back();
      other_predicted += r.predicted_s.back();
    }
  }
  r.measured_step_s = timing.total_median_s + (r.block_scale - 1.0) * block_measured;
  r.predicted_step_s = other_predicted + r.block_scale * block_predicted;
  r.alone_step_s = other_alone + r.block_scale * block_alone;
  if (!(r.measured_step_s > 0) || !std::isfinite(r.measured_step_s))
    throw Error("replay: the step was timed at " + std::to_string(r.measured_step_s) + " s");
  return r;
}

}  // namespace tpsim
