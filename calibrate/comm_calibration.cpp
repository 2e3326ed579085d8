#include "calibrate/comm_calibration.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "calibrate/kernel_device.hpp"
#include "calibrate/kernel_measure.hpp"
#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/text_format.hpp"
#include "kernels/timing.hpp"
#include "model/ops.hpp"

namespace tpsim {
namespace {

// How long a rank waits for the others at an agreement before it ends the job: a minute, plus four
// times the longest step it has run (the nodes' same-node collectives run separately and may finish
// far apart; a rank that failed inside a collective leaves the others blocked, and only this
// wait ends the job then).
constexpr double kAgreeBase_s = 60;
constexpr double kAgreeStepFactor = 4;

// The buffer a communicator really runs for `bytes` over `ranks` (kernels/comm.hpp): whole fp32
// elements that split evenly over the ranks, at least one per rank.
double collective_bytes(double bytes, int64_t ranks) {
  const auto per_rank = std::max<int64_t>(1, static_cast<int64_t>(bytes / 4.0 / static_cast<double>(ranks)));
  return 4.0 * static_cast<double>(per_rank * ranks);
}

// What rank 0 knows before measuring: the profile to start from and the device whose links the
// efficiencies are relative to.
struct Start {
  DeviceProfile base;
  DeviceSpec device;
  bool embed_spec = false;        // the output carries the device spec (no datasheet file describes it)
  bool measure_cpu_spec = false;  // the spec is still to be measured here (measured_cpu_spec)
  std::string device_note;        // how the spec was obtained, for the report
};

// Threads and timing of the CPU probes below: one thread, as an MPI rank copies a message with one
// thread, timed by that thread's CPU clock so that time a shared machine gives other processes is
// not counted (kernels/backend.hpp).
TimingOptions cpu_probe_timing() {
  return {.warmup = 1,
          .min_repetitions = 5,
          .max_repetitions = 50,
          .min_seconds = 0.01,
          .max_seconds = 0.25,
          .thread_cpu_clock = true};
}

// The CPU probes' buffer: 256 MiB, as calibrate kernels' (most of it beyond the caches).
constexpr double kCpuCopyBytes = 256.0 * (1 << 20);
// The CPU's measured "peak": an fp32 GEMM of this size, large enough for Eigen's blocked kernel
// to run at its asymptotic rate on one core.
constexpr int64_t kCpuPeakGemmSide = 1024;

// The spec of this machine's CPU when the base profile carries none, built as tpsim calibrate
// kernels builds it (calibrate/kernel_device.hpp: the CPU backend's report and its measured copy
// bandwidth), with the fp32 peak one large GEMM reaches in place of its kernel fit's rate.
DeviceSpec measured_cpu_spec(const std::string& id) {
  set_cpu_backend_threads(1);
  const std::unique_ptr<Backend> backend = make_backend(BackendKind::kCpu);
  const BackendInfo info = backend->info();
  const TimingOptions timing = cpu_probe_timing();
  DeviceSpec spec = measured_device_spec(id, info, measure_copy_bandwidth(*backend, kCpuCopyBytes, timing), false);
  const Op gemm =
      gemm_op("calibrate_comm.peak_gemm", kCpuPeakGemmSide, kCpuPeakGemmSide, kCpuPeakGemmSide, DType::kFp32, 4.0, 4.0);
  const Timing t = backend->time_op(gemm, timing);
  if (!t.supported) throw Error("the CPU's fp32 GEMM: " + t.reason);
  spec.peak_flops_per_s[static_cast<int>(DType::kFp32)] = gemm.flops / t.median_s;
  spec.sources["peak_dense_tflops.fp32"] = "kernel run: one fp32 GEMM of " + std::to_string(kCpuPeakGemmSide) +
                                           "^3 on one thread by tpsim calibrate comm (" + info.device_name + ", " +
                                           utc_timestamp().substr(0, 10) +
                                           "); measured, not a datasheet peak (there is none)";
  return spec;
}

bool has_datasheet(const std::string& id) {
  const std::vector<std::string> known = known_devices();
  return std::find(known.begin(), known.end(), id) != known.end();
}

// The fastest network interface of this node that reports its speed (/sys/class/net/<if>/speed,
// Mb/s; virtual interfaces report none), in bytes/s, and where the value came from; 0 when none does.
std::pair<double, std::string> nic_bytes_per_s() {
  double best = 0;
  std::string source;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    std::ifstream in(e.path() / "speed");
    double mbit = 0;
    if (e.path().filename() == "lo" || !(in >> mbit) || mbit <= 0) continue;
    if (mbit * 1e6 / 8.0 > best) {
      best = mbit * 1e6 / 8.0;
      source = "link speed of " + e.path().filename().string() + " (" + (e.path() / "speed").string() + ": " +
               general(mbit) + " Mb/s) on rank 0's node";
    }
  }
  return {best, source};
}

// How many bytes per second one CPU rank copies (memcpy) while every rank of the job copies at
// once: what a shared-memory transfer between ranks can move at most (one copy; Open MPI's shared
// memory transport copies large messages once, with CMA). Timed as the collectives are: wall clock,
// the slowest rank, the median of kCopyRuns runs after a warm-up. Collective.
constexpr int kCopyRuns = 7;
double shared_memory_copy_bytes_per_s(CommJob& job, double bytes) {
  const auto n = static_cast<size_t>(bytes);
  std::vector<unsigned char> from(n, 1), to(n, 2);  // written once: page faults stay out of the runs
  std::vector<double> runs_s;
  for (int run = 0; run <= kCopyRuns; ++run) {
    job.max_over_ranks(0.0);  // every rank starts together
    const double start_s = host_seconds();
    std::memcpy(to.data(), from.data(), n);
    const double slowest_s = job.max_over_ranks(host_seconds() - start_s);
    if (run > 0) runs_s.push_back(slowest_s);
    from[static_cast<size_t>(run) % n] = to[n - 1];  // the copy is used
  }
  return bytes / median(runs_s);
}

// The links of CPU ranks, as the collective fit sees them. Inside a node the ranks' messages pass
// through shared memory: the link is the measured copy rate of one rank while all copy
// (shared_memory_copy_bytes_per_s). Across nodes it is the NIC's link speed. A rank is a device:
// gpus_per_node is the ranks on rank 0's node.
void set_cpu_links(DeviceSpec& spec, double copy_bytes_per_s, double copy_bytes, int64_t ranks_on_node, int64_t nodes) {
  spec.intra_node_bytes_per_s = copy_bytes_per_s;
  spec.sources["intra_node_gb_per_s"] =
      "CPU ranks on one node exchange messages through shared memory: memcpy of " + general(copy_bytes / (1 << 20)) +
      " MiB by each of the job's ranks at once, the slowest rank's rate (median of " + std::to_string(kCopyRuns) +
      " runs), measured by tpsim calibrate comm on " + spec.name + ", " + utc_timestamp().substr(0, 10);
  spec.gpus_per_node = static_cast<int>(ranks_on_node);
  spec.sources["gpus_per_node"] = "ranks per node of the tpsim calibrate comm job (a CPU rank is one device)";
  if (nodes > 1) {
    const auto [bytes_per_s, source] = nic_bytes_per_s();
    if (!(bytes_per_s > 0))
      throw Error("--backend cpu across " + std::to_string(nodes) +
                  " nodes: no network interface of rank 0's node reports its speed (/sys/class/net/*/speed), so the "
                  "across-nodes efficiency would have no bandwidth to be relative to");
    spec.inter_node_bytes_per_s = bytes_per_s;
    spec.sources["inter_node_gbps_per_node"] = source;
  }
}

Start load_start(const CommCalibrationOptions& o) {
  const BackendKind backend = o.backend;
  Start s;
  if (o.base_path.empty()) {
    if (backend != BackendKind::kCpu)
      throw Error(
          "--backend cuda needs --base PROFILE: the GPU's profile (data/profiles/<id>.json), whose device "
          "datasheet gives the link bandwidths");
    s.base = load_default_profile("cpu");
  } else {
    s.base = load_profile(o.base_path);
  }
  if (backend == BackendKind::kCpu) {
    if (s.base.device_spec) {
      s.device = *s.base.device_spec;
      s.device_note = "spec embedded in " + s.base.origin;
    } else if (has_datasheet(s.base.device)) {
      throw Error("--base " + s.base.origin + ": a profile of " + s.base.device +
                  ", a device with a datasheet; --backend cpu measures this machine's CPU ranks (give the CPU's "
                  "profile, as tpsim calibrate kernels --backend cpu writes it, or none)");
    } else {
      s.measure_cpu_spec = true;  // once the job is known to have something to measure
      s.device_note = "spec measured here (copy bandwidth and one fp32 GEMM, one thread), embedded in the profile";
    }
    s.embed_spec = true;
  } else if (s.base.device_spec) {
    s.device = *s.base.device_spec;
    s.embed_spec = true;
    s.device_note = "spec embedded in " + s.base.origin;
  } else {
    s.device = load_device(s.base.device);
    s.device_note = "datasheet data/devices/" + s.base.device + ".yaml";
  }
  return s;
}

// summarize_residuals per collective kind, in kCommCalibrationKinds' order.
std::vector<std::pair<CollectiveKind, ResidualSummary>> residuals_by_kind(const std::vector<CommMeasurement>& ms,
                                                                          const std::vector<double>& log_errors) {
  std::vector<std::pair<CollectiveKind, ResidualSummary>> by_kind;
  for (CollectiveKind kind : kCommCalibrationKinds) {
    std::vector<double> mine;
    for (size_t i = 0; i < ms.size(); ++i)
      if (ms[i].kind == kind) mine.push_back(log_errors[i]);
    if (!mine.empty()) by_kind.emplace_back(kind, summarize_residuals(mine));
  }
  return by_kind;
}

// One group of ranks timed together, and the tier it measures.
struct Scope {
  CommScope scope;
  LinkTier tier;
  int64_t ranks;  // in rank 0's group
  int64_t nodes;
  std::unique_ptr<Communicator> comm;
};

// Where the ranks run, the groups to time and (on rank 0) the start: the base profile, the device,
// its links. Each step agreed on by every rank.
struct Setup {
  std::vector<std::string> node_names;
  std::map<std::string, int64_t> ranks_per_node;
  std::string node0;
  int64_t nodes = 0;
  std::vector<Scope> scopes;
  Start start;
  std::string library;
};

Setup set_up(const CommCalibrationOptions& o, CommJob& job) {
  const bool rank0 = job.rank() == 0;
  Setup u;
  job.agree([&] { u.node_names = job.node_names(); });
  // Where the ranks run: rank 0's node, and how many nodes the job spans.
  for (const auto& n : u.node_names) ++u.ranks_per_node[n];
  u.node0 = u.node_names.front();
  u.nodes = static_cast<int64_t>(u.ranks_per_node.size());

  // Rank 0 reads the base profile and the device spec before anything is measured, and checks that
  // the output's folder exists.
  job.agree([&] {
    if (!rank0) return;
    u.start = load_start(o);
    const std::filesystem::path out(o.out_path);
    const std::filesystem::path dir = out.has_parent_path() ? out.parent_path() : std::filesystem::path(".");
    if (!std::filesystem::is_directory(dir))
      throw Error("--out " + o.out_path + ": folder " + dir.string() + " does not exist");
  });
  // What there is to measure, known before anything is: a single rank has no collective to time.
  if (u.ranks_per_node[u.node0] > 1)
    u.scopes.push_back({CommScope::kNode, LinkTier::kIntraNode, u.ranks_per_node[u.node0], 1, nullptr});
  if (u.nodes > 1) u.scopes.push_back({CommScope::kWorld, LinkTier::kInterNode, job.size(), u.nodes, nullptr});
  if (u.scopes.empty())
    job.agree([&] {
      throw Error("calibrate comm: " + std::to_string(job.size()) +
                  " rank: a collective needs at least two (run it as mpirun -np 2 tpsim calibrate comm ...)");
    });
  job.agree([&] {
    if (rank0 && u.start.measure_cpu_spec) u.start.device = measured_cpu_spec(u.start.base.device);
  });
  // CPU ranks: their link inside a node is shared memory, measured by all ranks at once over the
  // largest buffer the collectives use (the bandwidth-bound end of the fit).
  if (o.backend == BackendKind::kCpu) {
    const double copy_bytes = *std::max_element(o.sizes_bytes.begin(), o.sizes_bytes.end());
    double copy_bytes_per_s = 0;
    job.agree([&] { copy_bytes_per_s = shared_memory_copy_bytes_per_s(job, copy_bytes); });
    job.agree([&] {
      if (rank0) set_cpu_links(u.start.device, copy_bytes_per_s, copy_bytes, u.ranks_per_node[u.node0], u.nodes);
    });
  }
  job.agree([&] {
    for (Scope& sc : u.scopes) sc.comm = make_communicator(o.backend, sc.scope);
    u.library = u.scopes.front().comm->library_version();
  });
  return u;
}

// Times every kind at every size in every group, the budget shared evenly by the measurements
// (each runs at least min_repetitions times).
void measure(const CommCalibrationOptions& o, CommJob& job, Setup& u, CommCalibration& c) {
  const double count = static_cast<double>(u.scopes.size() * o.sizes_bytes.size() * std::size(kCommCalibrationKinds));
  TimingOptions timing;
  timing.warmup = 2;
  timing.min_repetitions = 5;
  timing.max_repetitions = 100000;
  timing.min_seconds = o.budget_s / count;
  timing.max_seconds = o.budget_s / count;
  timing.flush_cache = false;
  if (job.rank() == 0)
    std::cerr << "tpsim calibrate comm: timing " << count << " collectives (" << o.sizes_bytes.size()
              << " sizes, 3 kinds, " << u.scopes.size() << (u.scopes.size() == 1 ? " group" : " groups")
              << ") in about " << o.budget_s << " s on " << job.size() << " ranks\n";
  for (Scope& sc : u.scopes)
    for (double size : o.sizes_bytes)
      for (CollectiveKind kind : kCommCalibrationKinds)
        job.agree([&] {
          const Timing t = sc.comm->time_collective(kind, size, timing);
          if (!t.supported) {
            c.skipped.push_back(std::string(to_string(kind)) + " of " + general(size) + " bytes: " + t.reason);
            return;
          }
          c.measurements.push_back({kind, collective_bytes(size, sc.comm->size()), sc.ranks, sc.nodes, t.median_s,
                                    t.p10_s, t.p90_s, t.repetitions});
        });
}

// Rank 0's fit and the profile it gives.
void fit(const CommCalibrationOptions& o, const Setup& u, CommCalibration& c) {
  c.fit = fit_comm(c.measurements, u.start.device, u.start.base.params, c.fit_options);
  c.residuals = summarize_residuals(c.fit.residuals);
  c.residuals_by_kind = residuals_by_kind(c.measurements, c.fit.residuals);
  c.profile = u.start.base;
  if (u.start.embed_spec) c.profile.device_spec = u.start.device;
  c.profile.params = c.fit.params;
  c.date = utc_timestamp();
  const std::string detail = "tpsim calibrate comm, backend " + std::string(to_string(o.backend)) + " (" + u.library +
                             "), " + std::to_string(c.ranks) + " ranks on " + std::to_string(u.nodes) +
                             (u.nodes == 1 ? " node" : " nodes") + ", " + c.date;
  for (const FittedParameter& f : c.fit.fitted)
    c.profile.sources[std::string(f.param->name)] = {SourceKind::kComm, detail, f.stddev};
}

}  // namespace

