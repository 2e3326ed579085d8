// Running the built tpsim binary as a user runs it, for the suites that test the command line:
// run_tpsim("predict --model 7b ...") returns its exit status, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tpsim::testing {

struct Run {
  int status = -1;  // exit status; -1 when the process did not exit normally (a signal)
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A folder for this test process's files, under the system's temporary folder.
inline std::filesystem::path scratch_dir() {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tpsim_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// `tpsim ARGS` through the shell (ARGS may hold quotes and redirections of stdin).
inline Run run_tpsim(const std::string& args) {
  static int n = 0;
  const std::filesystem::path out = scratch_dir() / ("out" + std::to_string(n));
  const std::filesystem::path err = scratch_dir() / ("err" + std::to_string(n));
  ++n;
  const std::string cmd = std::string(TPSIM_BINARY) + " " + args + " > " + out.string() + " 2> " + err.string();
  const int rc = std::system(cmd.c_str());
  Run r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}
inline Run run(const std::string& args) { return run_tpsim(args); }

inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The value of `column` in the first data row of a CSV output ("" when it has no such cell).
inline std::string csv_cell(const std::string& csv, const std::string& column) {
  const auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    return cells;
  };
  const std::vector<std::string> head = split(first_line(csv)), row = split(first_line(csv.substr(csv.find('\n') + 1)));
  const auto it = std::find(head.begin(), head.end(), column);
  const auto i = static_cast<size_t>(it - head.begin());
  return it == head.end() || i >= row.size() ? "" : row[i];
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace tpsim::testing
