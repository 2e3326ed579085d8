// The pictures, rendered in a real browser (headless Chromium, Debian's package, installed by
// build.sh): each page must not be blank and must show the expected number of plotted marks.
// A page around each SVG counts the marks that have a size on screen and rasterises the SVG to
// count the pixels that are not white; Chromium prints the resulting DOM.
#define BOOST_TEST_MODULE plots
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace fs = std::filesystem;

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const fs::path kDir = fs::temp_directory_path() / ("tpsim_plots_" + std::to_string(::getpid()));

int tpsim(const std::string& args) {
  fs::create_directories(kDir);
  return std::system((std::string(TPSIM_BINARY) + " " + args + " > /dev/null 2> " + (kDir / "err").string()).c_str());
}

bool have_chromium() { return std::system("command -v chromium > /dev/null 2>&1") == 0; }

struct Rendered {
  long marks = -1, nonwhite = -1, pixels = -1;
};

// Renders `svg` in headless Chromium and reads back what the page measured.
Rendered render(const fs::path& svg, const std::string& selector) {
  const fs::path page = kDir / (svg.stem().string() + ".html");
  std::ofstream(page) << "<!DOCTYPE html><html><body style=\"margin:0\"><div id=\"fig\">" << slurp(svg)
                      << "</div><pre id=\"result\">pending</pre><script>\n"
                         "const svg = document.querySelector('#fig svg');\n"
                         "let marks = 0;\n"
                         "for (const m of svg.querySelectorAll('" + selector + "')) {\n"
                         "  const r = m.getBoundingClientRect(); if (r.width > 0 && r.height > 0) marks++; }\n"
                         "const img = new Image();\n"
                         "img.onload = () => {\n"
                         "  const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;\n"
                         "  const g = c.getContext('2d'); g.drawImage(img, 0, 0);\n"
                         "  const d = g.getImageData(0, 0, c.width, c.height).data; let nonwhite = 0;\n"
                         "  for (let i = 0; i < d.length; i += 4) if (d[i] < 235 || d[i+1] < 235 || d[i+2] < 235) nonwhite++;\n"
                         "  document.getElementById('result').textContent = 'marks=' + marks + ' nonwhite=' + nonwhite + ' pixels=' + d.length / 4;\n"
                         "};\n"
                         "img.src = 'data:image/svg+xml;base64,' + btoa(unescape(encodeURIComponent(new XMLSerializer().serializeToString(svg))));\n"
                         "</script></body></html>\n";
  const fs::path dom = kDir / (svg.stem().string() + ".dom");
  const std::string cmd =
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync --virtual-time-budget=10000 "
      "--user-data-dir=" + (kDir / ("profile-" + svg.stem().string())).string() + " --dump-dom file://" + page.string() +
      " > " + dom.string() + " 2> /dev/null";
  std::system(cmd.c_str());
  std::smatch m;
  const std::string text = slurp(dom);
  Rendered r;
  if (std::regex_search(text, m, std::regex("marks=(\\d+) nonwhite=(\\d+) pixels=(\\d+)")))
    r = {std::stol(m[1]), std::stol(m[2]), std::stol(m[3])};
  return r;
}

long count(const std::string& text, const std::string& needle) {
  long n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

void check(const fs::path& svg, const std::string& selector, long expected) {
  const Rendered r = render(svg, selector);
  BOOST_TEST_MESSAGE(svg.filename().string() << ": " << r.marks << " marks rendered, " << r.nonwhite << " of " << r.pixels
                                             << " pixels not white");
  BOOST_TEST(r.marks == expected);
  BOOST_TEST(r.pixels > 0);
  BOOST_TEST(r.nonwhite > r.pixels / 50);  // not blank: more than 2% of the picture is drawn
}
}  // namespace

BOOST_AUTO_TEST_CASE(pictures_render_in_a_browser_with_every_plotted_mark,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       if (have_chromium()) return boost::test_tools::assertion_result(true);
                       boost::test_tools::assertion_result r(false);
                       r.message() << "SKIPPED: chromium is not installed (build.sh installs Debian's chromium)";
                       return r;
                     })) {
  // Sweep: a heat-map cell per (model, sequence length) that fits; 30b at 32768+ and 70b do not.
  BOOST_TEST_REQUIRE(tpsim("sweep --models 125m..70b --seq 512..65536 --plot " + (kDir / "sweep.svg").string()) == 0);
  const std::string sweep = slurp(kDir / "sweep.svg");
  const long cells = count(sweep, "class=\"cell\"");
  BOOST_TEST(cells + count(sweep, "class=\"empty\"") == 9 * 8);
  check(kDir / "sweep.svg", ".cell", cells);
  // Validate: a point per measured row.
  BOOST_TEST_REQUIRE(tpsim("validate --table " + std::string(TPSIM_DATA) + "/measured/a100_40gb_bf16.md --table " +
                           std::string(TPSIM_DATA) + "/measured/h100_80gb_fp8.md --plot " + (kDir / "validate.svg").string()) == 0);
  check(kDir / "validate.svg", ".point", 78 + 7);
  // Plan: a bar segment per non-zero part of each ranked configuration's step time.
  BOOST_TEST_REQUIRE(tpsim("plan --model 7b --seq 4096 --device h100_80gb --gpus 16,32 --top 4 --plot " +
                           (kDir / "plan.svg").string()) == 0);
  check(kDir / "plan.svg", ".bar", count(slurp(kDir / "plan.svg"), "class=\"bar\""));
  BOOST_TEST(count(slurp(kDir / "plan.svg"), "class=\"bar\"") >= 4 * 4);
  fs::remove_all(kDir);
}
