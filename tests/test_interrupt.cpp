// Nothing lost (issue 6): a calibration killed partway — SIGKILL, SIGINT or SIGTERM, while it
// measures or fits — leaves the profile it was to replace byte for byte as it was, and no
// temporary file beside it. Calibrations write only at the end (save_profile, once); the atomic
// writer (io/files.cpp) gives its temporary no name until the content is whole, and removes it on
// SIGINT, SIGTERM or SIGHUP; the last case here kills a write itself while it is under way.
#define BOOST_TEST_MODULE interrupt
#include <boost/test/unit_test.hpp>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/files.hpp"

extern char** environ;

namespace fs = std::filesystem;

namespace {

// A fresh folder under the system's temporary folder, removed when the test ends.
struct Scratch {
  fs::path root;
  explicit Scratch(const std::string& name)
      : root(fs::temp_directory_path() / ("tpsim_interrupt_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(root);
    fs::create_directories(root / "out");
    fs::create_directories(root / "logs");
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  fs::path out() const { return root / "out"; }
  fs::path log(const std::string& name) const { return root / "logs" / name; }
};

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every entry of `dir`, hidden ones included (the writer's temporaries start with a dot).
std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// tpsim with `args`, its stdout and stderr into `log`, stdin from /dev/null.
pid_t spawn_tpsim(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv_s = {TPSIM_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  BOOST_TEST_REQUIRE(rc == 0, "posix_spawn " << TPSIM_BINARY << ": " << std::strerror(rc));
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) BOOST_FAIL("waitpid: " << std::strerror(errno));
  return status;
}

int run_tpsim(const std::vector<std::string>& args, const fs::path& log) { return wait_for(spawn_tpsim(args, log)); }

// Starts tpsim, sends `sig` after `after_s` seconds and waits for it. Fails the test when it ended
// before the signal (a kill that hit nothing proves nothing).
int run_and_kill(const std::vector<std::string>& args, const fs::path& log, int sig, double after_s) {
  const pid_t pid = spawn_tpsim(args, log);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(after_s);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) != 0)
      BOOST_FAIL("tpsim ended before the signal (" << describe(status) << "):\n" << bytes_of(log));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  BOOST_TEST_REQUIRE(::kill(pid, sig) == 0);
  return wait_for(pid);
}

// After a kill by `sig`: the process died of it, the profile is what it was, nothing else is there.
void check_nothing_lost(int status, int sig, const fs::path& profile, const std::string& before, const fs::path& log) {
  BOOST_TEST(WIFSIGNALED(status), describe(status) << "; its output:\n" << bytes_of(log));
  if (WIFSIGNALED(status)) BOOST_TEST(WTERMSIG(status) == sig);
  BOOST_TEST((bytes_of(profile) == before), profile << " changed");
  const std::set<std::string> expected = {profile.filename().string()};
  const std::set<std::string> found = listing(profile.parent_path());
  std::string names;
  for (const auto& n : found) names += " " + n;
  BOOST_TEST((found == expected), "the output folder holds:" << names);
}

struct Signal {
  int sig;
  const char* name;
};
const Signal kSignals[] = {{SIGKILL, "SIGKILL"}, {SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}};

// A first calibration writes a valid profile to `profile`; returns its bytes.
std::string first_profile(const Scratch& s, const fs::path& profile) {
  const int status = run_tpsim(
      {"calibrate", "kernels", "--backend", "cpu", "--budget", TPSIM_TEST_BUDGET_S, "--out", profile.string()},
      s.log("first.log"));
  BOOST_TEST_REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0), describe(status) << ":\n"
                                                                                       << bytes_of(s.log("first.log")));
  const std::string before = bytes_of(profile);
  BOOST_TEST_REQUIRE(before.find("\"kernel_calibration\"") != std::string::npos);
  BOOST_TEST_REQUIRE((listing(s.out()) == std::set<std::string>{profile.filename().string()}));
  return before;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_kernel_calibration_killed_while_it_measures_leaves_the_profile_as_it_was) {
  const Scratch s("kernels");
  const fs::path profile = s.out() / "cpu.json";
  const std::string before = first_profile(s, profile);
  // The same calibration again, with a budget that keeps it measuring for half a minute; killed
  // after a second (past start-up and the bandwidth probe, among the shapes).
  for (const Signal& sig : kSignals) BOOST_TEST_CONTEXT(sig.name) {
      const fs::path log = s.log(std::string("kernels_") + sig.name + ".log");
      const int status = run_and_kill(
          {"calibrate", "kernels", "--backend", "cpu", "--budget", "30", "--out", profile.string()}, log, sig.sig, 1.0);
      check_nothing_lost(status, sig.sig, profile, before, log);
    }
}

