// The tpsim command line, run as a user runs it: outputs, and one-line errors with non-zero exits.
#define BOOST_TEST_MODULE cli
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "cli/report.hpp"
#include "model/architecture.hpp"
#include "tests/run_tpsim.hpp"

namespace fs = std::filesystem;

using namespace tpsim::testing;

namespace {
// A failed run's stderr: one line, tpsim's error prefix, naming `message`. Returns the run.
Run expect_one_line_error(const std::string& args, const std::string& message) {
  const Run r = run(args);
  BOOST_TEST(r.status != 0);
  BOOST_TEST(count_lines(r.err) == 1);
  BOOST_TEST(r.err.rfind("tpsim: error: ", 0) == 0u);
  BOOST_TEST(r.err.find(message) != std::string::npos, "stderr: " << r.err);
  return r;
}
}  // namespace

BOOST_AUTO_TEST_CASE(predict_prints_one_row_with_the_sweep_columns) {
  const Run r = run("predict --model 7b --seq 2048 --gpus 8 --device h100_80gb --micro-batch 6 --format csv");
  BOOST_TEST_REQUIRE(r.status == 0);
  BOOST_TEST(count_lines(r.out) == 2);
  std::string header;
  for (const auto& c : tpsim::prediction_columns()) header += (header.empty() ? "" : ",") + c;
  BOOST_TEST(first_line(r.out) == header);
  const Run j = run("predict --model 7b --seq 2048 --gpus 8 --micro-batch 6 --format json");
  BOOST_TEST(j.status == 0);
  BOOST_TEST(j.out.find("\"Throughput (T/s)\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(sweep_uses_llm_foundry_columns_and_reports_its_evaluations) {
  const Run r = run("sweep --models 125m..1b --seq 512..2048 --gpus 8,64 --format csv");
  BOOST_TEST_REQUIRE(r.status == 0);
  BOOST_TEST(count_lines(r.out) == 1 + 4 * 3 * 2);
  std::string foundry;
  for (const auto& c : tpsim::foundry_columns()) foundry += (foundry.empty() ? "" : ",") + c;
  BOOST_TEST(first_line(r.out).rfind(foundry, 0) == 0u);
  BOOST_TEST(r.err.rfind("evaluated ", 0) == 0u);
  BOOST_TEST(r.err.find(" configurations in ") != std::string::npos);
  BOOST_TEST(count_lines(r.err) == 1);
}

BOOST_AUTO_TEST_CASE(output_files_are_written) {
  const fs::path f = fs::temp_directory_path() / ("tpsim_cli_out_" + std::to_string(::getpid()) + ".md");
  const Run r = run("predict --model 1b --seq 1024 --gpus 8 --micro-batch 4 -o " + f.string());
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.out.empty());
  BOOST_TEST(slurp(f).rfind("| Model |", 0) == 0u);
  fs::remove(f);
}

BOOST_AUTO_TEST_CASE(bad_input_is_one_line_and_a_non_zero_exit) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"predict --model 8b --seq 2048 --gpus 8 --micro-batch 1", "unknown model '8b'"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --device r100", "unknown device 'r100'"},
      {"predict --model 7b --seq 2048 --gpus 0 --micro-batch 1", "--gpus '0'"},
      {"predict --model 7b --seq 2048 --gpus -1 --micro-batch 1", "--gpus"},
      {"predict --model 7b --seq 2048 --gpus 8.5 --micro-batch 1", "--gpus '8.5'"},
      {"predict --model 7b --seq 2048 --gpus 1e308 --micro-batch 1", "--gpus '1e308'"},
      {"predict --model 7b --seq 2048 --gpus 9223372036854775808 --micro-batch 1", "--gpus"},
      {"predict --model 7b --seq 0 --gpus 8 --micro-batch 1", "--seq '0'"},
      // Megatron-LM refuses a micro-batch above the per-replica batch (llm-foundry lowers it).
      {"predict --model 7b --seq 2048 --gpus 8 --framework megatron --micro-batch 4 --global-batch 16",
       "--micro-batch 4"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --global-batch 12", "not a multiple"},
      {"predict --model 7b --seq 2048 --gpus 12 --micro-batch 1 --sharding HYBRID_SHARD",
       "HYBRID_SHARD needs whole nodes"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --precision amp_fp8 --device a100_80gb", "fp8"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --precision fp4", "--precision 'fp4'"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --sharding HALF", "--sharding 'HALF'"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --format xml", "--format 'xml'"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --models /nonexistent.yaml", "no such file"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --profile /tmp", "is a directory"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 -o /nonexistent/x.md", "does not exist"},
      {"sweep --models 70b..125m", "reversed range"},
      {"sweep --seq 65536..512", "reversed range"},
      {"sweep --seq 512..1000", "powers of two"},
      {"sweep --seq ,", "empty item"},
      {"sweep --global-batch-tokens 0", "--global-batch-tokens"},
      {"sweep --global-batch-tokens 4Q", "unknown suffix"},
      {"validate --table /nonexistent.md", "no such file"},
      {"frobnicate", ""},
  };
  for (const auto& [args, message] : cases) {
    BOOST_TEST_CONTEXT(args) {
      const Run r = expect_one_line_error(args, message);
      // No NaN printed: "nan" as a word of its own (a model name such as nemotron-3-nano may hold it).
      BOOST_TEST(!std::regex_search(r.err, std::regex("(^|[^A-Za-z])nan([^A-Za-z]|$)", std::regex::icase)));
    }
  }
}

BOOST_AUTO_TEST_CASE(validate_csv_appends_the_predictions_to_the_input_columns) {
  const Run r = run(std::string("validate --table ") + TPSIM_DATA + "/measured/h100_80gb_fp8.md --format csv");
  BOOST_TEST_REQUIRE(r.status == 0);
  const std::string header = first_line(r.out);
  BOOST_TEST(header.rfind("Model,SeqLen (T),# GPUs,GPU,MFU,HFU,Model TFLOP,", 0) == 0u);
  BOOST_TEST(header.find(
                 "NumParams,Predicted Throughput (T/s),Predicted MFU,Predicted HFU,Predicted Memory (GiB),Error (%)") !=
             std::string::npos);
  BOOST_TEST(count_lines(r.out) == 8);
}

// A repeatable flag takes one value: the table after --profile is a table, as docs/accuracy.md's vTrain
// command writes it, and two profiles need the flag twice.
BOOST_AUTO_TEST_CASE(a_repeatable_flag_takes_one_value_and_leaves_the_positional_table) {
  const std::string table = std::string(TPSIM_DATA) + "/measured/h100_80gb_fp8.md";
  const Run r =
      run(std::string("validate --profile ") + TPSIM_DATA + "/profiles/h100_80gb.json " + table + " --format csv");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  BOOST_TEST(count_lines(r.out) == 8);
  const Run two =
      run(std::string("predict --model 7b --seq 2048 --gpus 8 --micro-batch 4 --device h100_80gb --profile ") +
          TPSIM_DATA + "/profiles/a100_80gb.json " + TPSIM_DATA + "/profiles/h100_80gb.json");
  BOOST_TEST(two.status == 2);
  BOOST_TEST(first_line(two.err).find("h100_80gb.json") != std::string::npos, two.err);
  BOOST_TEST(count_lines(two.err) == 1u);
}

// Start-up stays cheap: the libraries only a GPU run needs and that cost most to load (cuBLASLt,
// about 90 ms) are loaded on first use, not named in the binary's dynamic section.
BOOST_AUTO_TEST_CASE(the_binary_does_not_load_cublaslt_at_start) {
  const fs::path dump = fs::temp_directory_path() / ("tpsim_needed_" + std::to_string(::getpid()) + ".txt");
  const std::string cmd = "readelf -d '" + std::string(TPSIM_BINARY) + "' > '" + dump.string() + "' 2>&1";
  BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string needed = slurp(dump);
  fs::remove(dump);
  BOOST_TEST(needed.find("(NEEDED)") != std::string::npos);
  BOOST_TEST(needed.find("cublasLt") == std::string::npos, needed);
}

namespace {
// The cells of one CSV column, below its header (cells here hold no commas).
std::vector<std::string> csv_column(const std::string& csv, const std::string& column) {
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);
  std::vector<std::string> header, out;
  for (std::istringstream h(line); std::getline(h, line, ',');) header.push_back(line);
  const auto at = std::find(header.begin(), header.end(), column) - header.begin();
  while (std::getline(lines, line)) {
    if (line.empty()) break;
    std::vector<std::string> cells;
    for (std::istringstream c(line); std::getline(c, line, ',');) cells.push_back(line);
    out.push_back(at < static_cast<long>(cells.size()) ? cells[static_cast<size_t>(at)] : "");
  }
  return out;
}
}  // namespace

