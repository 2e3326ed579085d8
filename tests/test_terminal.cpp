// What a person sees on a terminal (io/terminal.hpp): the compact table fitted to the width, the
// vertical list of one predict, --columns for every format, and the decision to use them (only
// for a terminal, never for a pipe or a file, so the golden outputs keep every column).
#define BOOST_TEST_MODULE terminal
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli/report.hpp"
#include "common.hpp"
#include "io/catalog.hpp"
#include "io/devices.hpp"
#include "io/terminal.hpp"
#include "model/simulator.hpp"
#include "run_tpsim.hpp"

using namespace tpsim;
using namespace tpsim::test;
using tpsim::testing::run_tpsim;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', start)) {
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

// Real predictions, as sweep prints them: 125m, 7b and 70b at 2048 on 8 H100s (70b does not fit).
OutputTable sweep_table(bool layout) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  OutputTable t;
  t.title = "sweep";
  t.columns = prediction_columns(layout);
  for (const char* name : {"125m", "7b", "70b"}) {
    TrainConfig cfg;
    cfg.seq_len = 2048;
    cfg.n_gpus = 8;
    cfg.micro_batch = 2;
    cfg.global_batch = 64;
    const Prediction p = predict(catalog.get(name), device, profile.params, cfg);
    std::vector<Cell> row = prediction_row(name, device.id, cfg, p, std::nullopt);
    if (layout) add_layout_cells(cfg, row);
    t.add_row(std::move(row));
  }
  return t;
}

// The header line of a compact table, split on runs of blanks.
std::vector<std::string> header_labels(const std::string& text) {
  std::vector<std::string> labels;
  const std::string header = lines_of(text).front();
  size_t i = 0;
  while (i < header.size()) {
    const size_t end = header.find("  ", i);
    labels.push_back(header.substr(i, end == std::string::npos ? std::string::npos : end - i));
    if (end == std::string::npos) break;
    i = header.find_first_not_of(' ', end);
  }
  return labels;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_compact_table_fits_the_width_with_the_columns_read_first) {
  // The markdown row of today's sweep: every column, far wider than a terminal.
  const OutputTable t = sweep_table(/*layout=*/true);
  size_t md_width = 0;
  for (const auto& line : lines_of(render({t}, Format::kMarkdown))) md_width = std::max(md_width, line.size());
  BOOST_TEST(md_width > 300u);

  const std::string text = render_compact(t, 100, terminal_layout(), /*chosen=*/false);
  BOOST_TEST_MESSAGE("compact table at 100 columns:\n" << text);
  for (const auto& line : lines_of(text)) BOOST_TEST(line.size() <= 100u, "line of " << line.size() << ": " << line);
  const std::vector<std::string> labels = header_labels(text);
  // The columns a person reads first, in this order, at 100 characters.
  for (const char* want : {"Model", "Seq", "GPUs", "GPU", "Sharding", "MB", "Tok/s/GPU", "MFU %", "Mem GiB", "Fits"})
    BOOST_TEST((std::find(labels.begin(), labels.end(), want) != labels.end()), "missing " << want);
  BOOST_TEST(labels.front() == "Model");
  BOOST_TEST(labels.back() == "Fits");
  // One line a model, plus the header, the rule and the footer naming what was left out.
  std::string flat = text;
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  BOOST_TEST(contains(flat, " more columns. Every column: --format md"));
  BOOST_TEST(contains(text, "--format md"));
  BOOST_TEST(contains(text, "\n70b "));
  BOOST_TEST(contains(lines_of(text)[4], " no"));  // 70b does not fit on 8 H100s at micro-batch 2
}

