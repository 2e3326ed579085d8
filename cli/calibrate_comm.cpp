// tpsim calibrate comm: time all-gather, reduce-scatter and all-reduce across the ranks of an MPI
// job and fit the cost model's link efficiency and per-step latency of every link tier the job
// spans (calibrate/comm_fit.hpp), then write the profile with the measurements and the fit.
//
//   mpirun -np N tpsim calibrate comm --backend cpu|cuda [--base PROFILE] --out PROFILE.json
//                                     [--sizes 4Ki..256Mi] [--budget 30]
//
// Tiers: the ranks sharing rank 0's node name measure the same-node tier (CommScope::kNode; every
// node runs its own collectives at the same time); when the job spans several node names, all
// ranks together measure the across-nodes tier. A tier the job cannot measure keeps the base
// profile's values and provenance, and the report says so.
//
// Every rank runs this command. Only rank 0 fits, writes the profile and prints. After each step
// the ranks agree on failure (MpiJob::first_failure): a failure on any rank ends every rank, rank 0
// with the one line (tpsim: error: ...) and the others silently, all with exit status 2.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "calibrate/comm_fit.hpp"
#include "calibrate/kernel_device.hpp"
#include "calibrate/kernel_measure.hpp"
#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/profile_io.hpp"
#include "kernels/comm.hpp"
#include "kernels/timing.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#ifdef TPSIM_HAVE_NCCL_COMM
#include "kernels/cuda/nccl_comm.hpp"
#endif

namespace tpsim {
namespace {

struct CalibrateCommOptions {
  std::string backend;                 // "cpu": MPI on host buffers; "cuda": NCCL on GPU buffers
  std::string base;                    // profile to start from
  std::string out;                     // profile to write
  std::string sizes;                   // full-buffer sizes in bytes; "": kCpuSizes or kGpuSizes
  std::string budget = "30";           // seconds of timed collectives to aim for, all sizes and kinds
};

// Default sizes: from latency-bound (a few KiB) to bandwidth-bound. On the CPU up to 64 MiB, which
// the shared-memory transport moves in tens of milliseconds; on GPUs up to 1 GiB, where NVLink's
// hundreds of GB/s still take milliseconds (FSDP's gathers of large blocks are that big).
constexpr const char* kCpuSizes = "4Ki..64Mi";
constexpr const char* kGpuSizes = "4Ki..1Gi";

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllReduce};

// The largest buffer --sizes accepts: 64 GiB, far beyond what one host or GPU holds twice.
constexpr double kMaxSizeBytes = 64.0 * (1LL << 30);

// How long a rank waits for the others at an agreement before it ends the job: a minute, plus four
// times the longest step it has run (the nodes' same-node collectives run separately and may finish
// far apart; a rank that failed inside a collective leaves the others blocked, and only this
// wait ends the job then).
constexpr double kAgreeBase_s = 60;
constexpr double kAgreeStepFactor = 4;

// One byte amount: "65536", "64Ki", "1Mi", "4M" (K, M, G decimal; Ki, Mi, Gi binary).
double parse_bytes(const std::string& flag, const std::string& text) {
  const std::string hint = "': expected a whole number of bytes such as 65536, 64Ki or 4M";
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) throw Error(flag + " '" + text + hint);
  const double count = std::stod(text.substr(0, digits));
  const std::string suffix = text.substr(digits);
  static const std::map<std::string, double> scale = {{"", 1.0},        {"K", 1e3},          {"M", 1e6},
                                                      {"G", 1e9},       {"Ki", 1024.0},      {"Mi", 1048576.0},
                                                      {"Gi", 1073741824.0}};
  const auto it = scale.find(suffix);
  if (it == scale.end()) throw Error(flag + " '" + text + "': unknown suffix '" + suffix + "' (K, M, G; Ki, Mi, Gi)");
  const double bytes = count * it->second;
  if (!(bytes >= 1)) throw Error(flag + " '" + text + "': a size must be positive");
  if (bytes > kMaxSizeBytes) throw Error(flag + " '" + text + "': too large (at most 64Gi)");
  return bytes;
}

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
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v) || !(v > 0))
    throw Error("--budget '" + text + "': expected a positive number of seconds");
  return v;
}