// --ckpt none|selective|full, a bare --ckpt (full) and --no-ckpt (none); the column prints what
// llm-foundry would (True / False) and selective where it has no spelling.
BOOST_AUTO_TEST_CASE(ckpt_takes_a_kind_and_the_column_names_it) {
  const std::string predict = "predict --model 1b --seq 2048 --gpus 8 --micro-batch 4 --format csv ";
  for (const auto& [flags, cell] : std::vector<std::pair<std::string, std::string>>{
           {"", "False"},
           {"--ckpt", "True"},
           {"--no-ckpt", "False"},
           {"--ckpt none", "False"},
           {"--ckpt selective", "selective"},
           {"--ckpt=selective", "selective"},
           {"--ckpt full", "True"},
           {"--ckpt --sharding SHARD_GRAD_OP", "True"},
           {"--ckpt Selective", "selective"}}) {  // contradicting --ckpt flags: test_first_use
    BOOST_TEST_CONTEXT(flags) {
      const Run r = run(predict + flags);
      BOOST_TEST_REQUIRE(r.status == 0, r.err);
      BOOST_TEST(csv_column(r.out, "Activation Checkpointing") == std::vector<std::string>{cell});
    }
  }
  // A bare --ckpt is --ckpt full, byte for byte.
  BOOST_TEST(run(predict + "--ckpt").out == run(predict + "--ckpt full").out);
  // sweep: selective alone when asked; any searches the three, none and full by default.
  const Run s = run("sweep --models 125m,1b --seq 1024,2048 --ckpt selective --format csv");
  BOOST_TEST_REQUIRE(s.status == 0, s.err);
  BOOST_TEST(csv_column(s.out, "Activation Checkpointing") == std::vector<std::string>(4, "selective"));
  const Run any = run("sweep --models 125m,1b --seq 1024,2048 --ckpt any --format csv");
  BOOST_TEST_REQUIRE(any.status == 0, any.err);
  BOOST_TEST(count_lines(any.out) == 5);
  const Run none = run("sweep --models 125m,1b --seq 1024,2048 --no-ckpt --format csv");
  BOOST_TEST_REQUIRE(none.status == 0, none.err);
  BOOST_TEST(csv_column(none.out, "Activation Checkpointing") == std::vector<std::string>(4, "False"));
}

