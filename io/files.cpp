#include "io/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

void write_file_atomic(const fs::path& path, const std::string& content) {
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error("output " + path.string() + ": is a directory");
  if (!fs::is_directory(dir, ec)) throw Error("output " + path.string() + ": folder " + dir.string() + " does not exist");
  std::string tmpl = (dir / ("." + path.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) throw Error("output " + path.string() + ": cannot create a temporary file: " + std::strerror(errno));
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmpl.c_str());
      throw Error("output " + path.string() + ": write failed: " + err);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmpl.c_str());
    throw Error("output " + path.string() + ": write failed: " + err);
  }
  ::chmod(tmpl.c_str(), 0644);
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