BOOST_AUTO_TEST_CASE(a_narrow_terminal_drops_the_columns_kept_least_and_never_wraps_a_row) {
  const OutputTable t = sweep_table(/*layout=*/false);
  for (int width : {40, 60, 80}) {
    const std::string text = render_compact(t, width, terminal_layout(), false);
    const auto lines = lines_of(text);
    // Header, rule and 3 rows, each one line, each within the width; then the footer.
    BOOST_TEST(lines.size() >= 5u);
    for (const auto& line : lines) BOOST_TEST(line.size() <= static_cast<size_t>(width), width << ": " << line);
    BOOST_TEST(lines[2].rfind("125m", 0) == 0u);
    BOOST_TEST(lines[3].rfind("7b", 0) == 0u);
    BOOST_TEST(lines[4].rfind("70b", 0) == 0u);
    const auto labels = header_labels(text);
    BOOST_TEST(labels.front() == "Model");  // kept longest
    BOOST_TEST((std::find(labels.begin(), labels.end(), "GPUs") != labels.end()));
  }
  // At 40 the layout columns are gone and the footer names them.
  const std::string narrow = render_compact(t, 40, terminal_layout(), false);
  BOOST_TEST(!contains(lines_of(narrow).front(), "Sharding"));
  BOOST_TEST(contains(narrow, "Sharding Strategy"));
}

BOOST_AUTO_TEST_CASE(long_text_is_cut_to_the_width_and_the_footer_says_so) {
  OutputTable t;
  t.title = "bench";
  t.columns = {"Benchmark", "Value", "Unit"};
  t.add_row({Cell::str(std::string(150, 'x')), Cell::num(12.5, 1), Cell::str("s")});
  const std::string text = render_compact(t, 80, terminal_layout(), false);
  for (const auto& line : lines_of(text)) BOOST_TEST(line.size() <= 80u);
  BOOST_TEST(contains(text, "xxx...   12.5  s"));  // Value: 5 wide, its header's width
  BOOST_TEST(lines_of(text)[0].size() == 80u);     // the header: the cut column takes the width that is left
  BOOST_TEST(contains(text, "was cut"));
}

BOOST_AUTO_TEST_CASE(a_single_prediction_is_a_vertical_list_with_its_step_time_breakdown) {
  OutputTable t = sweep_table(false);
  t.rows.resize(1);  // 125m
  OutputOptions o;
  o.width = 100;
  o.layout = terminal_layout();
  const std::string text = render({t}, o);
  BOOST_TEST_MESSAGE("vertical list:\n" << text);
  const auto lines = lines_of(text);
  BOOST_TEST(lines.front().rfind("Model", 0) == 0u);
  BOOST_TEST(contains(lines.front(), "125m"));
  for (const auto& line : lines) BOOST_TEST(line.size() <= 100u);
  // Every column is listed once (plus two blank lines between the groups).
  BOOST_TEST(lines.size() == t.columns.size() + 2);
  // The step time, then its parts indented with their shares, which add up to about 100%.
  size_t step = 0;
  while (step < lines.size() && lines[step].rfind("Step Time (s)", 0) != 0) ++step;
  BOOST_TEST_REQUIRE(step < lines.size());
  int shares = 0;
  for (size_t k = step + 1; k <= step + 6; ++k) {
    BOOST_TEST(lines[k].rfind("  ", 0) == 0u);
    const size_t open = lines[k].rfind('('), pct = lines[k].rfind("%)");
    BOOST_TEST_REQUIRE((open != std::string::npos && pct != std::string::npos));
    shares += std::stoi(lines[k].substr(open + 1, pct - open - 1));
  }
  BOOST_TEST(std::abs(shares - 100) <= 3);  // six rounded shares; the step time is their sum
  BOOST_TEST(contains(lines[step + 1], "GEMM (s)"));
  // llm-foundry's headers without a unit get theirs.
  BOOST_TEST(contains(text, "Model TFLOP/s per GPU"));
  BOOST_TEST(contains(text, "MFU (%)"));
}

