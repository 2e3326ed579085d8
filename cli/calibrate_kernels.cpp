// tpsim calibrate kernels: time the kernels the simulator costs on a measurement backend (CPU,
// CUDA, HIP), fit the cost model's kernel-level parameters to them with Ceres, check the fit on
// held-out shapes, and write a profile whose fitted parameters say "kernel" with the backend, date
// and number of measurements; everything else keeps the base profile's value and provenance.
//
// The command: flags -> KernelCalibrationOptions, checked -> the backend ->
// calibrate_kernels (calibrate/kernel_calibration.hpp) -> the profile with its record
// (io/calibration_report.hpp) -> the brief report on stderr.
#include <iostream>
#include <memory>

#include "calibrate/kernel_calibration.hpp"
#include "io/calibration_report.hpp"
#include "io/error.hpp"
#include "io/profile_io.hpp"
#include "io/text_format.hpp"
#include "kernels/timing.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"

namespace tpsim {
namespace {

struct CalibrateKernelsFlags {
  std::string backend;
  int device_index = 0;
  double budget_s = 0;  // 0: the backend's default
  std::string base;
  std::string out;
  std::vector<std::string> models;  // names, ranges, or a models YAML file
  std::string seq;                  // empty: the backend's default
  std::string micro_batches;
  int threads = 1;
  std::string clock;  // CPU: "cpu" (the thread's CPU clock) or "wall"; empty: cpu on one thread
};

void run_calibrate_kernels(const CalibrateKernelsFlags& f, const std::string& command_line) {
  KernelCalibrationOptions o;
  o.started_s = host_seconds();
  const auto kind = parse_backend(f.backend);
  if (!kind) throw Error("--backend '" + f.backend + "': expected cpu, cuda or hip");
  o.backend = *kind;
  o.device_index = f.device_index;
  o.threads = f.threads;
  o.clock = f.clock;
  o.budget_s = f.budget_s;
  if (const std::string why = o.check(); !why.empty()) throw Error(why);
  // The sweep's models: names and ranges from the catalogue, a YAML file's models added to it.
  CommonOptions common;
  const std::vector<std::string> specs = take_models_file(f.models, common);
  Context ctx(common);
  const std::vector<std::string> model_names = ctx.select_models(specs, o.gpu() ? "125m..70b" : "tiny");
  if (!f.seq.empty()) o.seq_lens = parse_count_list("--seq", f.seq, kMaxSeqLen);
  if (!f.micro_batches.empty()) o.micro_batches = parse_count_list("--micro-batch", f.micro_batches, 1 << 20);
  for (const auto& name : model_names) o.models.push_back(ctx.catalog().get(name));
  // The base profile, read before anything is measured so that a bad file fails at once.
  if (!f.base.empty()) o.base = load_profile(f.base);
  o.base_path = f.base;
  o.log = &std::cerr;
  o.progress = true;

  const std::unique_ptr<Backend> backend = make_calibration_backend(o);
  const BackendInfo info = backend->info();
  std::cerr << "tpsim calibrate kernels: " << info.backend << ", " << info.device_name << " (" << info.library_versions
            << ")\n";
  KernelCalibration c = calibrate_kernels(o, *backend);
  c.profile.extra["kernel_calibration"] = kernel_calibration_json(c, command_line);
  save_profile(f.out, c.profile);
  print_kernel_calibration(std::cerr, c, f.out, host_seconds() - o.started_s);
  ctx.print_notes();
}

}  // namespace

void register_calibrate_kernels(CLI::App& calibrate) {
  auto o = std::make_shared<CalibrateKernelsFlags>();
  auto* cmd =
      calibrate.add_subcommand("kernels", "time kernels on a backend and fit the kernel-level parameters to them");
  cmd->add_option("--backend", o->backend, "measurement backend: cpu, cuda or hip")->required();
  cmd->add_option("--device-index", o->device_index, "which GPU (cuda, hip); the CPU is device 0")->default_val(0);
  cmd->add_option("--budget", o->budget_s,
                  "wall-clock seconds for the whole calibration (default: 60 on the CPU, 600 on a GPU)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--base", o->base,
                  "profile whose values kernel runs do not measure are kept (default: the device's reasoned default; "
                  "data/profiles/defaults/cpu.json on the CPU)");
  cmd->add_option("--out", o->out, "profile to write (atomically)")->required();
  cmd->add_option("--models", o->models,
                  "models whose shapes are measured: names, ranges (125m..1b) or a models YAML file (default: tiny on "
                  "the CPU, 125m..70b on a GPU)");
  cmd->add_option("--seq", o->seq,
                  "sequence lengths of the sweep (default: 128,256,512 on the CPU, 512,2048,8192 on a GPU)");
  cmd->add_option("--micro-batch", o->micro_batches,
                  "micro-batches of the sweep (default: 1,2,4 on the CPU, 1,4 on a GPU)");
  cmd->add_option("--threads", o->threads,
                  "CPU threads the kernels use (default 1: on a shared machine a descheduled second thread stalls "
                  "every parallel region); replay uses the profile's count")
      ->default_val(1);
  cmd->add_option("--clock", o->clock,
                  "CPU: cpu (the thread's CPU time; only with --threads 1, the default then) or wall (the "
                  "monotonic clock; the default with more threads)");
  cmd->callback([o] {
    std::string cmdline = "tpsim calibrate kernels --backend " + o->backend;
    if (o->device_index != 0) cmdline += " --device-index " + std::to_string(o->device_index);
    if (o->budget_s > 0) cmdline += " --budget " + fixed(o->budget_s, 0);
    if (!o->base.empty()) cmdline += " --base " + o->base;
    for (const auto& m : o->models) cmdline += " --models " + m;
    if (!o->seq.empty()) cmdline += " --seq " + o->seq;
    if (!o->micro_batches.empty()) cmdline += " --micro-batch " + o->micro_batches;
    if (o->threads != 1) cmdline += " --threads " + std::to_string(o->threads);
    if (!o->clock.empty()) cmdline += " --clock " + o->clock;
    cmdline += " --out " + o->out;
    run_calibrate_kernels(*o, cmdline);
  });
}

}  // namespace tpsim
