#include "io/plots.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "io/error.hpp"

namespace tpsim {
namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string fmt(double v, int decimals = 1) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

// A number as a tick label: 1.2k, 3M, 0.5.
std::string short_number(double v) {
  const double a = std::fabs(v);
  char b[64];
  if (a >= 1e9) std::snprintf(b, sizeof b, "%gG", v / 1e9);
  else if (a >= 1e6) std::snprintf(b, sizeof b, "%gM", v / 1e6);
  else if (a >= 1e3) std::snprintf(b, sizeof b, "%gk", v / 1e3);
  else std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// Tableau-10: distinguishable categorical colours.
const char* category_colour(size_t i) {
  static const char* k[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                            "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return k[i % 10];
}

// Viridis at t in [0, 1], by linear interpolation between nine stops.
std::string viridis(double t) {
  static const double stops[9][3] = {{68, 1, 84},    {71, 44, 122}, {59, 81, 139},  {44, 113, 142}, {33, 144, 141},
                                     {39, 173, 129}, {92, 200, 99}, {170, 220, 50}, {253, 231, 37}};
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * 8.0;
  const int i = std::min(7, static_cast<int>(t));
  const double f = t - i;
  char b[16];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", static_cast<int>(stops[i][0] + f * (stops[i + 1][0] - stops[i][0])),
                static_cast<int>(stops[i][1] + f * (stops[i + 1][1] - stops[i][1])),
                static_cast<int>(stops[i][2] + f * (stops[i + 1][2] - stops[i][2])));
  return b;
}

void check_finite(double v, const char* what) {
  if (!std::isfinite(v)) throw Error(std::string("internal error: a non-finite value reached the plot (") + what + ")");
}

// How wide `s` is at `px` pixels, taken high so that margins made from it hold the text: DejaVu
// Sans (the font asked for; Chromium's fallbacks are narrower) averages about 0.55 em a character
// over lower case, 0.64 em over digits and up to 0.7 em over capitals; bold about a tenth more.
double text_px(const std::string& s, double px, bool bold = false) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return static_cast<double>(n) * px * (bold ? 0.72 : 0.65);
}

double widest_px(const std::vector<std::string>& texts, double px) {
  double w = 0;
  for (const auto& t : texts) w = std::max(w, text_px(t, px));
  return w;
}

// The left margin of a plot: a rotated axis title (x 12..28) and the tick labels ending 6 left of the axis.
double left_margin(const std::vector<std::string>& tick_labels) {
  return std::max(80.0, 40.0 + widest_px(tick_labels, 12) + 6);
}

// The figure's width: what the plot needs, and never narrower than its title.
double figure_width(double plot_width, const std::string& title) {
  return std::max(plot_width, text_px(title, 15, true) + 24);
}

std::string header(double w, double h, const std::string& title) {
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt(w, 0) + "\" height=\"" + fmt(h, 0) +
                  "\" viewBox=\"0 0 " + fmt(w, 0) + " " + fmt(h, 0) +
                  "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  s += "<title>" + esc(title) + "</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + fmt(w / 2, 0) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" +
       esc(title) + "</text>\n";
  return s;
}

// Nice linear ticks covering [lo, hi].
std::vector<double> linear_ticks(double lo, double hi, int target = 6) {
  const double span = std::max(hi - lo, 1e-300);
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  return t;
}

}  // namespace

