#include "io/scaling_plot.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace tpsim {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

constexpr double kPanelW = 260, kPanelH = 200, kPad = 36;

void panel(std::ostringstream& o, const SpeedupSeries& s, double x0, double y0) {
  double max_g = 1;
  for (double g : s.gpus) max_g = std::max(max_g, g);
  const double w = kPanelW - 2 * kPad, h = kPanelH - 2 * kPad;
  const auto px = [&](double g) { return x0 + kPad + w * g / max_g; };
  const auto py = [&](double v) { return y0 + kPanelH - kPad - h * v / max_g; };
  o << "<g><text x=\"" << x0 + kPanelW / 2 << "\" y=\"" << y0 + 14 << "\" font-size=\"9\" text-anchor=\"middle\">"
    << escape(s.title) << "</text>\n";
  o << "<rect x=\"" << x0 + kPad << "\" y=\"" << y0 + kPad << "\" width=\"" << w << "\" height=\"" << h
    << "\" fill=\"none\" stroke=\"#999\"/>\n";
  o << "<line x1=\"" << px(0) << "\" y1=\"" << py(0) << "\" x2=\"" << px(max_g) << "\" y2=\"" << py(max_g)
    << "\" stroke=\"#bbb\" stroke-dasharray=\"4 3\"/>\n";
  o << "<text x=\"" << x0 + kPanelW / 2 << "\" y=\"" << y0 + kPanelH - 8
    << "\" font-size=\"9\" text-anchor=\"middle\">GPUs (max " << max_g << ")</text>\n";
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    if (std::isfinite(s.measured[i]))
      o << "<circle class=\"measured\" cx=\"" << px(s.gpus[i]) << "\" cy=\"" << py(s.measured[i])
        << "\" r=\"3.5\" fill=\"#1f77b4\"><title>" << s.gpus[i] << " GPUs: measured " << s.measured[i]
        << "</title></circle>\n";
    if (std::isfinite(s.predicted[i]))
      o << "<circle class=\"predicted\" cx=\"" << px(s.gpus[i]) << "\" cy=\"" << py(s.predicted[i])
        << "\" r=\"5\" fill=\"none\" stroke=\"#d62728\"><title>" << s.gpus[i] << " GPUs: predicted " << s.predicted[i]
        << "</title></circle>\n";
  }
  o << "</g>\n";
}

}  // namespace

std::string speedup_panels_svg(const std::string& title, const std::vector<SpeedupSeries>& series) {
  const size_t cols = std::min<size_t>(5, std::max<size_t>(1, series.size()));
  const size_t rows = (series.size() + cols - 1) / cols;
  const double width = static_cast<double>(cols) * kPanelW, height = 40 + static_cast<double>(rows) * kPanelH;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"10\" y=\"20\" font-size=\"13\">" << escape(title)
    << " (speedup over the one-GPU row; filled: measured, ring: predicted held out, dashed: linear)</text>\n";
  for (size_t i = 0; i < series.size(); ++i)
    panel(o, series[i], static_cast<double>(i % cols) * kPanelW, 30 + static_cast<double>(i / cols) * kPanelH);
  o << "</svg>\n";
  return o.str();
}

}  // namespace tpsim