BOOST_AUTO_TEST_CASE(a_table_calibration_killed_while_it_fits_leaves_the_profile_as_it_was) {
  const Scratch s("table");
  const fs::path profile = s.out() / "a100_80gb.json";
  const std::string before = first_profile(s, profile);
  // calibrate table fits for a second or two, then runs the held-out fits of its interval for
  // half a minute: killed in the fit, and twice among the held-out fits.
  const std::string table = std::string(TPSIM_DATA) + "/measured/a100_80gb_bf16.md";
  const double after_s[] = {1.0, 3.0, 6.0};
  for (size_t i = 0; i < std::size(kSignals); ++i)
    BOOST_TEST_CONTEXT(kSignals[i].name << " after " << after_s[i] << " s") {
      const fs::path log = s.log(std::string("table_") + kSignals[i].name + ".log");
      const int status =
          run_and_kill({"calibrate", "table", "--table", table, "--device", "a100_80gb", "--out", profile.string()},
                       log, kSignals[i].sig, after_s[i]);
      check_nothing_lost(status, kSignals[i].sig, profile, before, log);
    }
}

// The write itself interrupted: a child process replaces a profile with 512 MiB (long enough to
// write and sync that the signal lands in the middle), and is killed once it has its temporary
// file open. SIGKILL cannot be caught: the temporary then has no name yet (O_TMPFILE); SIGINT and
// SIGTERM remove a named one before they terminate.
BOOST_AUTO_TEST_CASE(a_write_killed_midway_leaves_the_old_file_and_no_temporary) {
  const Scratch s("write");
  const fs::path target = s.out() / "profile.json";
  const std::string before = "{\"before\": true}\n";
  tpsim::write_file_atomic(target, before);
  BOOST_TEST_REQUIRE(bytes_of(target) == before);
  for (const Signal& sig : kSignals) BOOST_TEST_CONTEXT(sig.name) {
      const pid_t pid = ::fork();
      BOOST_TEST_REQUIRE(pid >= 0);
      if (pid == 0) {
        try {
          const std::string big(512u << 20, 'x');
          tpsim::write_file_atomic(target, big);
        } catch (...) {
          ::_exit(3);
        }
        ::_exit(0);
      }
      // Wait until the child holds a file in the output folder open (an unnamed O_TMPFILE shows
      // in /proc as "<folder>/#inode (deleted)", a named temporary by its name).
      const std::string folder = fs::canonical(s.out()).string() + "/";
      const fs::path fds = fs::path("/proc") / std::to_string(pid) / "fd";
      bool open = false;
      int status = 0;
      for (int i = 0; i < 20000 && !open; ++i) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(fds, ec)) {
          const fs::path to = fs::read_symlink(e.path(), ec);
          if (!ec && to.string().rfind(folder, 0) == 0) open = true;
        }
        if (open) break;
        if (::waitpid(pid, &status, WNOHANG) == pid)
          BOOST_FAIL("the write ended before the signal: " << describe(status));
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
      BOOST_TEST_REQUIRE(open, "the child never opened its temporary file");
      BOOST_TEST_REQUIRE(::kill(pid, sig.sig) == 0);
      status = wait_for(pid);
      BOOST_TEST(WIFSIGNALED(status), describe(status));
      if (WIFSIGNALED(status)) BOOST_TEST(WTERMSIG(status) == sig.sig);
      BOOST_TEST((bytes_of(target) == before));
      std::string names;
      for (const auto& n : listing(s.out())) names += " " + n;
      BOOST_TEST((listing(s.out()) == std::set<std::string>{"profile.json"}), "the output folder holds:" << names);
    }
  // And a write that is left alone still replaces the file.
  tpsim::write_file_atomic(target, "after\n");
  BOOST_TEST(bytes_of(target) == "after\n");
  BOOST_TEST((listing(s.out()) == std::set<std::string>{"profile.json"}));
}
