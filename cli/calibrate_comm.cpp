// tpsim calibrate comm: time all-gather, reduce-scatter and all-reduce across the ranks of an MPI
// job and fit the cost model's link efficiency and per-step latency of every link tier the job
// spans (calibrate/comm_calibration.hpp), then write the profile with the measurements and the fit.
//
//   mpirun -np N tpsim calibrate comm --backend cpu|cuda [--base PROFILE] --out PROFILE.json
//                                     [--sizes 4Ki..256Mi] [--budget 30]
//
// Every rank runs this command; the flags are checked on every rank alike within the job's
// agreement, so that a bad value is one line from rank 0 and a failure on every rank.
#include <cmath>
#include <iostream>
#include <memory>

#include "calibrate/comm_calibration.hpp"
#include "io/calibration_report.hpp"
#include "io/error.hpp"
#include "io/profile_io.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "io/text_format.hpp"

namespace tpsim {
namespace {

struct CalibrateCommFlags {
  std::string backend;        // "cpu": MPI on host buffers; "cuda": NCCL on GPU buffers
  std::string base;           // profile to start from
  std::string out;            // profile to write
  std::string sizes;          // full-buffer sizes in bytes; "": kCpuSizes or kGpuSizes
  std::string budget = "30";  // seconds of timed collectives to aim for, all sizes and kinds
};

// The defaults of default_comm_sizes, as --help shows them.
constexpr const char* kCpuSizes = "4Ki..64Mi";
constexpr const char* kGpuSizes = "4Ki..1Gi";

// "4Ki..256Mi" (powers of two, both ends included and powers of two themselves) or "4096,1Mi,64Mi".
std::vector<double> parse_sizes(const std::string& flag, const std::string& text) {
  if (text.empty()) throw Error(flag + ": empty value");
  std::vector<double> sizes;
  if (const size_t dots = text.find(".."); dots != std::string::npos) {
    const double lo = parse_bytes(flag, text.substr(0, dots)), hi = parse_bytes(flag, text.substr(dots + 2));
    const auto power_of_two = [](double b) { return std::exp2(std::round(std::log2(b))) == b; };
    if (!power_of_two(lo) || !power_of_two(hi))
      throw Error(flag + " '" + text + "': a range steps by powers of two, so both ends must be powers of two");
    if (lo > hi) throw Error(flag + " '" + text + "': reversed range");
    for (double b = lo; b <= hi; b *= 2) sizes.push_back(b);
    return sizes;
  }
  for (const std::string& item : parse_name_list(flag, text)) sizes.push_back(parse_bytes(flag, item));
  return sizes;
}

double parse_budget(const std::string& text) {
  const std::optional<double> v = parse_number(text);
  if (!v || !std::isfinite(*v) || !(*v > 0))
    throw Error("--budget '" + text + "': expected a positive number of seconds");
  return *v;
}

CommCalibrationOptions comm_options(const CalibrateCommFlags& f) {
  if (f.backend.empty()) throw Error("--backend: required (cpu: MPI between the CPU ranks; cuda: NCCL between GPUs)");
  const auto b = parse_backend(f.backend);
  if (!b || *b == BackendKind::kHip)
    throw Error("--backend '" + f.backend + "': expected cpu (MPI between the CPU ranks) or cuda (NCCL between GPUs)");
  CommCalibrationOptions o;
  o.backend = *b;
  o.base_path = f.base;
  o.out_path = f.out;
  o.sizes_bytes =
      parse_sizes("--sizes", f.sizes.empty() ? (o.backend == BackendKind::kCpu ? kCpuSizes : kGpuSizes) : f.sizes);
  o.budget_s = parse_budget(f.budget);
  return o;
}

void run_calibrate_comm(const CalibrateCommFlags& f, const std::string& command_line) {
  CommJob job;
  CommCalibrationOptions o;
  job.agree([&] { o = comm_options(f); });
  const CommCalibration c = calibrate_comm(o, job, [&](const CommCalibration& result) {
    DeviceProfile profile = result.profile;
    profile.extra["comm"] = comm_calibration_json(result, command_line);
    save_profile(o.out_path, profile);
  });
  if (job.rank() == 0) print_comm_calibration(std::cerr, c, o.out_path);
}

}  // namespace

void register_calibrate_comm(CLI::App& calibrate) {
  auto o = std::make_shared<CalibrateCommFlags>();
  auto* comm = calibrate.add_subcommand(
      "comm", "time collectives across the ranks of an MPI job (mpirun -np N) and fit link efficiency and latency");
  // Checked in the callback, not by CLI11, so that a bad value is one line from rank 0, not one per rank.
  comm->add_option("--backend", o->backend, "cpu (MPI between CPU ranks) or cuda (NCCL between GPUs); required");
  comm->add_option("--base", o->base, "profile to start from (default for cpu: data/profiles/defaults/cpu.json)");
  comm->add_option("--out", o->out, "profile to write (atomically, by rank 0); required");
  comm->add_option("--sizes", o->sizes,
                   "full-buffer sizes in bytes: a range of powers of two or a list (default: " +
                       std::string(kCpuSizes) + " on the CPU, " + kGpuSizes + " on GPUs)");
  comm->add_option("--budget", o->budget, "seconds of timed collectives to aim for in all")->default_val("30");
  comm->callback([o] {
    std::string cmdline = "tpsim calibrate comm --backend " + o->backend;
    if (!o->base.empty()) cmdline += " --base " + o->base;
    cmdline += " --out " + o->out + (o->sizes.empty() ? "" : " --sizes " + o->sizes) + " --budget " + o->budget;
    run_calibrate_comm(*o, cmdline);
  });
}

}  // namespace tpsim