// The buffer a communicator really runs for `bytes` over `ranks` (kernels/comm.hpp): whole fp32
// elements that split evenly over the ranks, at least one per rank.
double collective_bytes(double bytes, int64_t ranks) {
  const auto per_rank = std::max<int64_t>(1, static_cast<int64_t>(bytes / 4.0 / static_cast<double>(ranks)));
  return 4.0 * static_cast<double>(per_rank * ranks);
}

// Bus bandwidth as nccl-tests reports it: (n-1)/n of the buffer crosses each rank's link per pass,
// two passes for an all-reduce.
double bus_bytes_per_s(const CommMeasurement& m) {
  const double n = static_cast<double>(m.ranks);
  const double passes = m.kind == CollectiveKind::kAllReduce ? 2.0 : 1.0;
  return passes * (n - 1.0) / n * m.bytes / m.median_s;
}

std::string fixed(double v, int decimals) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(decimals);
  s << v;
  return s.str();
}

std::string general(double v) {
  std::ostringstream s;
  s.precision(3);
  s << v;
  return s.str();
}

// How far the fit is from a set of measurements: the median and largest of predicted/measured - 1,
// and the RMS of the log errors.
struct ResidualSummary {
  double median_error = 0, largest_error = 0, rms_log_error = 0;
  size_t measurements = 0;

  nlohmann::json to_json() const {
    return {{"median_error", median_error},
            {"largest_error", largest_error},
            {"rms_log_error", rms_log_error},
            {"measurements", measurements}};
  }
};

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

// summarize_residuals per collective kind, in kKinds' order: the formula is one for all three,
// the libraries' algorithms are not.
std::vector<std::pair<CollectiveKind, ResidualSummary>> residuals_by_kind(const std::vector<CommMeasurement>& ms,
                                                                          const std::vector<double>& log_errors) {
  std::vector<std::pair<CollectiveKind, ResidualSummary>> by_kind;
  for (CollectiveKind kind : kKinds) {
    std::vector<double> mine;
    for (size_t i = 0; i < ms.size(); ++i)
      if (ms[i].kind == kind) mine.push_back(log_errors[i]);
    if (!mine.empty()) by_kind.emplace_back(kind, summarize_residuals(mine));
  }
  return by_kind;
}

std::string source_of(const DeviceProfile& p, std::string_view name) {
  const auto it = p.sources.find(std::string(name));
  return it == p.sources.end() ? "?" : std::string(to_string(it->second.kind));
}

// What rank 0 knows before measuring: the profile to start from and the device whose links the
// efficiencies are relative to.
struct Start {
  DeviceProfile base;
  DeviceSpec device;
  bool embed_spec = false;  // the output carries the device spec (no datasheet file describes it)
  bool measure_cpu_spec = false;  // the spec is still to be measured here (measured_cpu_spec)
  std::string device_note;  // how the spec was obtained, for the report
};

// Threads and timing of the CPU probes below: one thread, as an MPI rank copies a message with one
// thread, timed by that thread's CPU clock so that time a shared machine gives other processes is
// not counted (kernels/backend.hpp).
TimingOptions cpu_probe_timing() {
  TimingOptions t;
  t.warmup = 1;
  t.min_repetitions = 5;
  t.max_repetitions = 50;
  t.min_seconds = 0.01;
  t.max_seconds = 0.25;
  t.thread_cpu_clock = true;
  return t;
}