BOOST_AUTO_TEST_CASE(a_bad_ckpt_is_one_line_naming_the_flag_and_its_values) {
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"predict --model 1b --seq 2048 --gpus 8 --micro-batch 4 --ckpt partial",
            "--ckpt 'partial': expected none, selective or full"},
           {"predict --model 1b --seq 2048 --gpus 8 --micro-batch 4 --ckpt any",
            "--ckpt 'any': expected none, selective or full"},
           {"predict --model 1b --seq 2048 --gpus 8 --micro-batch 4 --ckpt true", "--ckpt 'true'"},
           {"sweep --models 1b --seq 2048 --ckpt Fulll", "--ckpt 'Fulll': expected none, selective or full (or any)"},
           {"plan --model 1b --seq 2048 --gpus 8 --ckpt some",
            "--ckpt 'some': expected none, selective or full (or any)"},
           {"replay --backend cpu --model tiny --seq 64 --micro-batch 1 --ckpt any",
            "--ckpt 'any': expected none, selective or full"},
       }) {
    BOOST_TEST_CONTEXT(args) {
      const Run r = expect_one_line_error(args, message);
      BOOST_TEST(r.status == 2);
    }
  }
}

// Issue 15: --framework and the parallel degrees. Layouts that cannot run are one line naming what
// breaks; composer refuses model parallelism.
BOOST_AUTO_TEST_CASE(parallel_layouts_that_cannot_run_are_one_line) {
  const std::string p = "predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --global-batch 16 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {p + "--tp 2", "--tp 2: composer runs FSDP without model parallelism; use --framework megatron"},
      {p + "--framework composer --pp 2", "--pp 2: composer runs FSDP"},
      {p + "--sp", "--sp: composer runs FSDP"},
      {p + "--dist-opt", "--dist-opt: composer runs FSDP"},
      {p + "--framework megatron --tp 3", "tensor parallel 3 does not divide the 32 attention heads"},
      {p + "--framework megatron --pp 64", "pipeline parallel 64 is more stages than the 32 layers"},
      {p + "--framework megatron --cp 3", "context parallel 3 does not split the sequence length 2048"},
      {p + "--framework megatron --tp 4 --pp 4",
       "tensor x pipeline x context parallel = 16 does not divide the GPU count 8"},
      {p + "--framework megatron --vp 2", "virtual stages need pipeline parallelism"},
      {p + "--framework megatron --ep 2", "expert parallel 2 needs a mixture-of-experts model"},
      {p + "--etp 1", "--etp 1: composer runs FSDP without model parallelism; use --framework megatron"},
      {p + "--framework megatron --tp 2 --etp 1",
       "expert tensor parallel 1 needs a mixture-of-experts model; 7b is dense"},
      {p + "--grad-reduce-in-bf16", "--grad-reduce-in-bf16: Megatron-Core's option; use --framework megatron"},
      {p + "--framework megatron --precision amp_fp16 --grad-reduce-in-bf16",
       "--grad-reduce-in-bf16 needs bf16 parameters; precision amp_fp16 keeps its own"},
      {p + "--fp8-param-gather", "--fp8-param-gather: Megatron-Core's option; use --framework megatron"},
      {p + "--pipeline-scatter-gather", "--pipeline-scatter-gather: Megatron-LM's option; use --framework megatron"},
      {p + "--overlap-moe-expert-parallel-comm",
       "--overlap-moe-expert-parallel-comm: Megatron-Core's option; use --framework megatron"},
      {p + "--framework megatron --overlap-moe-expert-parallel-comm",
       "the expert-parallel all-to-all overlap (--overlap-moe-expert-parallel-comm) needs a mixture-of-experts model "
       "with expert parallel > 1"},
      {p + "--framework megatron --fp8-param-gather",
       "--fp8-param-gather needs low-precision weights (amp_fp8, mxfp8 or nvfp4); precision amp_bf16 has none"},
      {p + "--framework megatron --tp 1 --sp", "sequence parallelism needs tensor parallelism"},
      {p + "--framework megatron --sp --no-sp", "--sp"},
      {p + "--framework megatron --sharding NO_SHARD", "--sharding: --framework megatron has no FSDP sharding"},
      {p + "--framework megatron --compile", "--compile: PyTorch's option; use --framework composer"},
      {p + "--fused-rmsnorm", "--fused-rmsnorm: torchtitan's option; use --framework torchtitan"},
      {p + "--framework megatron --megatron-fsdp zero3", "--megatron-fsdp 'zero3': expected no_shard, optim"},
      {p + "--megatron-fsdp optim", "--megatron-fsdp: Megatron-Core's option; use --framework megatron"},
      {"predict --model 7b --seq 2048 --gpus 8 --micro-batch 3 --global-batch 32 --framework megatron --tp 2",
       "micro-batch 3 does not divide the 8 sequences per data-parallel rank"},
      {p + "--framework megatron --tp two", "--tp 'two'"},
      {p + "--framework megatron --pp 0", "--pp '0'"},
      {p + "--framework deepspeed", "--framework 'deepspeed': expected composer, megatron or torchtitan"},
      {"sweep --models 125m --seq 2048 --tp 2", "--tp 2: composer runs FSDP"},
      {"sweep --models 125m --seq 2048 --framework megatron --shardings NO_SHARD", "--shardings: --framework megatron"},
      // Given is given, whatever its value: the list of every strategy (the default's text) as well.
      {"sweep --models 125m --seq 2048 --framework megatron --shardings FULL_SHARD,SHARD_GRAD_OP,NO_SHARD,HYBRID_SHARD",
       "--shardings: --framework megatron"},
      {"sweep --models 125m --seq 2048 --framework torchtitan --shardings FULL_SHARD,SHARD_GRAD_OP,NO_SHARD,HYBRID_SHARD",
       "--shardings: --framework torchtitan"},
      {"plan --model 7b --seq 2048 --gpus 8 --pp 2", "--pp 2: composer runs FSDP"},
  };
  for (const auto& [args, message] : cases) {
    BOOST_TEST_CONTEXT(args) { expect_one_line_error(args, message); }
  }
}