namespace {

// Where the heat map's parts go, from its labels: the cells, the colour scale beside them with the
// hatched swatch under it, the axis titles, and a figure that holds them all.
struct HeatFrame {
  double cw = 64, ch = 30, top = 44;
  double left = 0, grid_w = 0, grid_h = 0;
  double bar_x = 0, bar_h = 0, value_x = 0;
  double x_title_x = 0, x_title_y = 0, y_title_y = 0;
  double w = 0, height = 0;
};

HeatFrame heat_frame(const HeatMap& h, const std::string& hi, const std::string& lo, const std::string& empty) {
  HeatFrame f;
  f.left = left_margin(h.y_ticks);
  f.grid_w = f.cw * static_cast<double>(h.x_ticks.size());
  f.grid_h = f.ch * static_cast<double>(h.y_ticks.size());
  f.bar_x = f.left + f.grid_w + 30;
  f.bar_h = std::max({f.grid_h, 60.0, text_px(h.value_label, 12) + 8});
  f.value_x = f.bar_x + 22 + std::max(text_px(hi, 12), text_px(lo, 12)) + 20;  // beside the bar's labels
  // Below the cells their x labels; below the bar the hatched swatch; then the x title.
  const double below = std::max(f.grid_h + 24, f.bar_h + (empty.empty() ? 8 : 34));
  f.x_title_y = f.top + below + 18;
  const double x_title_w = text_px(h.x_label, 12);
  f.x_title_x = std::max(f.left + f.grid_w / 2, f.left + x_title_w / 2);
  // The y title centred on the rows, starting no higher than they do.
  const double span = text_px(h.y_label, 12);
  f.y_title_y = std::max(f.top + f.grid_h / 2, f.top + span / 2);
  f.height = std::max(f.x_title_y + 12, f.y_title_y + span / 2 + 8);
  f.w = figure_width(
      std::max({f.value_x + 12, f.bar_x + 22 + text_px(empty, 12) + 10, f.x_title_x + x_title_w / 2 + 10}), h.title);
  return f;
}

// The colour scale from lo to hi, its title, and the swatch of the hatched cells with what they mean.
std::string heat_scale(const HeatMap& h, const HeatFrame& f, const std::string& hi, const std::string& lo,
                       const std::string& empty) {
  std::string s;
  for (int i = 0; i < 50; ++i)
    s += "<rect x=\"" + fmt(f.bar_x, 0) + "\" y=\"" + fmt(f.top + f.bar_h * (1 - (i + 1) / 50.0), 2) +
         "\" width=\"16\" height=\"" + fmt(f.bar_h / 50 + 0.5, 2) + "\" fill=\"" + viridis(i / 49.0) + "\"/>\n";
  s += "<text x=\"" + fmt(f.bar_x + 22, 0) + "\" y=\"" + fmt(f.top + 10, 0) + "\">" + hi + "</text>\n";
  s += "<text x=\"" + fmt(f.bar_x + 22, 0) + "\" y=\"" + fmt(f.top + f.bar_h, 0) + "\">" + lo + "</text>\n";
  s += "<text transform=\"translate(" + fmt(f.value_x, 0) + "," + fmt(f.top + f.bar_h / 2, 0) +
       ") rotate(-90)\" text-anchor=\"middle\">" + esc(h.value_label) + "</text>\n";
  if (empty.empty()) return s;
  const double y = f.top + f.bar_h + 14;
  s += "<rect class=\"legend-empty\" x=\"" + fmt(f.bar_x, 0) + "\" y=\"" + fmt(y, 0) +
       "\" width=\"16\" height=\"14\" fill=\"url(#hatch)\" stroke=\"#bbb\"/>\n";
  return s + "<text x=\"" + fmt(f.bar_x + 22, 0) + "\" y=\"" + fmt(y + 11, 0) + "\">" + esc(empty) + "</text>\n";
}

std::string heat_cell(const HeatMap& h, const HeatFrame& f, size_t yi, size_t xi, double lo, double hi) {
  const double x = f.left + f.cw * static_cast<double>(xi), y = f.top + f.ch * static_cast<double>(yi),
               v = h.values[yi][xi];
  const std::string note = yi < h.notes.size() && xi < h.notes[yi].size() ? h.notes[yi][xi] : "";
  const std::string box = "x=\"" + fmt(x, 1) + "\" y=\"" + fmt(y, 1) + "\" width=\"" + fmt(f.cw - 1, 1) +
                          "\" height=\"" + fmt(f.ch - 1, 1) + "\"";
  if (!std::isfinite(v))
    return "<rect class=\"empty\" " + box + " fill=\"url(#hatch)\"><title>" + esc(note.empty() ? "no value" : note) +
           "</title></rect>\n";
  const double t = hi > lo ? (v - lo) / (hi - lo) : 0.5;
  return "<rect class=\"cell\" " + box + " fill=\"" + viridis(t) + "\"><title>" +
         esc(h.y_ticks[yi] + ", " + h.x_ticks[xi] + ": " + fmt(v, 1) + (note.empty() ? "" : " (" + note + ")")) +
         "</title></rect>\n" + "<text x=\"" + fmt(x + f.cw / 2, 1) + "\" y=\"" + fmt(y + f.ch / 2 + 4, 1) +
         "\" text-anchor=\"middle\" fill=\"" + (t > 0.6 ? "black" : "white") + "\" font-size=\"11\">" + fmt(v, 1) +
         "</text>\n";
}

}  // namespace

