// Progress of long work on a terminal: "label: 42% (3/7), about 12 s left" on stderr, redrawn in
// place, shown only after the work has run for a second and only when stderr is a terminal (so
// pipes, files and CI logs stay clean). The line is cleared when done.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tpsim {

class Progress {
 public:
  Progress(std::string label, int64_t total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(int64_t done);  // cheap when nothing is drawn
  void update(int64_t done, int64_t total);  // when the total is known only as the work runs
  void finish();

 private:
  std::string label_;
  int64_t total_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tpsim