// The layout columns follow every other column when --framework is given, and only then.
BOOST_AUTO_TEST_CASE(framework_adds_the_layout_columns) {
  std::string layout;
  for (const auto& c : tpsim::layout_columns()) layout += "," + c;
  const std::string p = "predict --model 7b --seq 2048 --gpus 8 --micro-batch 2 --global-batch 16 --format csv";
  const Run plain = run(p);
  BOOST_TEST_REQUIRE(plain.status == 0);
  BOOST_TEST(first_line(plain.out).find("Tensor Parallel") == std::string::npos);
  const Run composer = run(p + " --framework composer");
  BOOST_TEST_REQUIRE(composer.status == 0);
  BOOST_TEST(first_line(composer.out) == first_line(plain.out) + layout);
  // The degrees, then the pipeline split (even: no fixed stages, nothing counted as a layer).
  const std::string row = composer.out.substr(composer.out.find('\n') + 1);
  const std::string tail = ",1,1,1,1,1,8,1,0,0,False,False\n";
  BOOST_TEST(row.substr(0, row.size() - tail.size()) ==
             plain.out.substr(plain.out.find('\n') + 1, row.size() - tail.size()));
  BOOST_TEST(row.substr(row.size() - tail.size()) == tail);
  // The pipeline bubble is a part of the step time (none without pipeline stages): the parts sum
  // to the step.
  BOOST_TEST(std::stod(csv_cell(plain.out, "Pipeline Bubble (s)")) == 0.0);
  const Run megatron = run(p + " --framework megatron --tp 2 --pp 2");
  BOOST_TEST_REQUIRE(megatron.status == 0, megatron.err);
  // Megatron-FSDP's strategy follows the layout under megatron (sweep and plan search it).
  BOOST_TEST(megatron.out.find(",2,2,1,1,1,2,2,0,0,False,False,off\n") != std::string::npos);
  BOOST_TEST(std::stod(csv_cell(megatron.out, "Pipeline Bubble (s)")) > 0.0);
  double parts = 0;
  for (const char* part : {"GEMM (s)", "Attention (s)", "Other Compute (s)", "Exposed Comm (s)", "Optimizer (s)",
                           "Overhead (s)", "Pipeline Bubble (s)", "Allocator (s)"})
    parts += std::stod(csv_cell(megatron.out, part));
  BOOST_TEST(parts == std::stod(csv_cell(megatron.out, "Step Time (s)")), boost::test_tools::tolerance(1e-3));
  const Run sweep = run("sweep --models 125m --seq 2048 --gpus 8 --framework megatron --format csv");
  BOOST_TEST_REQUIRE(sweep.status == 0, sweep.err);
  BOOST_TEST(first_line(sweep.out).size() > layout.size());
  const std::string megatron_layout = layout + ",Megatron FSDP";
  BOOST_TEST(first_line(sweep.out).substr(first_line(sweep.out).size() - megatron_layout.size()) == megatron_layout);
  const Run plan = run("plan --model 125m --seq 2048 --gpus 8 --framework megatron --tp 2 --format csv");
  BOOST_TEST_REQUIRE(plan.status == 0, plan.err);
  // plan's csv is one table (docs/plan.md): the layout columns follow the ranked table's, before
  // the per-GPU-count table's Chosen by; every row carries its tensor-parallel degree.
  BOOST_TEST(first_line(plan.out).find(megatron_layout + ",Chosen by") != std::string::npos, first_line(plan.out));
  std::istringstream rows(plan.out.substr(plan.out.find('\n') + 1));
  for (std::string line; std::getline(rows, line) && !line.empty();) BOOST_TEST(line.find(",2,") != std::string::npos);
}