// The CPU probes' buffer: 256 MiB, as calibrate kernels' (most of it beyond the caches).
constexpr double kCpuCopyBytes = 256.0 * (1 << 20);
// The CPU's measured "peak": an fp32 GEMM of this size, large enough for Eigen's blocked kernel
// to run at its asymptotic rate on one core.
constexpr int64_t kCpuPeakGemmSide = 1024;

// The spec of this machine's CPU when the base profile carries none, built as tpsim calibrate
// kernels builds it (calibrate/kernel_device.hpp: the CPU backend's report and its measured copy
// bandwidth), with the fp32 peak one large GEMM reaches in place of its plan's fastest GEMM.
DeviceSpec measured_cpu_spec(const std::string& id) {
  set_cpu_backend_threads(1);
  const std::unique_ptr<Backend> backend = make_backend(BackendKind::kCpu);
  const BackendInfo info = backend->info();
  const TimingOptions timing = cpu_probe_timing();
  DeviceSpec spec = measured_device_spec(id, info, measure_copy_bandwidth(*backend, kCpuCopyBytes, timing), false);
  Op gemm{};
  gemm.name = "calibrate_comm.peak_gemm";
  gemm.kind = OpKind::kGemm;
  gemm.category = OpCategory::kGemm;
  gemm.dtype = DType::kFp32;
  gemm.m = gemm.n = gemm.k = kCpuPeakGemmSide;
  gemm.kernels = 1;
  const double side = static_cast<double>(kCpuPeakGemmSide);
  gemm.flops = 2.0 * side * side * side;
  gemm.bytes_read = 2.0 * side * side * 4.0;
  gemm.bytes_written = side * side * 4.0;
  const Timing t = backend->time_op(gemm, timing);
  if (!t.supported) throw Error("the CPU's fp32 GEMM: " + t.reason);
  spec.peak_flops_per_s[static_cast<int>(DType::kFp32)] = gemm.flops / t.median_s;
  spec.sources["peak_dense_tflops.fp32"] =
      "kernel run: one fp32 GEMM of " + std::to_string(kCpuPeakGemmSide) + "^3 on one thread by tpsim calibrate comm (" +
      info.device_name + ", " + utc_timestamp().substr(0, 10) + "); measured, not a datasheet peak (there is none)";
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

#ifdef TPSIM_HAVE_MPI
// How many bytes per second one CPU rank copies (memcpy) while every rank of the job copies at
// once: what a shared-memory transfer between ranks can move at most (one copy; Open MPI's shared
// memory transport copies large messages once, with CMA). Timed as the collectives are: wall clock,
// the slowest rank, the median of kCopyRuns runs after a warm-up. Collective.
constexpr int kCopyRuns = 7;
double shared_memory_copy_bytes_per_s(MpiJob& job, double bytes) {
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
#endif

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

Start load_start(const CalibrateCommOptions& o, BackendKind backend) {
  Start s;
  if (o.base.empty()) {
    if (backend != BackendKind::kCpu)
      throw Error("--backend cuda needs --base PROFILE: the GPU's profile (data/profiles/<id>.json), whose device "
                  "datasheet gives the link bandwidths");
    s.base = load_default_profile("cpu");
  } else {
    s.base = load_profile(o.base);
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

// The measurement communicators of one scope, on every rank.
std::unique_ptr<Communicator> make_communicator(BackendKind backend, CommScope scope) {
#ifdef TPSIM_HAVE_MPI
  if (backend == BackendKind::kCpu) return make_mpi_communicator(scope);
#endif
#ifdef TPSIM_HAVE_NCCL_COMM
  if (backend == BackendKind::kCuda) return make_nccl_communicator(-1, scope);
#endif
  (void)scope;
  throw Error("--backend " + std::string(to_string(backend)) + ": this build has no communicator for it");
}

// One group of ranks timed together, and the tier it measures.
struct Scope {
  CommScope scope;
  LinkTier tier;
  int64_t ranks;  // in rank 0's group
  int64_t nodes;
  std::unique_ptr<Communicator> comm;
};

#ifdef TPSIM_HAVE_MPI
// Runs `step` on every rank and agrees on its outcome: when it failed on any rank, rank 0 throws
// the first failure (main prints it as the one line) and the other ranks throw ReportedError.
class Agreement {
 public:
  explicit Agreement(MpiJob& job) : job_(job) {}

  void run(const std::function<void()>& step) {
    std::string failure;
    const double start_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    try {
      step();
    } catch (const std::exception& e) {
      failure = *e.what() ? e.what() : "unknown failure";
    }
    const double end_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    longest_step_s_ = std::max(longest_step_s_, end_s - start_s);
    const std::string first = job_.first_failure(failure, kAgreeBase_s + kAgreeStepFactor * longest_step_s_);
    if (first.empty()) return;
    if (job_.rank() == 0) throw Error(first);
    throw ReportedError();
  }

 private:
  MpiJob& job_;
  double longest_step_s_ = 0;
};
#endif

void run_calibrate_comm(const CalibrateCommOptions& o, const std::string& command_line) {
#ifndef TPSIM_HAVE_MPI
  (void)o;
  (void)command_line;
  throw Error("calibrate comm: this build has no MPI communicator (MPI was not found when it was configured)");
#else
  MpiJob job;
  Agreement agree(job);
  const bool rank0 = job.rank() == 0;

  // Options, checked on every rank alike (every rank has the same command line).
  BackendKind backend = BackendKind::kCpu;
  std::vector<double> sizes;
  double budget_s = 0;
  std::vector<std::string> node_names;
  agree.run([&] {
    if (o.backend.empty()) throw Error("--backend: required (cpu: MPI between the CPU ranks; cuda: NCCL between GPUs)");
    const auto b = parse_backend(o.backend);
    if (!b || *b == BackendKind::kHip)
      throw Error("--backend '" + o.backend + "': expected cpu (MPI between the CPU ranks) or cuda (NCCL between GPUs)");
    backend = *b;
#ifndef TPSIM_HAVE_NCCL_COMM
    if (backend == BackendKind::kCuda)
      throw Error("--backend cuda: this build has no NCCL communicator (it needs the CUDA toolkit, NCCL and MPI when "
                  "it is configured)");
#endif
    if (o.out.empty()) throw Error("--out: required (the profile to write)");
    sizes = parse_sizes("--sizes", o.sizes.empty() ? (backend == BackendKind::kCpu ? kCpuSizes : kGpuSizes) : o.sizes);
    budget_s = parse_budget(o.budget);
  });
  agree.run([&] { node_names = job.node_names(); });

  // Where the ranks run: rank 0's node, and how many nodes the job spans.
  std::map<std::string, int64_t> ranks_per_node;
  for (const auto& n : node_names) ++ranks_per_node[n];
  const std::string node0 = node_names.front();
  const auto nodes = static_cast<int64_t>(ranks_per_node.size());

  // Rank 0 reads the base profile and the device spec before anything is measured, and checks that
  // the output's folder exists.
  Start start;
  agree.run([&] {
    if (!rank0) return;
    start = load_start(o, backend);
    const std::filesystem::path out(o.out);
    const std::filesystem::path dir = out.has_parent_path() ? out.parent_path() : std::filesystem::path(".");
    if (!std::filesystem::is_directory(dir)) throw Error("--out " + o.out + ": folder " + dir.string() + " does not exist");
  });
  // What there is to measure, known before anything is: a single rank has no collective to time.
  std::vector<Scope> scopes;
  if (ranks_per_node[node0] > 1)
    scopes.push_back({CommScope::kNode, LinkTier::kIntraNode, ranks_per_node[node0], 1, nullptr});
  if (nodes > 1) scopes.push_back({CommScope::kWorld, LinkTier::kInterNode, job.size(), nodes, nullptr});
  if (scopes.empty())
    agree.run([&] {
      throw Error("calibrate comm: " + std::to_string(job.size()) +
                  " rank: a collective needs at least two (run it as mpirun -np 2 tpsim calibrate comm ...)");
    });
  agree.run([&] {
    if (rank0 && start.measure_cpu_spec) start.device = measured_cpu_spec(start.base.device);
  });
  // CPU ranks: their link inside a node is shared memory, measured by all ranks at once over the
  // largest buffer the collectives use (the bandwidth-bound end of the fit).
  if (backend == BackendKind::kCpu) {
    const double copy_bytes = *std::max_element(sizes.begin(), sizes.end());
    double copy_bytes_per_s = 0;
    agree.run([&] { copy_bytes_per_s = shared_memory_copy_bytes_per_s(job, copy_bytes); });
    agree.run([&] {
      if (rank0) set_cpu_links(start.device, copy_bytes_per_s, copy_bytes, ranks_per_node[node0], nodes);
    });
  }

  std::string library;
  agree.run([&] {
    for (Scope& s : scopes) s.comm = make_communicator(backend, s.scope);
    library = scopes.front().comm->library_version();
  });

  // The budget is shared evenly by the measurements; each runs at least min_repetitions times.
  const double count = static_cast<double>(scopes.size() * sizes.size() * std::size(kKinds));
  TimingOptions timing;
  timing.warmup = 2;
  timing.min_repetitions = 5;
  timing.max_repetitions = 100000;
  timing.min_seconds = budget_s / count;
  timing.max_seconds = budget_s / count;
  timing.flush_cache = false;
  if (rank0)
    std::cerr << "tpsim calibrate comm: timing " << count << " collectives (" << sizes.size() << " sizes, 3 kinds, "
              << scopes.size() << (scopes.size() == 1 ? " group" : " groups") << ") in about " << budget_s
              << " s on " << job.size() << " ranks\n";

  std::vector<CommMeasurement> measurements;
  std::vector<std::string> skipped;
  for (Scope& s : scopes)
    for (double size : sizes)
      for (CollectiveKind kind : kKinds)
        agree.run([&] {
          const Timing t = s.comm->time_collective(kind, size, timing);
          if (!t.supported) {
            skipped.push_back(std::string(to_string(kind)) + " of " + general(size) + " bytes: " + t.reason);
            return;
          }
          measurements.push_back({kind, collective_bytes(size, s.comm->size()), s.ranks, s.nodes, t.median_s, t.p10_s,
                                  t.p90_s, t.repetitions});
        });

  // Rank 0 fits and writes; the others wait at the agreement for the outcome.
  CommFitResult fit;
  DeviceProfile out;
  agree.run([&] {
    if (!rank0) return;
    CommFitOptions fit_options;
    fit = fit_comm(measurements, start.device, start.base.params, fit_options);
    out = start.base;
    if (start.embed_spec) out.device_spec = start.device;
    out.params = fit.params;
    const std::string date = utc_timestamp();
    const std::string detail = "tpsim calibrate comm, backend " + o.backend + " (" + library + "), " +
                               std::to_string(job.size()) + " ranks on " + std::to_string(nodes) +
                               (nodes == 1 ? " node" : " nodes") + ", " + date;
    nlohmann::json jparams = nlohmann::json::array();
    for (const FittedParameter& f : fit.fitted) {
      out.sources[std::string(f.param->name)] = {SourceKind::kComm, detail, f.stddev};
      jparams.push_back({{"name", std::string(f.param->name)},
                         {"value", f.value},
                         {"stddev", f.stddev < 0 ? nlohmann::json() : nlohmann::json(f.stddev)},
                         {"at_bound", f.at_bound}});
    }
    nlohmann::json jtiers = nlohmann::json::array();
    for (LinkTier tier : {LinkTier::kIntraNode, LinkTier::kInterNode}) {
      const bool measured = std::find(fit.tiers.begin(), fit.tiers.end(), tier) != fit.tiers.end();
      nlohmann::json j = {{"tier", std::string(to_string(tier))}, {"measured", measured}};
      if (!measured)
        j["why"] = tier == LinkTier::kInterNode
                       ? "the job ran on one node (" + node0 + "): values kept from the base profile"
                       : "rank 0's node (" + node0 + ") ran one rank: values kept from the base profile";
      jtiers.push_back(j);
    }
    nlohmann::json jms = nlohmann::json::array();
    for (size_t i = 0; i < measurements.size(); ++i) {
      const CommMeasurement& m = measurements[i];
      jms.push_back({{"kind", std::string(to_string(m.kind))},
                     {"bytes", m.bytes},
                     {"ranks", m.ranks},
                     {"nodes", m.nodes},
                     {"median_s", m.median_s},
                     {"p10_s", m.p10_s},
                     {"p90_s", m.p90_s},
                     {"repetitions", m.repetitions},
                     {"predicted_s", m.median_s * std::exp(fit.residuals[i])},
                     {"log_residual", fit.residuals[i]}});
    }
    nlohmann::json jby_kind = nlohmann::json::object();
    for (const auto& [kind, summary] : residuals_by_kind(measurements, fit.residuals))
      jby_kind[std::string(to_string(kind))] = summary.to_json();
    out.extra["comm"] = {
        {"command", command_line},
        {"date", date},
        {"backend", o.backend},
        {"library", library},
        {"ranks", job.size()},
        {"nodes", nodes},
        {"ranks_per_node", ranks_per_node},
        {"base_profile", start.base.origin},
        {"link_bytes_per_s",
         {{"intra_node", start.device.intra_node_bytes_per_s},
          {"intra_node_source", start.device.sources.count("intra_node_gb_per_s") ? start.device.sources.at("intra_node_gb_per_s") : ""},
          {"inter_node", start.device.inter_node_bytes_per_s},
          {"inter_node_source",
           start.device.sources.count("inter_node_gbps_per_node") ? start.device.sources.at("inter_node_gbps_per_node") : ""}}},
        {"tiers", jtiers},
        {"fit",
         {{"formula", "CostModel::collective_seconds (docs/model.md, Collectives)"},
          {"loss", "Huber on log(predicted / measured median), scale " + fixed(fit_options.robust_scale, 2)},
          {"initial_cost", fit.initial_cost},
          {"final_cost", fit.final_cost},
          {"iterations", fit.iterations},
          {"converged", fit.converged},
          {"solver", fit.summary},
          {"parameters", jparams},
          {"residuals", summarize_residuals(fit.residuals).to_json()},
          {"residuals_by_kind", jby_kind}}},
        {"measurements", jms},
        {"skipped", skipped}};
    save_profile(o.out, out);
  });
  if (!rank0) return;

  // The report, in the manner of calibrate table's.
  std::cerr << "  " << library << ", backend " << o.backend << ": " << job.size() << " ranks on " << nodes
            << (nodes == 1 ? " node" : " nodes") << " (";
  for (auto it = ranks_per_node.begin(); it != ranks_per_node.end(); ++it)
    std::cerr << (it == ranks_per_node.begin() ? "" : ", ") << it->first << ": " << it->second;
  std::cerr << ")\n  device " << start.device.id << ": " << start.device_note << "; links " << general(start.device.intra_node_bytes_per_s / 1e9)
            << " GB/s within a node (" << start.device.sources.at("intra_node_gb_per_s") << "), "
            << general(start.device.inter_node_bytes_per_s / 1e9) << " GB/s per node across nodes\n";
  std::cerr << "  kind            bytes      ranks nodes  median us     p10 us     p90 us  reps  bus GB/s  "
               "predicted us  error\n";
  for (size_t i = 0; i < measurements.size(); ++i) {
    const CommMeasurement& m = measurements[i];
    char line[200];
    std::snprintf(line, sizeof line, "  %-14s %10.0f %6lld %5lld %10.1f %10.1f %10.1f %5d %9.3f %13.1f %+6.1f%%\n",
                  std::string(to_string(m.kind)).c_str(), m.bytes, static_cast<long long>(m.ranks),
                  static_cast<long long>(m.nodes), m.median_s * 1e6, m.p10_s * 1e6, m.p90_s * 1e6, m.repetitions,
                  bus_bytes_per_s(m) / 1e9, m.median_s * std::exp(fit.residuals[i]) * 1e6,
                  100 * (std::exp(fit.residuals[i]) - 1));
    std::cerr << line;
  }
  for (const auto& s : skipped) std::cerr << "  skipped: " << s << "\n";
  std::cerr << "  " << fit.summary << "\n";
  for (const FittedParameter& f : fit.fitted)
    std::cerr << "  " << f.param->name << " = " << general(f.value) << (f.stddev >= 0 ? " +- " + general(f.stddev) : "")
              << (f.at_bound ? " (at its bound)" : "") << "\n";
  for (LinkTier tier : {LinkTier::kIntraNode, LinkTier::kInterNode}) {
    if (std::find(fit.tiers.begin(), fit.tiers.end(), tier) != fit.tiers.end()) continue;
    const TierParameters p = tier_parameters(tier);
    std::cerr << "  " << to_string(tier) << ": not measured ("
              << (tier == LinkTier::kInterNode ? "the job ran on one node, " + node0
                                                : "rank 0's node ran one rank")
              << "); kept from the base profile: " << p.efficiency->name << " = "
              << general(p.efficiency->value(out.params)) << " (" << source_of(out, p.efficiency->name) << "), "
              << p.latency_s->name << " = " << general(p.latency_s->value(out.params)) << " ("
              << source_of(out, p.latency_s->name) << ")\n";
  }
  std::cerr << "  error of the fit (predicted / measured - 1), median per kind:";
  for (const auto& [kind, summary] : residuals_by_kind(measurements, fit.residuals))
    std::cerr << " " << to_string(kind) << " " << fixed(100 * summary.median_error, 1) << "%";
  const ResidualSummary all = summarize_residuals(fit.residuals);
  std::cerr << "; RMS of the log errors " << fixed(100 * all.rms_log_error, 1) << "%, largest error "
            << fixed(100 * all.largest_error, 1) << "%\n  wrote " << o.out << "\n";
#endif
}

}  // namespace

void register_calibrate_comm(CLI::App& calibrate) {
  auto o = std::make_shared<CalibrateCommOptions>();
  auto* comm = calibrate.add_subcommand(
      "comm", "time collectives across the ranks of an MPI job (mpirun -np N) and fit link efficiency and latency");
  // Checked in the callback, not by CLI11, so that a bad value is one line from rank 0, not one per rank.
  comm->add_option("--backend", o->backend, "cpu (MPI between CPU ranks) or cuda (NCCL between GPUs); required");
  comm->add_option("--base", o->base, "profile to start from (default for cpu: data/profiles/defaults/cpu.json)");
  comm->add_option("--out", o->out, "profile to write (atomically, by rank 0); required");
  comm->add_option("--sizes", o->sizes,
                   "full-buffer sizes in bytes: a range of powers of two or a list (default: " + std::string(kCpuSizes) +
                       " on the CPU, " + kGpuSizes + " on GPUs)");
  comm->add_option("--budget", o->budget, "seconds of timed collectives to aim for in all")->default_val("30");
  comm->callback([o] {
    std::string cmdline = "tpsim calibrate comm --backend " + o->backend;
    if (!o->base.empty()) cmdline += " --base " + o->base;
    cmdline += " --out " + o->out + (o->sizes.empty() ? "" : " --sizes " + o->sizes) + " --budget " + o->budget;
    run_calibrate_comm(*o, cmdline);
  });
}

}  // namespace tpsim
