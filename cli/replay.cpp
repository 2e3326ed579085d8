// tpsim replay: run the op sequence of one training step of a configuration on one device with a
// measurement backend, and set the measured time beside what the cost model predicts for the same
// ops from the device's profile, op by op and in total.
//
// The chain: the model and step options -> the step's ops (calibrate/step_ops.hpp) -> the backend
// (on the CPU with the thread count the profile was measured with) -> Backend::time_sequence ->
// CostModel::op_seconds per op -> tables. With --layers K < n_layers the blocks' ops run K times
// and their part of the step is scaled by n_layers / K, in the measurement and the prediction alike.
#include <cmath>
#include <iostream>
#include <memory>

#include "calibrate/kernel_device.hpp"
#include "calibrate/kernel_measure.hpp"
#include "calibrate/kernel_plan.hpp"
#include "calibrate/step_ops.hpp"
#include "io/error.hpp"
#include "model/cost.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"

namespace tpsim {
namespace {

struct ReplayOptions {
  CommonOptions common;
  std::string backend;
  int device_index = 0;
  std::string model;
  std::string seq;
  std::string micro_batch;
  std::string layers;  // empty: all of the model's
  bool ckpt = false;
  std::string precision;  // empty: fp32 on the CPU, amp_bf16 on a GPU
};

// The whole step and each op are timed: a warm-up, then at least five runs, until 0.2 s are
// measured or 3 s spent (a whole step of a small model takes a fraction of a second on one core).
TimingOptions replay_timing(bool thread_cpu_clock) {
  TimingOptions t;
  t.warmup = 1;
  t.min_repetitions = 5;
  t.max_repetitions = 50;
  t.min_seconds = 0.2;
  t.max_seconds = 3.0;
  t.flush_cache = true;
  t.thread_cpu_clock = thread_cpu_clock;
  return t;
}

double error_percent(double predicted, double measured) { return 100.0 * (predicted / measured - 1.0); }

void run_replay(const ReplayOptions& o) {
  const auto kind = parse_backend(o.backend);
  if (!kind) throw Error("--backend '" + o.backend + "': expected cpu, cuda or hip");
  const bool gpu = *kind != BackendKind::kCpu;
  Context ctx(o.common);
  const ModelConfig& model = ctx.catalog().get(o.model);
  StepOptions step;
  step.seq_len = parse_count("--seq", o.seq, kMaxSeqLen);
  step.micro_batch = parse_count("--micro-batch", o.micro_batch, 1 << 20);
  step.layers = o.layers.empty() ? model.n_layers : parse_count("--layers", o.layers, 1 << 16);
  if (step.layers > model.n_layers)
    throw Error("--layers " + o.layers + ": model " + model.name + " has " + std::to_string(model.n_layers) +
                " blocks (1.." + std::to_string(model.n_layers) + ")");
  step.activation_checkpointing = o.ckpt;
  const std::string precision_text = !o.precision.empty() ? o.precision : (gpu ? "amp_bf16" : "fp32");
  const auto precision = parse_precision(precision_text);
  if (!precision) throw Error("--precision '" + precision_text + "': expected amp_bf16, amp_fp16, amp_fp8, bf16 or fp32");
  step.precision = *precision;
  const std::vector<StepOp> ops = training_step_ops(model, step);

  // The device's profile: on the CPU the one calibrate kernels wrote (it carries the CPU's spec and
  // the thread count its kernels were measured with); on a GPU the datasheet device's.
  std::unique_ptr<Backend> backend;
  std::string device_id;
  int threads = 0;
  bool thread_clock = false;
  if (!gpu) {
    device_id = "cpu";
    if (!ctx.has_user_profile(device_id))
      throw Error("--profile: the CPU has no datasheet; give the profile `tpsim calibrate kernels --backend cpu` "
                  "wrote for this machine");
    // The thread count and clock the profile's kernels were measured with.
    threads = calibrated_cpu_threads(ctx.profile(device_id)).value_or(1);
    thread_clock = calibrated_with_thread_clock(ctx.profile(device_id));
    set_cpu_backend_threads(threads);
    backend = make_backend(*kind, o.device_index);
  } else {
    backend = make_backend(*kind, o.device_index);
    device_id = matching_datasheet_device(backend->info());
    if (device_id.empty()) device_id = sanitized_device_id(backend->info().device_name);
  }
  const BackendInfo info = backend->info();
  const DeviceSpec& device = ctx.device(device_id);
  const DeviceProfile& profile = ctx.profile(device_id);

  // Every op must run here: a format the backend lacks is one line naming it.
  for (const StepOp& s : ops)
    if (std::string why = backend->unsupported(s.op); !why.empty())
      throw Error("--precision " + precision_text + ": the " + info.backend + " backend cannot run " + s.op.name +
                  " (" + why + ")" + (gpu ? "" : "; the CPU backend runs fp32 only: --precision fp32"));

  std::vector<Op> sequence;
  for (const StepOp& s : ops) sequence.push_back(s.op);
  std::cerr << "tpsim replay: " << model.name << ", seq " << step.seq_len << ", micro-batch " << step.micro_batch << ", "
            << step.layers << " of " << model.n_layers << " blocks" << (o.ckpt ? ", checkpointing" : "") << ", "
            << precision_text << ", " << sequence.size() << " ops on " << info.device_name << "\n";
  const SequenceTiming timing = backend->time_sequence(sequence, replay_timing(thread_clock));
  if (!timing.supported) throw Error("replay: " + timing.reason);

  const CostModel cost(device, profile.params);
  const double scale = static_cast<double>(model.n_layers) / static_cast<double>(step.layers);
  double block_measured = 0, block_predicted = 0, other_predicted = 0;
  OutputTable per_op;
  per_op.title = "Ops";
  per_op.columns = {"#", "Part", "Layer", "Op", "Shape", "Measured (s)", "Predicted (s)", "Error (%)"};
  for (size_t i = 0; i < ops.size(); ++i) {
    const StepOp& s = ops[i];
    const double measured = timing.per_op[i].median_s, predicted = cost.op_seconds(s.op);
    if (is_block_part(s.part)) {
      block_measured += measured;
      block_predicted += predicted;
    } else {
      other_predicted += predicted;
    }
    per_op.add_row({Cell::integer_value(static_cast<int64_t>(i)), Cell::str(std::string(to_string(s.part))),
                    s.layer >= 0 ? Cell::integer_value(s.layer) : Cell::empty(), Cell::str(s.op.name),
                    Cell::str(shape_text(s.op)), Cell::num(measured, 6), Cell::num(predicted, 6),
                    Cell::num(error_percent(predicted, measured), 1)});
  }
  // The sequence ran K blocks back to back; the other n_layers - K blocks are taken to cost what
  // the K did, op by op (each op timed alone).
  const double measured_step = timing.total_median_s + (scale - 1.0) * block_measured;
  const double predicted_step = other_predicted + scale * block_predicted;
  if (!(measured_step > 0) || !std::isfinite(measured_step)) throw Error("replay: the step was timed at " + std::to_string(measured_step) + " s");

  OutputTable total;
  total.title = "Step";
  total.columns = {"Model", "SeqLen (T)", "MicroBatchSize", "Activation Checkpointing", "Precision", "Backend",
                   "Device", "Threads", "Clock", "Blocks Run", "Blocks", "Block Scale", "Ops",
                   "Measured Step Time (s)", "Predicted Step Time (s)", "Error (%)"};
  total.add_row({Cell::str(model.name), Cell::integer_value(step.seq_len), Cell::integer_value(step.micro_batch),
                 Cell::flag(o.ckpt), Cell::str(precision_text), Cell::str(info.backend), Cell::str(device_id),
                 gpu ? Cell::empty() : Cell::integer_value(threads),
                 Cell::str(gpu ? "device events" : (thread_clock ? "thread CPU time" : "wall")),
                 Cell::integer_value(step.layers),
                 Cell::integer_value(model.n_layers), Cell::num(scale, 3), Cell::integer_value(static_cast<int64_t>(ops.size())),
                 Cell::num(measured_step, 6), Cell::num(predicted_step, 6),
                 Cell::num(error_percent(predicted_step, measured_step), 1)});

  // CSV: the step's one row (a table a script reads); md and JSON: the ops too.
  std::string text;
  if (ctx.format() == Format::kCsv) {
    text = render({total}, Format::kCsv);
  } else {
    text = render({total, per_op}, ctx.format());
    if (ctx.format() == Format::kMarkdown) {
      text += "\nMeasured: the sequence run end to end (median of its runs); each op's row is the op timed alone.\n";
      if (step.layers < model.n_layers)
        text += "Ran " + std::to_string(step.layers) + " of " + std::to_string(model.n_layers) +
                " blocks: the block ops' times are scaled by " + std::to_string(model.n_layers) + "/" +
                std::to_string(step.layers) + " in both the measured and the predicted step.\n";
    }
  }
  emit(text, ctx.output());
}

}  // namespace

void register_replay(CLI::App& app) {
  auto o = std::make_shared<ReplayOptions>();
  auto* cmd = app.add_subcommand("replay", "run one training step's ops on a backend and compare with the prediction");
  cmd->add_option("--backend", o->backend, "measurement backend: cpu, cuda or hip")->required();
  cmd->add_option("--device-index", o->device_index, "which GPU (cuda, hip); the CPU is device 0")->default_val(0);
  cmd->add_option("--model", o->model, "model name (catalogue or --models file)")->required();
  cmd->add_option("--seq", o->seq, "sequence length")->required();
  cmd->add_option("--micro-batch", o->micro_batch, "sequences per step")->required();
  cmd->add_option("--layers", o->layers, "blocks to run (1..n_layers; the block part is scaled by n_layers / K)");
  cmd->add_flag("--ckpt", o->ckpt, "activation checkpointing: each block's forward runs again before its backward");
  cmd->add_option("--precision", o->precision, "amp_bf16, amp_fp16, amp_fp8, bf16 or fp32 (default: fp32 on the CPU, amp_bf16 on a GPU)");
  add_common_options(cmd, o->common);
  cmd->callback([o] { run_replay(*o); });
}

}  // namespace tpsim
