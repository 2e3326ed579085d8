// Progress of long work on a terminal, on stderr, redrawn in place: either counted work
// ("label: 42% (3/7), about 12 s left", update) or a line the caller words (show: "calibrate
// kernels: 12/340 shapes, 8 of 54 s"). Shown only after the work has run for a second, at most five
// times a second, and only when stderr is a terminal (so pipes, files and CI logs stay clean). The
// line is cleared when done.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tpsim {

class Progress {
 public:
  // `enabled` false: draws nothing, as when stderr is not a terminal.
  Progress(std::string label, int64_t total, bool enabled = true);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(int64_t done);                 // cheap when nothing is drawn
  void update(int64_t done, int64_t total);  // when the total is known only as the work runs
  void show(const std::string& text);        // the whole line, in place of the label and the count
  void finish();

 private:
  bool due();  // whether a line may be drawn now
  void draw(const std::string& line);

  std::string label_;
  int64_t total_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tpsim