std::vector<double> default_comm_sizes(BackendKind backend) {
  std::vector<double> sizes;
  const double largest = backend == BackendKind::kCpu ? 64.0 * (1 << 20) : 1024.0 * (1 << 20);
  for (double b = 4096; b <= largest; b *= 2) sizes.push_back(b);
  return sizes;
}

std::string CommCalibrationOptions::check() const {
  const std::string name(to_string(backend));
  if (backend == BackendKind::kHip)
    return "--backend '" + name + "': expected cpu (MPI between the CPU ranks) or cuda (NCCL between GPUs)";
  if (backend == BackendKind::kCuda && !communicator_built(backend))
    return "--backend cuda: this build has no NCCL communicator (it needs the CUDA toolkit, NCCL and MPI when it is "
           "configured)";
  if (out_path.empty()) return "--out: required (the profile to write)";
  for (double b : sizes_bytes) {
    if (!(b >= 1)) return "--sizes: a size must be positive";
    if (b > kMaxCommBytes) return "--sizes: too large (at most 64Gi)";
  }
  if (!std::isfinite(budget_s) || !(budget_s > 0)) return "--budget: expected a positive number of seconds";
  return "";
}

#ifdef TPSIM_HAVE_MPI
struct CommJob::State {
  MpiJob job;
  double longest_step_s = 0;
};

