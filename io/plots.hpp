// Pictures people can look at, as standalone SVG (no scripts, fonts or network needed to view):
//   heat_map       a value over two categorical axes (sweep: MFU over model size and sequence)
//   scatter_loglog predicted against measured on log axes, with y = x and a band (validate)
//   stacked_bars   the parts of a total per item (plan: step-time breakdown per configuration)
// Plotted marks carry a class ("cell", "point", "bar") so tests can count them in the rendering.
#pragma once

#include <string>
#include <vector>

namespace tpsim {

struct HeatMap {
  std::string title;
  std::string x_label, y_label, value_label;  // value_label names the colour scale, with its unit
  std::vector<std::string> x_ticks, y_ticks;
  std::vector<std::vector<double>> values;      // [y][x]; NaN marks an empty cell (drawn hatched, not counted)
  std::vector<std::vector<std::string>> notes;  // optional hover text per cell
  std::string empty_label;                      // what a hatched cell means, in the legend ("no value" when not given)
};
std::string heat_map_svg(const HeatMap& h);

struct ScatterPoint {
  double x = 0, y = 0;
  std::string group;  // colour and legend entry
  std::string note;   // hover text
};
struct Scatter {
  std::string title, x_label, y_label;
  std::vector<ScatterPoint> points;
  // A band around y = x: y from x*(1+band_low) to x*(1+band_high); both 0 for none.
  double band_low = 0, band_high = 0;
  std::string band_label;
};
std::string scatter_loglog_svg(const Scatter& s);

struct StackedBars {
  std::string title, y_label;
  std::vector<std::string> bars;            // one per bar, left to right
  std::vector<std::string> series;          // one colour per part
  std::vector<std::vector<double>> values;  // [bar][series], non-negative
};
std::string stacked_bars_svg(const StackedBars& b);

}  // namespace tpsim
