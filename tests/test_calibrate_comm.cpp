// tpsim calibrate comm as a user runs it: under mpirun with two ranks on this machine, a profile
// written by rank 0 with the measurements and the fit; bad input a single line from rank 0 and a
// non-zero exit from every rank.
#define BOOST_TEST_MODULE calibrate_comm
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/profile_io.hpp"
#include "kernels/backend.hpp"

namespace fs = std::filesystem;
using namespace tpsim;

namespace {

struct Run {
  int status = -1;
  std::string err;
  int tpsim_lines = 0;  // stderr lines tpsim wrote (mpirun adds its own banner on failure)
  int ranks_failed = 0, ranks_succeeded = 0;
};

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() / ("tpsim_calibrate_comm_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// Runs `tpsim calibrate comm ARGS` on `ranks` ranks under mpirun, or as a single process without it
// (ranks 0). Each rank runs through a shell that reports its own exit status on stderr, so that
// every rank's outcome can be checked, not only mpirun's.
Run run_comm(const std::string& args, int ranks = 2) {
  static int n = 0;
  const fs::path err = scratch() / ("err" + std::to_string(n++));
  const std::string launcher =
      ranks > 0 ? std::string(TPSIM_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " "
                : "";
  const std::string cmd = launcher + "sh -c '\"$0\" \"$@\"; s=$?; echo \"rank-exit $s\" >&2; exit $s' " + TPSIM_BINARY +
                          " calibrate comm " + args + " > /dev/null 2> " + err.string();
  Run r;
  const int rc = std::system(cmd.c_str());
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  std::ifstream in(err);
  std::string line;
  while (std::getline(in, line)) {
    r.err += line + "\n";
    if (line.rfind("rank-exit ", 0) == 0) (line == "rank-exit 0" ? r.ranks_succeeded : r.ranks_failed)++;
    else if (line.rfind("tpsim: error:", 0) == 0) ++r.tpsim_lines;
  }
  return r;
}

void check_one_line_error(const std::string& args, const std::string& expected, int ranks) {
  BOOST_TEST_CONTEXT("calibrate comm " << args << " on " << ranks << " ranks") {
    const Run r = run_comm(args, ranks);
    BOOST_TEST(r.status != 0);
    BOOST_TEST(r.ranks_failed == std::max(ranks, 1));
    BOOST_TEST(r.tpsim_lines == 1);
    BOOST_TEST(r.err.find(expected) != std::string::npos, "stderr: " << r.err);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(two_ranks_write_a_profile_with_comm_provenance) {
  const fs::path out = scratch() / "comm.json";
  const Run r = run_comm("--backend cpu --out " + out.string() + " --sizes 4Ki,64Ki,1Mi --budget 1");
  BOOST_TEST_REQUIRE(r.status == 0, "stderr: " << r.err);
  BOOST_TEST(r.ranks_succeeded == 2);
  BOOST_TEST(r.tpsim_lines == 0);
  BOOST_TEST(r.err.find("inter_node: not measured") != std::string::npos);

  const DeviceProfile p = load_profile(out);
  for (const char* name : {"intra_node_link_efficiency", "intra_node_latency_s"}) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST((p.sources.at(name).kind == SourceKind::kComm));
      BOOST_TEST(p.sources.at(name).detail.find("2 ranks on 1 node") != std::string::npos);
      BOOST_TEST(p.sources.at(name).stddev >= 0.0);
    }
  }
  // The tier one machine cannot measure keeps the base profile's provenance.
  BOOST_TEST((p.sources.at("inter_node_link_efficiency").kind != SourceKind::kComm));
  BOOST_TEST((p.sources.at("inter_node_latency_s").kind != SourceKind::kComm));
  // A CPU rank is the device: its spec is embedded, with the ranks on the node as its devices per node.
  BOOST_TEST_REQUIRE(p.device_spec.has_value());
  BOOST_TEST(p.device_spec->gpus_per_node == 2);
  BOOST_TEST(p.device_spec->intra_node_bytes_per_s > 0);

  const nlohmann::json& comm = p.extra.at("comm");
  BOOST_TEST(comm.at("ranks").get<int>() == 2);
  BOOST_TEST(comm.at("nodes").get<int>() == 1);
  BOOST_TEST(!comm.at("library").get<std::string>().empty());
  const nlohmann::json& ms = comm.at("measurements");
  BOOST_TEST(ms.size() == 9u);  // 3 sizes x 3 kinds
  for (const auto& m : ms) {
    BOOST_TEST(m.at("ranks").get<int>() == 2);
    BOOST_TEST(m.at("nodes").get<int>() == 1);
    BOOST_TEST(m.at("bytes").get<double>() > 0);
    BOOST_TEST(m.at("p10_s").get<double>() > 0);
    BOOST_TEST(m.at("p10_s").get<double>() <= m.at("median_s").get<double>());
    BOOST_TEST(m.at("median_s").get<double>() <= m.at("p90_s").get<double>());
    BOOST_TEST(m.contains("log_residual"));
  }
  BOOST_TEST(comm.at("fit").at("parameters").size() == 2u);
}

// Each failure under mpirun, where every rank must end and one must speak; the other checks of
// the options run as a single process (the same code: one rank that is rank 0), which starts faster.
BOOST_AUTO_TEST_CASE(bad_input_is_one_line_from_rank_0_and_a_failure_on_every_rank) {
  const std::string out = " --out " + (scratch() / "bad.json").string();
  const std::string h100 = " --base " + std::string(TPSIM_DATA) + "/profiles/h100_80gb.json";
  check_one_line_error("--backend gpu" + out, "--backend 'gpu'", 2);
  check_one_line_error("--backend cpu --sizes 0" + out, "--sizes '0': a size must be positive", 2);
#ifndef TPSIM_HAVE_NCCL_COMM
  check_one_line_error("--backend cuda" + h100 + out, "this build has no NCCL communicator", 2);
#else
  bool gpu = true;
  try {
    make_backend(BackendKind::kCuda);
  } catch (const std::exception&) {
    gpu = false;
  }
  if (!gpu) check_one_line_error("--backend cuda" + h100 + out, "no CUDA device", 2);
  else BOOST_TEST_MESSAGE("a CUDA device is present: --backend cuda without a GPU is not checked here");
#endif

  check_one_line_error(out, "--backend: required", 0);
  check_one_line_error("--backend cpu", "--out: required", 0);
  check_one_line_error("--backend cpu --sizes=-4Ki" + out, "--sizes '-4Ki'", 0);
  check_one_line_error("--backend cpu --sizes 4Ki..0" + out, "--sizes '0'", 0);
  check_one_line_error("--backend cpu --sizes 4Ki..6Ki" + out, "powers of two", 0);
  check_one_line_error("--backend cpu --budget 0" + out, "--budget '0'", 0);
  check_one_line_error("--backend cpu" + h100 + out, "--backend cpu measures this machine's CPU ranks", 0);
  check_one_line_error("--backend cpu --out /nonexistent-folder/x.json", "does not exist", 0);
  check_one_line_error("--backend cpu" + out, "a collective needs at least two", 0);
  BOOST_TEST(!fs::exists(scratch() / "bad.json"));
}
