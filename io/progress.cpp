#include "io/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace tpsim {

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      tty_(enabled && isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { finish(); }

bool Progress::due() {
  if (!tty_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - start_).count() < 1.0 ||
      std::chrono::duration<double>(now - last_draw_).count() < 0.2)
    return false;
  last_draw_ = now;
  return true;
}

void Progress::draw(const std::string& line) {
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::update(int64_t done) {
  if (total_ <= 0 || !due()) return;
  const double elapsed = std::chrono::duration<double>(last_draw_ - start_).count();
  const double frac = static_cast<double>(done) / static_cast<double>(total_);
  char line[512];
  char eta[48] = "";
  if (frac > 0) std::snprintf(eta, sizeof eta, ", about %.0f s left", elapsed * (1.0 - frac) / frac);
  std::snprintf(line, sizeof line, "%s: %3.0f%% (%lld/%lld)%s", label_.c_str(), 100.0 * frac,
                static_cast<long long>(done), static_cast<long long>(total_), eta);
  draw(line);
}

void Progress::update(int64_t done, int64_t total) {
  total_ = total;
  update(done);
}

void Progress::show(const std::string& text) {
  if (due()) draw(text);
}

void Progress::finish() {
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace tpsim