std::string heat_map_svg(const HeatMap& h) {
  const size_t ny = h.y_ticks.size(), nx = h.x_ticks.size();
  if (h.values.size() != ny) throw Error("internal error: heat map rows do not match its y ticks");
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  bool any_empty = false;
  for (const auto& row : h.values) {
    if (row.size() != nx) throw Error("internal error: heat map columns do not match its x ticks");
    for (double v : row) {
      any_empty = any_empty || !std::isfinite(v);
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  }
  if (!std::isfinite(lo)) lo = hi = 0;
  const std::string hi_text = fmt(hi, 1), lo_text = fmt(lo, 1);
  const std::string empty = any_empty ? (h.empty_label.empty() ? "no value" : h.empty_label) : "";
  const HeatFrame f = heat_frame(h, hi_text, lo_text, empty);
  std::string s = header(f.w, f.height, h.title);
  s +=
      "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#bbb\" stroke-width=\"2\"/></pattern></defs>\n";
  for (size_t yi = 0; yi < ny; ++yi) {
    const double y = f.top + f.ch * static_cast<double>(yi);
    s += "<text x=\"" + fmt(f.left - 6, 0) + "\" y=\"" + fmt(y + f.ch / 2 + 4, 0) + "\" text-anchor=\"end\">" +
         esc(h.y_ticks[yi]) + "</text>\n";
    for (size_t xi = 0; xi < nx; ++xi) s += heat_cell(h, f, yi, xi, lo, hi);
  }
  for (size_t xi = 0; xi < nx; ++xi)
    s += "<text x=\"" + fmt(f.left + f.cw * (static_cast<double>(xi) + 0.5), 1) + "\" y=\"" +
         fmt(f.top + f.grid_h + 16, 0) + "\" text-anchor=\"middle\">" + esc(h.x_ticks[xi]) + "</text>\n";
  s += "<text x=\"" + fmt(f.x_title_x, 0) + "\" y=\"" + fmt(f.x_title_y, 0) + "\" text-anchor=\"middle\">" +
       esc(h.x_label) + "</text>\n";
  s += "<text transform=\"translate(22," + fmt(f.y_title_y, 0) + ") rotate(-90)\" text-anchor=\"middle\">" +
       esc(h.y_label) + "</text>\n";
  return s + heat_scale(h, f, hi_text, lo_text, empty) + "</svg>\n";
}

namespace {

// The log-log plot's axes, both alike: whole decades around the data, at least one.
std::pair<double, double> scatter_decades(const Scatter& sc) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const auto& p : sc.points) {
    check_finite(p.x, "scatter x");
    check_finite(p.y, "scatter y");
    if (p.x <= 0 || p.y <= 0) throw Error("internal error: a log-log plot needs positive values");
    lo = std::min({lo, p.x, p.y});
    hi = std::max({hi, p.x, p.y});
  }
  if (sc.points.empty()) lo = 1, hi = 10;
  const double a0 = std::floor(std::log10(lo));
  return {a0, std::max(std::ceil(std::log10(hi)), a0 + 1)};
}

}  // namespace

