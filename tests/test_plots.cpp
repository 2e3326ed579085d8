// The pictures, rendered in a real browser (headless Chromium, Debian's package, installed by
// build.sh): each page must not be blank and must show the expected number of plotted marks, and
// every text must lie inside the picture's frame without covering another. A page around each SVG
// counts the marks that have a size on screen, measures every <text>'s box as the browser laid it
// out (getBoundingClientRect, after its rotation) against the viewBox and against the others, and
// rasterises the SVG to count the pixels that are not white; Chromium prints the resulting DOM.
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
  std::string outside = "?", overlaps = "?";  // the texts out of the frame, the pairs that overlap ("" for none)
};

// Renders `svg` in headless Chromium and reads back what the page measured.
Rendered render(const fs::path& svg, const std::string& selector) {
  const fs::path page = kDir / (svg.stem().string() + ".html");
  std::ofstream(page)
      << "<!DOCTYPE html><html><body style=\"margin:0\"><div id=\"fig\">" << slurp(svg)
      << "</div><pre id=\"result\">pending</pre><pre id=\"layout\">pending</pre><script>\n"
         "const svg = document.querySelector('#fig svg');\n"
         "let marks = 0;\n"
         "for (const m of svg.querySelectorAll('" +
             selector +
             "')) {\n"
             "  const r = m.getBoundingClientRect(); if (r.width > 0 && r.height > 0) marks++; }\n"
             // Each text's box in the picture's units (the SVG is drawn at its own size).
             "const vb = svg.viewBox.baseVal, o = svg.getBoundingClientRect(), boxes = [], outside = [];\n"
             "for (const t of svg.querySelectorAll('text')) {\n"
             "  const r = t.getBoundingClientRect(), m = t.getCTM();\n"
             "  const b = {x0: r.left - o.left, y0: r.top - o.top, x1: r.right - o.left, y1: r.bottom - o.top,\n"
             "             oblique: Math.abs(m.a) > 1e-3 && Math.abs(m.b) > 1e-3, s: t.textContent};\n"
             "  boxes.push(b);\n"
             "  if (b.x0 < -0.5 || b.y0 < -0.5 || b.x1 > vb.width + 0.5 || b.y1 > vb.height + 0.5)\n"
             "    outside.push(b.s + ' [' + [b.x0, b.y0, b.x1, b.y1].map(Math.round) + ' of ' + vb.width + 'x' + vb.height + ']'); }\n"
             // Two texts overlap when their boxes share more than 1.5 px each way; the boxes of two
             // slanted labels overlap without their letters touching, and are not compared.
             "const overlaps = [];\n"
             "for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {\n"
             "  const a = boxes[i], b = boxes[j]; if (a.oblique && b.oblique) continue;\n"
             "  if (Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0) > 1.5 && Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0) > 1.5)\n"
             "    overlaps.push(a.s + ' [' + [a.x0, a.y0, a.x1, a.y1].map(Math.round) + '] / ' + b.s + ' [' + [b.x0, b.y0, b.x1, b.y1].map(Math.round) + ']'); }\n"
             "document.getElementById('layout').textContent = 'outside=' + outside.join('; ') + '\\noverlaps=' + overlaps.join('; ');\n"
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
      "--user-data-dir=" +
      (kDir / ("profile-" + svg.stem().string())).string() + " --dump-dom file://" + page.string() + " > " +
      dom.string() + " 2> /dev/null";
  std::system(cmd.c_str());
  std::smatch m;
  const std::string text = slurp(dom);
  Rendered r;
  if (std::regex_search(text, m, std::regex("marks=(\\d+) nonwhite=(\\d+) pixels=(\\d+)")))
    r.marks = std::stol(m[1]), r.nonwhite = std::stol(m[2]), r.pixels = std::stol(m[3]);
  if (std::regex_search(text, m, std::regex("outside=([^\\n]*)\\noverlaps=([^<]*)</pre>")))
    r.outside = m[1], r.overlaps = m[2];
  return r;
}

long count(const std::string& text, const std::string& needle) {
  long n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

void check(const fs::path& svg, const std::string& selector, long expected) {
  const Rendered r = render(svg, selector);
  BOOST_TEST_MESSAGE(svg.filename().string() << ": " << r.marks << " marks rendered, " << r.nonwhite << " of "
                                             << r.pixels << " pixels not white");
  BOOST_TEST(r.marks == expected);
  BOOST_TEST(r.pixels > 0);
  BOOST_TEST(r.nonwhite > r.pixels / 50);  // not blank: more than 2% of the picture is drawn
  BOOST_TEST(r.outside == "", svg.filename().string() << ": text outside the frame: " << r.outside);
  BOOST_TEST(r.overlaps == "", svg.filename().string() << ": texts that overlap: " << r.overlaps);
}
}  // namespace

