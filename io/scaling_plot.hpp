// `tpsim scale --plot`: measured and predicted speedup against GPUs, one small panel per group,
// with perfect linear scaling dashed. Marks carry classes "measured" and "predicted" for tests.
#pragma once

#include <string>
#include <vector>

namespace tpsim {

struct SpeedupSeries {
  std::string title;              // the group
  std::vector<double> gpus;       // including 1
  std::vector<double> measured;   // speedup over the one-GPU row; NaN: missing
  std::vector<double> predicted;  // NaN: not predicted (the one-GPU row)
};
std::string speedup_panels_svg(const std::string& title, const std::vector<SpeedupSeries>& series);

}  // namespace tpsim
