#include "io/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "io/error.hpp"

#ifndef TPSIM_SOURCE_DATA_DIR
#define TPSIM_SOURCE_DATA_DIR ""
#endif

namespace tpsim {
namespace fs = std::filesystem;

std::string read_text_file(const fs::path& path, const std::string& what) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw Error(what + " " + path.string() + ": no such file");
  if (fs::is_directory(status)) throw Error(what + " " + path.string() + ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + " " + path.string() + ": cannot be opened: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.empty()) throw Error(what + " " + path.string() + ": file is empty");
  if (text.find('\0') != std::string::npos)
    throw Error(what + " " + path.string() + ": binary content (NUL byte), expected text");
  return text;
}

namespace {

// The temporary file of the write under way, for the signal handler below (read there, so plain
// data set before the flag).
char g_temp_name[4096];
volatile std::sig_atomic_t g_temp_named = 0;

extern "C" void remove_temp_and_terminate(int sig) {
  if (g_temp_named) ::unlink(g_temp_name);
  // SA_RESETHAND put the default action back; the signal, blocked while this handler runs, is
  // delivered again when it returns and terminates the process as it would have.
  ::raise(sig);
}

// While a write is under way, SIGINT, SIGTERM and SIGHUP remove its temporary file before they
// terminate the process — only where their action is the default (termination): a process that
// ignores or handles them keeps its own arrangement. SIGKILL cannot be caught: against it the
// temporary has no name until it is whole (O_TMPFILE, below), and is renamed over the target at once.
class TempFileGuard {
 public:
  TempFileGuard() {
    for (size_t i = 0; i < kSignals.size(); ++i) {
      struct sigaction old {};
      if (::sigaction(kSignals[i], nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
        continue;
      struct sigaction act {};
      act.sa_handler = remove_temp_and_terminate;
      sigemptyset(&act.sa_mask);
      act.sa_flags = SA_RESETHAND;
      if (::sigaction(kSignals[i], &act, &old_[i]) == 0) installed_[i] = true;
    }
  }
  ~TempFileGuard() {
    g_temp_named = 0;
    for (size_t i = 0; i < kSignals.size(); ++i)
      if (installed_[i]) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  // The temporary has a name from now on (until it is renamed or removed).
  void named(const std::string& path) {
    g_temp_named = 0;
    if (path.size() >= sizeof g_temp_name) return;
    std::memcpy(g_temp_name, path.c_str(), path.size() + 1);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    g_temp_named = 1;
  }
  void unnamed() { g_temp_named = 0; }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
  std::array<bool, 3> installed_{};
};

// One write at a time: the handler knows one temporary file.
std::mutex g_write_mutex;

// Writes all of `content` to `fd` and syncs it; errno of the failure, 0 on success.
int write_all(int fd, const std::string& content) {
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) return errno;
  if (::fsync(fd) != 0) return errno;
  return 0;
}

// A name in `dir` for the temporary, "." + the target's name + ".tmp." + six random characters.
std::string temp_name(const fs::path& dir, const fs::path& target) {
  static const char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  static std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(::getpid()));
  std::string suffix(6, 'x');
  for (char& c : suffix) c = kChars[rng() % (sizeof kChars - 1)];
  return (dir / ("." + target.filename().string() + ".tmp." + suffix)).string();
}

// The content written to an unnamed file in `dir` (O_TMPFILE), then linked under a temporary name:
// a process killed while it writes leaves nothing behind. False when the file system or the
// kernel does not offer it (the caller then writes a named temporary); Error when writing fails.
bool write_unnamed_then_link(const fs::path& dir, const fs::path& path, const std::string& content,
                             TempFileGuard& guard, std::string& linked) {
#ifdef O_TMPFILE
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  if (const int err = write_all(fd, content); err != 0) {
    ::close(fd);
    throw Error("output " + path.string() + ": write failed: " + std::strerror(err));
  }
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string name = temp_name(dir, path);
    guard.named(name);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      ::close(fd);
      linked = name;
      return true;
    }
    guard.unnamed();
    if (errno != EEXIST) break;  // no /proc, or a file system that cannot link it: write it named
  }
  ::close(fd);
#else
  (void)dir, (void)path, (void)content, (void)guard, (void)linked;
#endif
  return false;
}

// Writes `content` straight into an existing file that is not a regular file (a terminal, a pipe,
// /dev/null): renaming over it would replace the device or pipe itself.
void write_through(const fs::path& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw Error("output " + path.string() + ": cannot open: " + std::strerror(errno));
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      throw Error("output " + path.string() + ": write failed: " + err);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace

void write_file_atomic(const fs::path& target, const std::string& content) {
  std::error_code ec;
  // A symbolic link is followed: the file it names is replaced, the link stays.
  fs::path path = target;
  if (fs::is_symlink(target, ec)) {
    const fs::path resolved = fs::weakly_canonical(target, ec);
    if (!ec && !resolved.empty()) path = resolved;
  }
  if (fs::is_directory(path, ec)) throw Error("output " + target.string() + ": is a directory");
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec)) return write_through(path, content);
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw Error("output " + path.string() + ": folder " + dir.string() + " does not exist");
  const std::lock_guard<std::mutex> lock(g_write_mutex);
  TempFileGuard guard;
  std::string tmpl;
  if (!write_unnamed_then_link(dir, path, content, guard, tmpl)) {
    tmpl = (dir / ("." + path.filename().string() + ".tmp.XXXXXX")).string();
    const int fd = mkstemp(tmpl.data());
    if (fd < 0) throw Error("output " + path.string() + ": cannot create a temporary file: " + std::strerror(errno));
    guard.named(tmpl);
    if (const int err = write_all(fd, content); err != 0) {
      ::close(fd);
      ::unlink(tmpl.c_str());
      throw Error("output " + path.string() + ": write failed: " + std::strerror(err));
    }
    if (::close(fd) != 0) {
      const std::string err = std::strerror(errno);
      ::unlink(tmpl.c_str());
      throw Error("output " + path.string() + ": write failed: " + err);
    }
  }
  if (std::rename(tmpl.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmpl.c_str());
    throw Error("output " + path.string() + ": cannot replace the file: " + err);
  }
}

fs::path data_dir() {
  if (const char* env = std::getenv("TPSIM_DATA_DIR"); env && *env) {
    fs::path p(env);
    if (!fs::is_directory(p)) throw Error("TPSIM_DATA_DIR " + p.string() + ": not a directory");
    return p;
  }
  std::error_code ec;
  if (fs::path src(TPSIM_SOURCE_DATA_DIR); !src.empty() && fs::is_directory(src / "devices", ec)) return src;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "tpsim" / "data";
    if (fs::is_directory(installed / "devices", ec)) return installed;
  }
  throw Error("tpsim data folder not found: set TPSIM_DATA_DIR to the repository's data/ folder");
}

}  // namespace tpsim