CommJob::CommJob() : state_(std::make_unique<State>()) {}
int CommJob::rank() const { return state_->job.rank(); }
int CommJob::size() const { return state_->job.size(); }
std::vector<std::string> CommJob::node_names() { return state_->job.node_names(); }
double CommJob::max_over_ranks(double value) { return state_->job.max_over_ranks(value); }

void CommJob::agree(const std::function<void()>& step) {
  std::string failure;
  const double start_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  try {
    step();
  } catch (const std::exception& e) {
    failure = *e.what() ? e.what() : "unknown failure";
  }
  const double end_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  state_->longest_step_s = std::max(state_->longest_step_s, end_s - start_s);
  const std::string first =
      state_->job.first_failure(failure, kAgreeBase_s + kAgreeStepFactor * state_->longest_step_s);
  if (first.empty()) return;
  if (state_->job.rank() == 0) throw Error(first);
  throw ReportedError();
}
#else
// No MPI: the constructor fails, so that no other member is ever called.
struct CommJob::State {};
CommJob::CommJob() {
  throw Error("calibrate comm: this build has no MPI communicator (MPI was not found when it was configured)");
}
int CommJob::rank() const { return 0; }
int CommJob::size() const { return 1; }
std::vector<std::string> CommJob::node_names() { return {}; }
double CommJob::max_over_ranks(double value) { return value; }
void CommJob::agree(const std::function<void()>& step) { step(); }
#endif
CommJob::~CommJob() = default;