std::string scatter_loglog_svg(const Scatter& sc) {
  const std::pair<double, double> decades = scatter_decades(sc);  // not bound: clang 14's lambdas cannot capture
  const double a0 = decades.first, a1 = decades.second;
  std::vector<std::string> legend = {"y = x", sc.band_label};
  for (const auto& p : sc.points) legend.push_back(p.group);
  const double left = 80, top = 44, size = 440, bottom = 64;
  const double right = std::max(120.0, 40 + widest_px(legend, 12) + 12);  // the legend: a mark, then its text
  const double w = figure_width(left + size + right, sc.title), height = top + size + bottom;
  const auto X = [&](double v) { return left + (std::log10(v) - a0) / (a1 - a0) * size; };
  const auto Y = [&](double v) { return top + size - (std::log10(v) - a0) / (a1 - a0) * size; };
  std::string s = header(w, height, sc.title);
  // Grid and ticks: decades, with 2 and 5 between.
  for (double e = a0; e <= a1 + 1e-9; ++e)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, e);
      if (std::log10(v) > a1 + 1e-9) continue;
      const bool major = m == 1.0;
      s += "<line x1=\"" + fmt(X(v), 1) + "\" y1=\"" + fmt(top, 0) + "\" x2=\"" + fmt(X(v), 1) + "\" y2=\"" +
           fmt(top + size, 0) + "\" stroke=\"" + (major ? "#ddd" : "#f0f0f0") + "\"/>\n";
      s += "<line x1=\"" + fmt(left, 0) + "\" y1=\"" + fmt(Y(v), 1) + "\" x2=\"" + fmt(left + size, 0) + "\" y2=\"" +
           fmt(Y(v), 1) + "\" stroke=\"" + (major ? "#ddd" : "#f0f0f0") + "\"/>\n";
      if (major || a1 - a0 <= 2) {
        // 21 below the axis: clear of the lowest y label, whose box ends 7 below it at the corner.
        s += "<text x=\"" + fmt(X(v), 1) + "\" y=\"" + fmt(top + size + 21, 0) + "\" text-anchor=\"middle\">" +
             short_number(v) + "</text>\n";
        s += "<text x=\"" + fmt(left - 6, 0) + "\" y=\"" + fmt(Y(v) + 4, 1) + "\" text-anchor=\"end\">" +
             short_number(v) + "</text>\n";
      }
    }
  s += "<rect x=\"" + fmt(left, 0) + "\" y=\"" + fmt(top, 0) + "\" width=\"" + fmt(size, 0) + "\" height=\"" +
       fmt(size, 0) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  const double v0 = std::pow(10.0, a0), v1 = std::pow(10.0, a1);
  if (sc.band_low != 0 || sc.band_high != 0) {
    // The band y = x(1 + low) .. x(1 + high), clipped to the plot.
    const auto clip = [&](double v) { return std::clamp(v, v0, v1); };
    s += "<polygon class=\"band\" fill=\"#4e79a7\" fill-opacity=\"0.15\" points=\"" + fmt(X(v0), 1) + "," +
         fmt(Y(clip(v0 * (1 + sc.band_low))), 1) + " " + fmt(X(v1), 1) + "," + fmt(Y(clip(v1 * (1 + sc.band_low))), 1) +
         " " + fmt(X(v1), 1) + "," + fmt(Y(clip(v1 * (1 + sc.band_high))), 1) + " " + fmt(X(v0), 1) + "," +
         fmt(Y(clip(v0 * (1 + sc.band_high))), 1) + "\"><title>" + esc(sc.band_label) + "</title></polygon>\n";
  }
  s += "<line x1=\"" + fmt(X(v0), 1) + "\" y1=\"" + fmt(Y(v0), 1) + "\" x2=\"" + fmt(X(v1), 1) + "\" y2=\"" +
       fmt(Y(v1), 1) + "\" stroke=\"#333\" stroke-dasharray=\"5,4\"/>\n";
  std::vector<std::string> groups;
  for (const auto& p : sc.points)
    if (std::find(groups.begin(), groups.end(), p.group) == groups.end()) groups.push_back(p.group);
  for (const auto& p : sc.points) {
    const size_t g = static_cast<size_t>(std::find(groups.begin(), groups.end(), p.group) - groups.begin());
    s += "<circle class=\"point\" cx=\"" + fmt(X(p.x), 1) + "\" cy=\"" + fmt(Y(p.y), 1) + "\" r=\"4\" fill=\"" +
         category_colour(g) + "\" fill-opacity=\"0.8\" stroke=\"white\" stroke-width=\"0.5\"><title>" + esc(p.note) +
         "</title></circle>\n";
  }
  s += "<text x=\"" + fmt(left + size / 2, 0) + "\" y=\"" + fmt(height - 22, 0) + "\" text-anchor=\"middle\">" +
       esc(sc.x_label) + "</text>\n";
  s += "<text transform=\"translate(20," + fmt(top + size / 2, 0) + ") rotate(-90)\" text-anchor=\"middle\">" +
       esc(sc.y_label) + "</text>\n";
  // Legend.
  double ly = top + 10;
  for (size_t g = 0; g < groups.size(); ++g, ly += 20) {
    s += "<circle cx=\"" + fmt(left + size + 24, 0) + "\" cy=\"" + fmt(ly, 0) + "\" r=\"5\" fill=\"" +
         category_colour(g) + "\"/>\n";
    s += "<text x=\"" + fmt(left + size + 36, 0) + "\" y=\"" + fmt(ly + 4, 0) + "\">" + esc(groups[g]) + "</text>\n";
  }
  s += "<line x1=\"" + fmt(left + size + 14, 0) + "\" y1=\"" + fmt(ly, 0) + "\" x2=\"" + fmt(left + size + 34, 0) +
       "\" y2=\"" + fmt(ly, 0) + "\" stroke=\"#333\" stroke-dasharray=\"5,4\"/><text x=\"" + fmt(left + size + 40, 0) +
       "\" y=\"" + fmt(ly + 4, 0) + "\">y = x</text>\n";
  if (sc.band_low != 0 || sc.band_high != 0)
    s += "<rect x=\"" + fmt(left + size + 14, 0) + "\" y=\"" + fmt(ly + 12, 0) +
         "\" width=\"20\" height=\"10\" fill=\"#4e79a7\" fill-opacity=\"0.15\"/>"
         "<text x=\"" +
         fmt(left + size + 40, 0) + "\" y=\"" + fmt(ly + 21, 0) + "\">" + esc(sc.band_label) + "</text>\n";
  return s + "</svg>\n";
}