BOOST_AUTO_TEST_CASE(columns_chooses_by_header_in_any_case_in_every_format) {
  const OutputTable t = sweep_table(false);
  const auto chosen = choose_columns({t}, parse_column_list("model, mfu ,Memory (GiB),tok/s/gpu"), terminal_layout());
  BOOST_TEST_REQUIRE(chosen.size() == 1u);
  const std::vector<std::string> want = {"Model", "MFU", "Memory (GiB)", "Throughput (T/s/GPU)"};
  BOOST_TEST(chosen[0].columns == want, boost::test_tools::per_element());
  BOOST_TEST(chosen[0].rows.size() == 3u);
  OutputOptions o;
  o.format = Format::kCsv;
  o.columns = parse_column_list("Model,MFU");
  const std::string csv = render({t}, o);
  BOOST_TEST(csv.rfind("Model,MFU\n125m,", 0) == 0u);
  o.format = Format::kJson;
  const auto json = nlohmann::json::parse(render({t}, o));
  BOOST_TEST(json[0].size() == 2u);
  // An unknown name: one error listing the columns there are.
  const std::string e = error_of([&] { choose_columns({t}, {"Model", "Speed"}, terminal_layout()); });
  BOOST_TEST(contains(e, "--columns Speed: no such column"));
  BOOST_TEST(contains(e, "Throughput (T/s/GPU)"));
  BOOST_TEST(contains(error_of([] { parse_column_list("Model,,MFU"); }), "empty column name"));
}

BOOST_AUTO_TEST_CASE(only_a_terminal_without_format_or_output_gets_the_compact_view) {
  BOOST_TEST(terminal_view(true, false, false));
  BOOST_TEST(!terminal_view(false, false, false));  // a pipe: every column, as before
  BOOST_TEST(!terminal_view(true, true, false));    // --format md asks for every column
  BOOST_TEST(!terminal_view(true, false, true));    // -o writes a file
  ::setenv("COLUMNS", "123", 1);
  BOOST_TEST(terminal_width() == 123);
  ::setenv("COLUMNS", "abc", 1);
  BOOST_TEST(terminal_width() >= 20);
  ::unsetenv("COLUMNS");
}

// `tpsim ARGS` on a pseudo-terminal `width` wide (util-linux `script`): what it shows, without the
// terminal's carriage returns.
std::string on_terminal(const std::string& args, int width) {
  const std::string cmd = "COLUMNS=" + std::to_string(width) + " script -qec '" + TPSIM_BINARY + " " + args +
                          " 2> /dev/null' /dev/null";  // its standard output alone on the terminal
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;)
    for (size_t i = 0; i < n; ++i)
      if (buf[i] != '\r') out += buf[i];
  ::pclose(p);
  return out;
}

// Through the binary on a pseudo-terminal, and through a pipe.
BOOST_AUTO_TEST_CASE(the_binary_prints_the_compact_table_on_a_terminal_and_every_column_to_a_pipe,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       boost::test_tools::assertion_result r(std::system("command -v script > /dev/null 2>&1") == 0);
                       r.message() << "SKIPPED: no script (util-linux) to make a pseudo-terminal";
                       return r;
                     })) {
  const std::string sweep = "sweep --models 125m,1b --seq 2048 --gpus 8";
  const auto piped = run_tpsim(sweep);
  BOOST_TEST_REQUIRE(piped.status == 0);
  BOOST_TEST(piped.out.rfind("| Model | SeqLen (T) |", 0) == 0u);  // a pipe: llm-foundry's columns, as before
  const std::string text = on_terminal(sweep, 90);
  BOOST_TEST_MESSAGE("on a terminal 90 wide:\n" << text);
  const auto lines = lines_of(text);
  BOOST_TEST_REQUIRE(lines.size() >= 4u);
  BOOST_TEST(lines[0].rfind("Model ", 0) == 0u);
  BOOST_TEST(contains(lines[0], " Tok/s/GPU  MFU %"));
  for (const auto& line : lines) BOOST_TEST(line.size() <= 90u, line);
  BOOST_TEST(contains(text, "\n1b "));
  // --format md on the terminal: every column again; --columns: those, in the compact form.
  BOOST_TEST(on_terminal(sweep + " --format md", 90).rfind("| Model | SeqLen (T) |", 0) == 0u);
  const std::string chosen = on_terminal(sweep + " --columns model,mfu", 90);
  BOOST_TEST(lines_of(chosen).at(0) == "Model  MFU %");
  // One predict: the vertical list.
  const std::string one = on_terminal("predict --model 1b --seq 2048 --gpus 8 --micro-batch 4", 90);
  BOOST_TEST(lines_of(one).at(0).rfind("Model", 0) == 0u);
  BOOST_TEST(contains(one, "  GEMM (s)"));
}