CommCalibration calibrate_comm(const CommCalibrationOptions& options, CommJob& job,
                               const std::function<void(const CommCalibration&)>& write) {
  CommCalibrationOptions o = options;
  job.agree([&] {
    if (const std::string why = o.check(); !why.empty()) throw Error(why);
  });
  if (o.sizes_bytes.empty()) o.sizes_bytes = default_comm_sizes(o.backend);
  CommCalibration c;
  c.ranks = job.size();
  Setup u = set_up(o, job);
  measure(o, job, u, c);
  if (job.rank() != 0) {
    job.agree([] {});  // rank 0's fit and write
    return c;
  }
  c.backend = o.backend;
  c.library = u.library;
  c.nodes = u.nodes;
  c.ranks_per_node = u.ranks_per_node;
  c.node0 = u.node0;
  c.base_profile = u.start.base.origin;
  c.device = u.start.device;
  c.device_note = u.start.device_note;
  job.agree([&] {
    fit(o, u, c);
    write(c);
  });
  return c;
}

ResidualSummary summarize_residuals(const std::vector<double>& log_errors) {
  ResidualSummary s;
  std::vector<double> errors;
  double sum_sq = 0;
  for (double r : log_errors) {
    errors.push_back(std::exp(r) - 1);
    sum_sq += r * r;
    if (std::fabs(errors.back()) > std::fabs(s.largest_error)) s.largest_error = errors.back();
  }
  s.median_error = median(errors);
  s.rms_log_error = std::sqrt(sum_sq / static_cast<double>(errors.size()));
  s.measurements = errors.size();
  return s;
}

}  // namespace tpsim
