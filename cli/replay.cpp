// tpsim replay: run the op sequence of one training step of a configuration on one device with a
// measurement backend, and set the measured time beside what the cost model predicts for the same
// ops from the device's profile, op by op and in total (calibrate/replay.hpp).
//
// The command: flags -> ReplayOptions -> the step's ops -> the backend (on the CPU with the thread
// count and clock the profile was measured with) and the device's profile -> replay_step -> the
// tables (io/calibration_report.hpp).
#include <iostream>
#include <memory>

#include "calibrate/kernel_device.hpp"
#include "calibrate/kernel_measure.hpp"
#include "calibrate/replay.hpp"
#include "io/calibration_report.hpp"
#include "io/error.hpp"
#include "io/text_format.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/run_settings.hpp"

namespace tpsim {
namespace {

struct ReplayFlags {
  CommonOptions common;
  std::string backend;
  int device_index = 0;
  std::string model;
  std::string seq;
  std::string micro_batch;
  std::string layers;               // empty: all of the model's
  std::optional<std::string> ckpt;  // unset: none
  std::string precision;            // empty: fp32 on the CPU, amp_bf16 on a GPU
};

// The device's backend and id: on the CPU with the thread count and clock of the profile
// `calibrate kernels` wrote (it carries the CPU's spec); on a GPU the datasheet device's, if any.
std::unique_ptr<Backend> replay_backend(Context& ctx, BackendKind kind, int index, ReplayOptions& o,
                                        std::string& device_id) {
  if (o.gpu) {
    std::unique_ptr<Backend> backend = make_backend(kind, index);
    device_id = matching_datasheet_device(backend->info());
    if (device_id.empty()) device_id = sanitized_device_id(backend->info().device_name);
    return backend;
  }
  device_id = "cpu";
  if (!ctx.has_user_profile(device_id))
    throw Error(
        "--profile: the CPU has no datasheet; give the profile `tpsim calibrate kernels --backend cpu` "
        "wrote for this machine");
  o.threads = calibrated_cpu_threads(ctx.profile(device_id)).value_or(1);
  o.thread_clock = calibrated_with_thread_clock(ctx.profile(device_id));
  o.reference = calibrated_reference(ctx.profile(device_id));
  set_cpu_backend_threads(o.threads);
  return make_backend(kind, index);
}

void run_replay(const ReplayFlags& f) {
  const auto kind = parse_backend(f.backend);
  if (!kind) throw Error("--backend '" + f.backend + "': expected cpu, cuda or hip");
  ReplayOptions o;
  o.gpu = *kind != BackendKind::kCpu;
  Context ctx(f.common);
  o.model = ctx.catalog().get(f.model);
  o.step.seq_len = parse_count("--seq", f.seq, kMaxSeqLen);
  o.step.micro_batch = parse_count("--micro-batch", f.micro_batch, 1 << 20);
  o.step.layers = f.layers.empty() ? o.model.n_layers : parse_count("--layers", f.layers, 1 << 16);
  o.step.checkpointing = f.ckpt ? parse_ckpt_flag(*f.ckpt, /*any_allowed=*/false).front() : Checkpointing::kNone;
  const std::string precision_text = !f.precision.empty() ? f.precision : (o.gpu ? "amp_bf16" : "fp32");
  o.step.precision = parse_precision_flag("--precision", precision_text);
  const std::vector<StepOp> ops = replay_ops(o);

  std::string device_id;
  const std::unique_ptr<Backend> backend = replay_backend(ctx, *kind, f.device_index, o, device_id);
  const BackendInfo info = backend->info();
  const DeviceSpec& device = ctx.device(device_id);
  const DeviceProfile& profile = ctx.profile(device_id);
  // Every op must run here: a format the backend lacks is one line naming it.
  for (const StepOp& s : ops)
    if (std::string why = backend->unsupported(s.op); !why.empty())
      throw Error("--precision " + precision_text + ": the " + info.backend + " backend cannot run " + s.op.name +
                  " (" + why + ")" + (o.gpu ? "" : "; the CPU backend runs fp32 only: --precision fp32"));
  std::cerr << "tpsim replay: " << o.model.name << ", seq " << o.step.seq_len << ", micro-batch " << o.step.micro_batch
            << ", " << o.step.layers << " of " << o.model.n_layers << " blocks"
            << (o.step.checkpointing != Checkpointing::kNone ? ", " + checkpointing_phrase(o.step.checkpointing) : "")
            << ", " << precision_text << ", " << ops.size() << " ops on " << info.device_name << "\n";
  if (profile.params.compute_clock_ratio != 1.0)
    std::cerr << "  costed at the kernel runs' clock: the profile's compute_clock_ratio "
              << fixed(profile.params.compute_clock_ratio, 3) << " is a long training run's, not one step's\n";
  const Replay r = replay_step(o, ops, *backend, device, profile.params);
  emit(render_replay(r, o, precision_text, info.backend, device_id, ctx.output_options()), ctx.output());
  ctx.print_notes();
}

}  // namespace

void register_replay(CLI::App& app) {
  auto o = std::make_shared<ReplayFlags>();
  auto* cmd = app.add_subcommand("replay", "run one training step's ops on a backend and compare with the prediction");
  cmd->add_option("--backend", o->backend, "measurement backend: cpu, cuda or hip")->required();
  cmd->add_option("--device-index", o->device_index, "which GPU (cuda, hip); the CPU is device 0")->default_val(0);
  cmd->add_option("--model", o->model, "model name (catalogue or --models file)")->required();
  cmd->add_option("--seq", o->seq, "sequence length")->required();
  cmd->add_option("--micro-batch", o->micro_batch, "sequences per step")->required();
  cmd->add_option("--layers", o->layers, "blocks to run (1..n_layers; the block part is scaled by n_layers / K)");
  add_ckpt_flags(cmd, o->ckpt, /*any=*/false);
  cmd->add_option(
      "--precision", o->precision,
      "amp_bf16, amp_fp16, amp_fp8, bf16, fp32, mxfp8 or nvfp4 (default: fp32 on the CPU, amp_bf16 on a GPU)");
  add_common_options(cmd, o->common);
  cmd->callback([o] { run_replay(*o); });
}

}  // namespace tpsim