boost::test_tools::assertion_result chromium_present(boost::unit_test::test_unit_id) {
  if (have_chromium()) return boost::test_tools::assertion_result(true);
  boost::test_tools::assertion_result r(false);
  r.message() << "SKIPPED: chromium is not installed (build.sh installs Debian's chromium)";
  return r;
}

BOOST_AUTO_TEST_CASE(pictures_render_in_a_browser_with_every_plotted_mark,
                     *boost::unit_test::precondition(chromium_present)) {
  // Sweep: a heat-map cell per (model, sequence length) that fits; 30b at 32768+ and 70b do not.
  BOOST_TEST_REQUIRE(tpsim("sweep --models 125m..70b --seq 512..65536 --plot " + (kDir / "sweep.svg").string()) == 0);
  const std::string sweep = slurp(kDir / "sweep.svg");
  const long cells = count(sweep, "class=\"cell\"");
  BOOST_TEST(cells + count(sweep, "class=\"empty\"") == 9 * 8);
  check(kDir / "sweep.svg", ".cell", cells);
  // Validate: a point per measured row.
  BOOST_TEST_REQUIRE(tpsim("validate --table " + std::string(TPSIM_DATA) + "/measured/a100_40gb_bf16.md --table " +
                           std::string(TPSIM_DATA) + "/measured/h100_80gb_fp8.md --plot " +
                           (kDir / "validate.svg").string()) == 0);
  check(kDir / "validate.svg", ".point", 78 + 7);
  // Plan: a bar segment per non-zero part of each ranked configuration's step time.
  BOOST_TEST_REQUIRE(tpsim("plan --model 7b --seq 4096 --device h100_80gb --gpus 16,32 --top 4 --plot " +
                           (kDir / "plan.svg").string()) == 0);
  check(kDir / "plan.svg", ".bar", count(slurp(kDir / "plan.svg"), "class=\"bar\""));
  BOOST_TEST(count(slurp(kDir / "plan.svg"), "class=\"bar\"") >= 4 * 4);
  fs::remove_all(kDir);
}

// The pictures whose labels are longest for their size: a sweep over several devices and GPU
// counts (row labels "1b, 64, a100_40gb"), one as narrow as one sequence length (the title is
// wider than the cells), a plan of Megatron layouts (slanted labels "#1 h100_80gb x64 mb1 tp 2, pp 2,
// ..."), and validate's held-out plot. Every text inside the frame, none over another, and the
// hatched cells in the legend.
BOOST_AUTO_TEST_CASE(every_text_stays_inside_the_frame, *boost::unit_test::precondition(chromium_present)) {
  BOOST_TEST_REQUIRE(
      tpsim("sweep --models 125m,13b,70b --seq 512..8192 --gpus 8,64 --device h100_80gb,a100_40gb --plot " +
            (kDir / "several.svg").string()) == 0);
  const std::string several = slurp(kDir / "several.svg");
  check(kDir / "several.svg", ".cell", count(several, "class=\"cell\""));
  BOOST_TEST(count(several, "class=\"empty\"") == 11);  // 70b on 8 GPUs, and at 8192 on 64 A100 40GB, does not fit
  BOOST_TEST(count(several, "class=\"legend-empty\"") == 1);
  BOOST_TEST(count(several, ">nothing fits</text>") == 1);
  BOOST_TEST_REQUIRE(tpsim("sweep --models 125m,70b --seq 2048 --gpus 8,1024 --device h100_80gb,a100_40gb --plot " +
                           (kDir / "narrow.svg").string()) == 0);
  check(kDir / "narrow.svg", ".cell", count(slurp(kDir / "narrow.svg"), "class=\"cell\""));
  BOOST_TEST_REQUIRE(tpsim("plan --model 13b --seq 4096 --device h100_80gb,a100_80gb --gpus 32,64 --framework megatron "
                           "--top 6 --tokens 300B --plot " +
                           (kDir / "megatron-plan.svg").string()) == 0);
  check(kDir / "megatron-plan.svg", ".bar", count(slurp(kDir / "megatron-plan.svg"), "class=\"bar\""));
  // Every row held out; under the sanitizers by two folds instead of nine (minutes of fits there).
  const std::string cv = TPSIM_TEST_SANITIZED ? "kfold:2" : "model";
  BOOST_TEST_REQUIRE(tpsim("validate --table " + std::string(TPSIM_DATA) + "/measured/a100_40gb_bf16.md --cv " + cv +
                           " --plot " + (kDir / "held-out.svg").string()) == 0);
  check(kDir / "held-out.svg", ".point", 78);
  fs::remove_all(kDir);
}