std::string stacked_bars_svg(const StackedBars& b) {
  double top_value = 0;
  for (const auto& row : b.values) {
    if (row.size() != b.series.size()) throw Error("internal error: a bar's parts do not match the series");
    double t = 0;
    for (double v : row) {
      check_finite(v, "bar part");
      t += std::max(0.0, v);
    }
    top_value = std::max(top_value, t);
  }
  if (top_value <= 0) top_value = 1;
  const std::vector<double> ticks = linear_ticks(0, top_value);
  const double axis_top = std::max(top_value, ticks.empty() ? top_value : ticks.back());
  // Each bar's label hangs from under it, turned 35 degrees: as deep as sin 35 of its length (plus
  // its height), and reaching cos 35 of its length to the right. The legend goes right of the bars.
  const double bw = 46, gap = 18, left = 80, top = 44, plot_h = 360, turn = 35.0 * 3.14159265358979 / 180.0;
  const double plot_right = left + static_cast<double>(b.bars.size()) * (bw + gap) + gap;
  double bottom = 64, reach = 0;
  for (size_t i = 0; i < b.bars.size(); ++i) {
    const double len = text_px(b.bars[i], 11), x = left + gap + static_cast<double>(i) * (bw + gap) + bw / 2;
    bottom = std::max(bottom, 12 + len * std::sin(turn) + 11 * std::cos(turn) + 12);
    reach = std::max(reach, x + len * std::cos(turn) + 12);
  }
  const double legend_w = 20 + 18 + widest_px(b.series, 12) + 12;
  const double w = figure_width(std::max(plot_right + legend_w, reach), b.title), height = top + plot_h + bottom;
  const auto Y = [&](double v) { return top + plot_h - v / axis_top * plot_h; };
  std::string s = header(w, height, b.title);
  for (double t : ticks) {
    s += "<line x1=\"" + fmt(left, 0) + "\" y1=\"" + fmt(Y(t), 1) + "\" x2=\"" + fmt(plot_right, 0) + "\" y2=\"" +
         fmt(Y(t), 1) + "\" stroke=\"#e4e4e4\"/>\n";
    s += "<text x=\"" + fmt(left - 6, 0) + "\" y=\"" + fmt(Y(t) + 4, 1) + "\" text-anchor=\"end\">" + short_number(t) +
         "</text>\n";
  }
  for (size_t i = 0; i < b.bars.size(); ++i) {
    const double x = left + gap + static_cast<double>(i) * (bw + gap);
    double base = 0;
    for (size_t k = 0; k < b.series.size(); ++k) {
      const double v = std::max(0.0, b.values[i][k]);
      if (v <= 0) continue;
      s += "<rect class=\"bar\" x=\"" + fmt(x, 1) + "\" y=\"" + fmt(Y(base + v), 1) + "\" width=\"" + fmt(bw, 0) +
           "\" height=\"" + fmt(Y(base) - Y(base + v), 2) + "\" fill=\"" + category_colour(k) + "\"><title>" +
           esc(b.bars[i] + ": " + b.series[k] + " " + fmt(v, 3)) + "</title></rect>\n";
      base += v;
    }
    s += "<text transform=\"translate(" + fmt(x + bw / 2, 1) + "," + fmt(top + plot_h + 12, 0) +
         ") rotate(35)\" font-size=\"11\">" + esc(b.bars[i]) + "</text>\n";
  }
  s += "<line x1=\"" + fmt(left, 0) + "\" y1=\"" + fmt(top + plot_h, 0) + "\" x2=\"" + fmt(plot_right, 0) + "\" y2=\"" +
       fmt(top + plot_h, 0) + "\" stroke=\"#333\"/>\n";
  s += "<text transform=\"translate(20," + fmt(top + plot_h / 2, 0) + ") rotate(-90)\" text-anchor=\"middle\">" +
       esc(b.y_label) + "</text>\n";
  double ly = top + 10;
  for (size_t k = 0; k < b.series.size(); ++k, ly += 20) {
    s += "<rect x=\"" + fmt(plot_right + 20, 0) + "\" y=\"" + fmt(ly - 8, 0) + "\" width=\"12\" height=\"12\" fill=\"" +
         category_colour(k) + "\"/>\n";
    s += "<text x=\"" + fmt(plot_right + 38, 0) + "\" y=\"" + fmt(ly + 2, 0) + "\">" + esc(b.series[k]) + "</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace tpsim