// Issue 15: Composer's HSDP degrees and DDP, and the cluster network on every command that predicts.

BOOST_AUTO_TEST_CASE(hsdp_degrees_and_the_network_are_flags) {
  const std::string p = "predict --model 7b --seq 2048 --gpus 64 --micro-batch 2 --global-batch 128 --format csv ";
  const Run plain = run(p + "--sharding HYBRID_SHARD");
  const Run mesh = run(p + "--replicate-degree 8 --shard-degree -1");
  BOOST_TEST_REQUIRE(plain.status == 0);
  BOOST_TEST_REQUIRE(mesh.status == 0, mesh.err);
  // replicate 8 x shard 8 on nodes of 8 is HYBRID_SHARD's own layout.
  BOOST_TEST(csv_cell(mesh.out, "Step Time (s)") == csv_cell(plain.out, "Step Time (s)"));
  // Two nodes per shard group: half the optimizer state per GPU of one node's.
  const Run wide = run(p + "--replicate-degree 4 --shard-degree 16");
  BOOST_TEST_REQUIRE(wide.status == 0);
  BOOST_TEST(std::stod(csv_cell(wide.out, "Memory (GiB)")) < std::stod(csv_cell(mesh.out, "Memory (GiB)")));
  // sweep and plan take them too.
  BOOST_TEST(run("sweep --models 125m --seq 2048 --gpus 16 --replicate-degree 2").status == 0);
  BOOST_TEST(run("plan --model 1b --seq 2048 --gpus 16 --shard-degree 8 --replicate-degree 2").status == 0);
  // A faster network is a faster multi-node step; the flags are on validate and calibrate table too.
  const Run slow = run(p + "--inter-node-gbps 100"), fast = run(p + "--inter-node-gbps 3200");
  BOOST_TEST_REQUIRE((slow.status == 0 && fast.status == 0));
  BOOST_TEST(std::stod(csv_cell(fast.out, "Step Time (s)")) < std::stod(csv_cell(slow.out, "Step Time (s)")));
  // Nodes of 16: eight GPUs are one node, so no network at all.
  const Run one_node =
      run("predict --model 7b --seq 2048 --gpus 16 --micro-batch 2 --format csv --gpus-per-node 16 "
          "--inter-node-gbps 1");
  BOOST_TEST(one_node.status == 0);
  for (const char* cmd : {"validate", "calibrate table", "sweep", "plan"}) BOOST_TEST_CONTEXT(cmd) {
      BOOST_TEST(run(std::string(cmd) + " --help").out.find("--inter-node-gbps") != std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(bad_hsdp_and_network_flags_are_one_line) {
  const std::string p = "predict --model 7b --seq 2048 --gpus 8 --micro-batch 1 --global-batch 16 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {p + "--shard-degree 0", "--shard-degree '0': expected -1 (the rest of the GPUs) or a whole number"},
      {p + "--replicate-degree two", "--replicate-degree 'two'"},
      {p + "--shard-degree 3", "shard degree 3: the product is not the GPU count 8"},
      {p + "--shard-degree 4 --replicate-degree 4",
       "replicate degree 4 x shard degree 4: the product is not the GPU count 8"},
      {p + "--shard-degree -1 --replicate-degree -1", "only one degree may be -1"},
      {p + "--replicate-degree 3", "does not divide the GPU count 8"},
      {p + "--replicate-degree 2 --sharding NO_SHARD", "NO_SHARD takes no 2D device mesh"},
      {p + "--framework megatron --shard-degree 2",
       "--shard-degree: HSDP's shard and replicate degrees are composer's"},
      {p + "--inter-node-gbps 0", "--inter-node-gbps '0': expected a positive number"},
      {p + "--inter-node-gbps -5", "--inter-node-gbps"},
      {p + "--inter-node-gbps fast", "--inter-node-gbps 'fast': expected a positive number"},
      {p + "--inter-node-gbps 1e999", "--inter-node-gbps '1e999'"},
      {p + "--gpus-per-node 0", "--gpus-per-node '0'"},
      {p + "--gpus-per-node 2.5", "--gpus-per-node '2.5'"},
      {"predict --model 7b --seq 2048 --gpus 16 --micro-batch 1 --sharding HYBRID_SHARD --gpus-per-node 6",
       "HYBRID_SHARD needs whole nodes: 16 GPUs is not a multiple of 6 per node"},
      {"sweep --models 125m --seq 2048 --gpus 16 --shard-degree 0", "--shard-degree '0'"},
      {"validate --table " + std::string(TPSIM_DATA) + "/measured/a100_80gb_bf16.md --inter-node-gbps x",
       "--inter-node-gbps 'x'"},
  };
  for (const auto& [args, message] : cases) {
    BOOST_TEST_CONTEXT(args) { expect_one_line_error(args, message); }
  }
}

BOOST_AUTO_TEST_CASE(a_yaml_without_fsdp_config_is_predicted_as_ddp) {
  const fs::path dir = tpsim::testing::scratch_dir();
  const fs::path yaml = dir / "ddp.yaml";
  std::ofstream(yaml) << "model:\n  name: mpt_causal_lm\n  d_model: 2560\n  n_heads: 32\n  n_layers: 32\n"
                         "max_seq_len: 2048\nglobal_train_batch_size: 64\ndevice_train_microbatch_size: 8\n"
                         "precision: amp_bf16\n";
  const Run ddp = run("predict --config " + yaml.string() + " --gpus 8 --format csv");
  BOOST_TEST_REQUIRE(ddp.status == 0, ddp.err);
  BOOST_TEST(csv_cell(ddp.out, "Sharding Strategy") == "DDP");
  BOOST_TEST(ddp.err.find("no fsdp_config -- predicted as plain PyTorch DDP") != std::string::npos, ddp.err);
  // Issue 16 item 1: an mpt-3b-sized model at micro-batch 8 on 8 H100s does not fit under DDP.
  BOOST_TEST(csv_cell(ddp.out, "Fits") == "no");
  // The line says what fills the memory, and its parts add up to the peak (to the printed 0.1 GiB).
  const std::regex parts(
      "does not fit: predicted peak ([0-9.]+) GiB of ([0-9.]+) GiB on h100_80gb: parameters, "
      "gradients and optimizer state ([0-9.]+), activations ([0-9.]+), parameters in the compute "
      "precision ([0-9.]+), backward buffers ([0-9.]+) \\(x ([0-9.]+) for fragmentation, plus "
      "([0-9.]+) reserved\\)");
  std::smatch g;
  BOOST_TEST_REQUIRE(std::regex_search(ddp.err, g, parts), ddp.err);
  const auto v = [&](int i) { return std::stod(g[i].str()); };
  BOOST_TEST(v(1) > v(2));
  BOOST_TEST(std::abs((v(3) + v(4) + v(5) + v(6)) * v(7) + v(8) - v(1)) < 0.3);
  const Run fsdp = run("predict --config " + yaml.string() + " --gpus 8 --format csv --sharding FULL_SHARD");
  BOOST_TEST(csv_cell(fsdp.out, "Fits") == "yes");
  expect_one_line_error("predict --config " + yaml.string() + " --gpus 8 --shard-degree 8",
                        "DDP has no shard or replicate groups");
}

BOOST_AUTO_TEST_CASE(calibrate_table_records_its_network_and_predictions_note_another) {
  // The table's first twelve rows (70b on 64 and 32 GPUs, 30b and 13b on 8): what the profile records
  // does not depend on how many rows it was fitted on, and the whole table's fit and its interval's
  // held-out fits take minutes under the sanitizers.
  std::ifstream full(std::string(TPSIM_DATA) + "/measured/a100_80gb_bf16.md");
  const fs::path table = tpsim::testing::scratch_dir() / "a100_80gb_part.md";
  {
    std::ofstream part(table);
    std::string line;
    for (int i = 0; i < 14 && std::getline(full, line); ++i) part << line << '\n';
  }
  const fs::path out = tpsim::testing::scratch_dir() / "net.json";
  const Run fit = run("calibrate table --table " + table.string() + " --device a100_80gb --inter-node-gbps 800 --out " +
                      out.string());
  BOOST_TEST_REQUIRE(fit.status == 0, fit.err);
  BOOST_TEST(slurp(out).find("\"inter_node_gbps\": 800.0") != std::string::npos);
  const std::string p =
      "predict --model 7b --seq 2048 --gpus 16 --micro-batch 2 --device a100_80gb --profile " + out.string();
  const Run same = run(p + " --inter-node-gbps 800");
  BOOST_TEST(same.status == 0);
  BOOST_TEST(same.err.find("was fitted on") == std::string::npos, same.err);
  const Run other = run(p + " --inter-node-gbps 200");
  BOOST_TEST(other.status == 0);
  BOOST_TEST(count_lines(other.err) == 1);
  BOOST_TEST(other.err.find("tpsim: note: the a100_80gb profile") != std::string::npos, other.err);
  BOOST_TEST(other.err.find("this run's network is 200 Gbit/s per node of 8 GPUs") != std::string::npos, other.err);
}

// A100 40GB's 13b on 8 GPUs with full checkpointing (seed table rows 7-15, 9-12% slower than held-out
// predictions without the allocator's term) leaves 3.3 GiB free at the predicted peak, 0.7 GiB under
// the profile's 4 GiB headroom: the step is 0.19 x 0.7^2 = 9-10% longer, in its own column, and
// predict says why. The same run at micro-batch 2, A100 80GB's 30b at 2,048 tokens (5.1 GiB free,
// measured as predicted without the term) and a run without checkpointing closer to full pay
// nothing. plan, free to go to the last byte, no longer picks the run 3.3 GiB from full; sweep
// notes its rows in one line.
BOOST_AUTO_TEST_CASE(full_checkpointing_near_full_memory_pays_the_allocators_retries) {
  const std::string tight =
      "predict --model 13b --seq 2048 --gpus 8 --device a100_40gb --grad-accum 16 --precision bf16 "
      "--mp-mode PURE --ckpt full --format csv";
  const auto share = [](const Run& r) {
    const double allocator = std::stod(csv_cell(r.out, "Allocator (s)"));
    return allocator / (std::stod(csv_cell(r.out, "Step Time (s)")) - allocator);
  };
  const Run near = run(tight + " --micro-batch 4");
  BOOST_TEST_REQUIRE(near.status == 0, near.err);
  BOOST_TEST(csv_cell(near.out, "Memory (GiB)") == "36.7");
  BOOST_TEST(share(near) > 0.19 * 0.65 * 0.65);
  BOOST_TEST(share(near) < 0.19 * 0.75 * 0.75);
  BOOST_TEST(count_lines(near.err) == 1, near.err);
  BOOST_TEST(
      near.err.find("tpsim: note: 3.3 GiB free at the predicted peak with full checkpointing: the step is 9.") == 0,
      near.err);
  BOOST_TEST(near.err.find("% longer for the caching allocator's retries") != std::string::npos, near.err);
  BOOST_TEST(near.err.find("at the least") == std::string::npos, near.err);
  const Run roomier = run(tight + " --micro-batch 2");
  BOOST_TEST(roomier.status == 0);
  BOOST_TEST(std::stod(csv_cell(roomier.out, "Memory (GiB)")) < 36.0);
  BOOST_TEST(csv_cell(roomier.out, "Allocator (s)") == "0.0000");
  BOOST_TEST(roomier.err.find("GiB free") == std::string::npos, roomier.err);
  const Run fine =
      run("predict --model 30b --seq 2048 --gpus 8 --device a100_80gb --micro-batch 3 --grad-accum 21 "
          "--ckpt full --format csv");
  BOOST_TEST(csv_cell(fine.out, "Memory (GiB)") == "74.9");
  BOOST_TEST(csv_cell(fine.out, "Allocator (s)") == "0.0000");
  BOOST_TEST(fine.err.find("GiB free") == std::string::npos, fine.err);
  const Run bare =
      run("predict --model 1b --seq 2048 --gpus 32 --device a100_40gb --micro-batch 10 --precision bf16 "
          "--mp-mode PURE --no-ckpt --format csv");
  BOOST_TEST(40.0 - std::stod(csv_cell(bare.out, "Memory (GiB)")) < 4.0);
  BOOST_TEST(csv_cell(bare.out, "Allocator (s)") == "0.0000");
  BOOST_TEST(bare.err.find("GiB free") == std::string::npos, bare.err);
  // Beyond the measured runs' 2.7 GiB free the note says the term extrapolates.
  const Run edge =
      run("predict --model 13b --seq 65536 --gpus 8 --device h100_80gb --micro-batch 1 --ckpt full "
          "--format csv");
  BOOST_TEST_REQUIRE(edge.status == 0, edge.err);
  BOOST_TEST(std::stod(csv_cell(edge.out, "Memory (GiB)")) > 77.3);
  BOOST_TEST(edge.err.find("which had 2.7 GiB free at the least") != std::string::npos, edge.err);
  // plan, with no headroom margin: rank 1 is not the micro-batch of 4 (the fastest without the term).
  const Run all =
      run("plan --model 13b --seq 2048 --gpus 8 --device a100_40gb --precision bf16 --mp-mode PURE "
          "--ckpt full --min-headroom 0 --format csv");
  BOOST_TEST_REQUIRE(all.status == 0, all.err);
  BOOST_TEST(csv_cell(all.out, "MicroBatchSize") != "4", all.out);
  BOOST_TEST(all.err.find("GiB free") == std::string::npos, all.err);
  // sweep: the only 13b that fits 65,536 tokens on 8 H100s is that run, noted in one line; 125m none.
  const Run tight_sweep = run("sweep --models 125m,13b --seq 65536 --format csv");
  BOOST_TEST_REQUIRE(tight_sweep.status == 0, tight_sweep.err);
  BOOST_TEST(
      tight_sweep.err.find("tpsim: note: 1 of these run full checkpointing close to full memory (13b at 65536 on "
                           "8 x h100_80gb): their steps include the caching allocator's retries") != std::string::npos,
      tight_sweep.err);
  const Run roomy_sweep = run("sweep --models 125m --seq 4096 --format csv");
  BOOST_TEST(roomy_sweep.err.find("close to full memory") == std::string::npos, roomy_sweep.err);
}
// A GEMM width that is not a multiple of 8 (GPT-2's 50,257-column output layer) is not costed
// slower, and predict, sweep and plan say so once per model; Megatron pads the vocabulary (no note);
// an MPT model has nothing to say.
BOOST_AUTO_TEST_CASE(unaligned_gemm_widths_are_noted) {
  const std::string note =
      "tpsim: note: gpt2: GEMM width not a multiple of 8 (output layer 50257): cuBLAS runs such "
      "GEMMs on slower kernels, which tpsim does not cost";
  const Run p = run("predict --model gpt2 --seq 1024 --gpus 8 --micro-batch 8 --format csv");
  BOOST_TEST_REQUIRE(p.status == 0, p.err);
  BOOST_TEST(p.err.find(note) != std::string::npos, p.err);
  const Run s = run("sweep --models gpt2,125m --seq 512,1024 --format csv");
  BOOST_TEST_REQUIRE(s.status == 0, s.err);
  const size_t at = s.err.find(note);
  BOOST_TEST(at != std::string::npos, s.err);
  BOOST_TEST(s.err.find(note, at + 1) == std::string::npos, s.err);  // once, for both lengths
  BOOST_TEST(s.err.find("125m: GEMM width") == std::string::npos, s.err);
  const Run pl = run("plan --model gpt2 --seq 1024 --gpus 8 --format csv");
  BOOST_TEST_REQUIRE(pl.status == 0, pl.err);
  BOOST_TEST(pl.err.find(note) != std::string::npos, pl.err);
  const Run padded = run("predict --model gpt2 --seq 1024 --gpus 8 --micro-batch 8 --framework megatron --format csv");
  BOOST_TEST_REQUIRE(padded.status == 0, padded.err);
  BOOST_TEST(padded.err.find("not a multiple of 8") == std::string::npos, padded.err);
  const Run mpt = run("predict --model 125m --seq 1024 --gpus 8 --micro-batch 8 --format csv");
  BOOST_TEST(mpt.err.find("not a multiple of 8") == std::string::npos, mpt.err);

  tpsim::ModelConfig odd;
  odd.d_model = 1020;
  odd.n_heads = 10;
  odd.vocab_size = 32000;
  odd.expansion_ratio = 4.1;  // 4182
  const auto widths = tpsim::unaligned_gemm_widths(odd, false);
  BOOST_TEST_REQUIRE(widths.size() == 3u);
  BOOST_TEST(widths[0].first == "hidden size");
  BOOST_TEST(widths[1].first == "query width");
  BOOST_TEST(widths[2].first == "feed-forward width");
  BOOST_TEST(widths[2].second == 4182);
}

// --attention: unfused is the framework's unfused attention (Megatron's core attention, llm-foundry's
// attn_impl torch), slower than flash and said so once; torchtitan's and unknown values are one-line
// errors.
BOOST_AUTO_TEST_CASE(the_attention_flag_costs_the_frameworks_unfused_attention) {
  for (const std::string framework : {"megatron", "composer"}) {
    BOOST_TEST_CONTEXT(framework) {
      const std::string p =
          "predict --model 1b --seq 2048 --gpus 8 --micro-batch 1 --format csv --framework " + framework;
      const Run flash = run(p + " --attention flash");
      const Run unfused = run(p + " --attention unfused");
      BOOST_TEST_REQUIRE(flash.status == 0, flash.err);
      BOOST_TEST_REQUIRE(unfused.status == 0, unfused.err);
      BOOST_TEST(std::stod(csv_cell(unfused.out, "Step Time (s)")) >
                 1.05 * std::stod(csv_cell(flash.out, "Step Time (s)")));
      BOOST_TEST(csv_cell(flash.out, "Step Time (s)") == csv_cell(run(p).out, "Step Time (s)"));  // the default
      BOOST_TEST(
          unfused.err.find(framework == "megatron" ? "costed as Megatron's core attention"
                                                   : "costed as llm-foundry's PyTorch attention") != std::string::npos,
          unfused.err);
    }
  }
  const Run sweep = run("sweep --models 1b --seq 2048 --gpus 8 --attention unfused --format csv");
  BOOST_TEST_REQUIRE(sweep.status == 0, sweep.err);
  BOOST_TEST(sweep.err.find("--attention unfused: 1b's attention") != std::string::npos, sweep.err);
  expect_one_line_error(
      "predict --model 1b --seq 2048 --gpus 8 --micro-batch 1 --framework torchtitan --attention unfused",
      "torchtitan runs PyTorch's scaled_dot_product_attention");
  expect_one_line_error("predict --model 1b --seq 2048 --gpus 8 --micro-batch 1 --attention slow",
                        "--attention 'slow': expected flash or unfused");
  expect_one_line_error("plan --model 1b --seq 2048 --gpus 8 --attention x", "--attention 'x'");
}
