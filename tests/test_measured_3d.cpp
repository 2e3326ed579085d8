// Measured tables of runs beyond data parallelism: the general form's columns (framework, tensor,
// pipeline, virtual, context, expert and data parallel degrees, sequence parallelism, recompute,
// step time, attention), vTrain's CSV read as it is, `tpsim validate` on them, and the published
// Megatron and torchtitan figures shipped in data/measured/literature_*.csv.
#define BOOST_TEST_MODULE measured_3d
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/validation.hpp"
#include "common.hpp"
#include "tests/run_tpsim.hpp"

using namespace tpsim;

namespace {
using namespace tpsim::test;
using namespace tpsim::testing;

// A Megatron run in the general form: no GPU column (--device names it), no MP Mode or Sharding
// Strategy (not composer's), step time measured instead of throughput.
const std::string kHeader =
    "| Model | SeqLen (T) | # GPUs | MicroBatchSize | GlobalBatchSize | Precision | Framework | Tensor Parallel | "
    "Pipeline Parallel | Virtual Stages | Context Parallel | Expert Parallel | Data Parallel | Sequence Parallel | "
    "Distributed Optimizer | Overlap Grad Reduce | Recompute | Step Time (s) | Notes |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
const std::string kRow =
    "| 7b | 4096 | 64 | 1 | 512 | amp_bf16 | megatron | 4 | 2 | 3 | 2 | 1 | 4 | True | True | False | selective | 5.5 | "
    "run 12 |\n";

MeasuredTableOptions on_device(const std::string& device, Framework f = Framework::kComposer) {
  return {.framework = f, .device = device};
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  BOOST_TEST_REQUIRE(at != std::string::npos, from);
  return s.replace(at, from.size(), to);
}

const std::string kVtrain = std::string(TPSIM_TEST_DATA) + "/vtrain/four-rows.csv";

}  // namespace

BOOST_AUTO_TEST_CASE(the_general_form_reads_every_new_column) {
  const MeasuredTable t = parse_measured_table(kHeader + kRow, "g.md", on_device("h100_80gb"));
  BOOST_TEST_REQUIRE(t.rows.size() == 1u);
  const MeasuredRow& r = t.rows[0];
  BOOST_TEST(r.gpu == "h100_80gb");
  BOOST_TEST((r.layout.framework == Framework::kMegatron));
  BOOST_TEST(r.layout.tensor == 4);
  BOOST_TEST(r.layout.pipeline == 2);
  BOOST_TEST(r.layout.virtual_stages == 3);
  BOOST_TEST(r.layout.context == 2);
  BOOST_TEST(r.layout.expert == 1);
  BOOST_TEST(r.layout.sequence_parallel);
  BOOST_TEST(r.layout.distributed_optimizer);
  BOOST_TEST(!r.layout.overlap_grad_reduce);
  BOOST_TEST((r.layout.checkpointing == Checkpointing::kSelective));
  BOOST_TEST((r.layout.sharding == Sharding::kNoShard));  // Megatron's DDP
  BOOST_TEST(r.step_time_measured());
  BOOST_TEST(r.measured_step_s == 5.5);
  BOOST_TEST(r.tokens_per_s == 512.0 * 4096 / 5.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(!r.architecture);                  // `7b` names a catalogue model
  BOOST_TEST(r.cells.back().first == "Notes");  // an unknown column is kept, for echoing
  BOOST_TEST(r.cells.back().second == "run 12");
  const TrainConfig cfg = r.config();
  BOOST_TEST((cfg.layout == r.layout));
  BOOST_TEST(cfg.data_parallel() == 4);
  BOOST_TEST(cfg.per_device_batch() == 128);
}

BOOST_AUTO_TEST_CASE(the_moe_a2a_overlap_column_is_megatron_cores_combined_1f1b) {
  const std::string header =
      replaced(replaced(kHeader, "| Notes |", "| MoE A2A Overlap | Notes |"), "| --- |\n", "| --- | --- |\n");
  const MeasuredTable t =
      parse_measured_table(header + replaced(kRow, "| run 12 |", "| True | run 12 |"), "g.md", on_device("h100_80gb"));
  BOOST_TEST(t.rows.at(0).layout.moe_a2a_overlap);
  BOOST_TEST(!parse_measured_table(kHeader + kRow, "g.md", on_device("h100_80gb")).rows.at(0).layout.moe_a2a_overlap);
  BOOST_TEST(contains(error_of([&] {
                        parse_measured_table(header + replaced(kRow, "| run 12 |", "| often | run 12 |"), "g.md",
                                             on_device("h100_80gb"));
                      }),
                      "column 'MoE A2A Overlap'"));
}

BOOST_AUTO_TEST_CASE(absent_columns_take_the_defaults_and_the_commands_framework) {
  // Only llm-foundry's columns: data parallelism alone under the command's framework.
  const std::string header =
      "| Model | SeqLen (T) | # GPUs | GPU | MicroBatchSize | GlobalBatchSize | Throughput (T/s) | Precision | MP Mode | "
      "Sharding Strategy | Activation Checkpointing |\n| - | - | - | - | - | - | - | - | - | - | - |\n";
  const std::string row = "| 1b | 2048 | 8 | a100_80gb | 4 | 64 | 100000 | amp_bf16 | DEFAULT | FULL_SHARD | True |\n";
  const MeasuredRow composer = parse_measured_table(header + row, "f.md").rows.at(0);
  BOOST_TEST((composer.layout == Layout{.checkpointing = Checkpointing::kFull}));
  BOOST_TEST(!composer.step_time_measured());
  BOOST_TEST((composer.config().layout == Layout{.checkpointing = Checkpointing::kFull}));
  const MeasuredRow megatron =
      parse_measured_table(header + row, "f.md", on_device("", Framework::kMegatron)).rows.at(0);
  BOOST_TEST((megatron.layout.framework == Framework::kMegatron));
  BOOST_TEST((megatron.layout.sharding == Sharding::kFullShard));  // as the table says
  // A Framework column overrides the command's.
  const std::string with_fw =
      replaced(replaced(header, "| Activation Checkpointing |", "| Activation Checkpointing | Framework |"), "| - |\n",
               "| - | - |\n");
  const MeasuredRow titan = parse_measured_table(with_fw + replaced(row, "True |", "True | torchtitan |"), "f.md",
                                                 on_device("", Framework::kMegatron))
                                .rows.at(0);
  BOOST_TEST((titan.layout.framework == Framework::kTorchtitan));
}

BOOST_AUTO_TEST_CASE(bad_cells_name_the_file_line_and_column) {
  for (const auto& [from, to, column] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"| megatron |", "| deepspeed |", "unknown Framework 'deepspeed'"},
           {"| 4 | 2 | 3 |", "| four | 2 | 3 |", "column 'Tensor Parallel' must be a whole number"},
           {"| 4 | 2 | 3 |", "| 4 | 0 | 3 |", "column 'Pipeline Parallel' must be positive"},
           {"| 4 | 2 | 3 |", "| 4 | 2 | 1.5 |", "column 'Virtual Stages'"},
           {"| 4 | 2 | 3 |", "| 4398046511104 | 2 | 3 |", "column 'Tensor Parallel' must be at most 1048576"},
           {"| 2 | 1 | 4 |", "| -2 | 1 | 4 |", "column 'Context Parallel'"},
           {"| 2 | 1 | 4 |", "| 2 | x | 4 |", "column 'Expert Parallel'"},
           {"| 2 | 1 | 4 |", "| 2 | 1 | 8 |", "column 'Data Parallel' is 8 but # GPUs 64"},
           {"| True | True | False |", "| Maybe | True | False |", "column 'Sequence Parallel' must be True or False"},
           {"| True | True | False |", "| True | sure | False |", "column 'Distributed Optimizer'"},
           {"| True | True | False |", "| True | True | 2 |", "column 'Overlap Grad Reduce'"},
           {"| selective |", "| partial |", "column 'Recompute' must be True or False (or none, selective or full)"},
           {"| 5.5 |", "| slow |", "column 'Step Time (s)' must be a number"},
           {"| 5.5 |", "| 0 |", "'Step Time (s)' must be positive"},
           {"| 5.5 |", "| nan |", "column 'Step Time (s)' must be finite"},
           {"| 64 | 1 |", "| 40 | 1 |",
            "tensor x pipeline x context parallel = 16 does not divide the GPU count 40"}}) {
    BOOST_TEST_CONTEXT(to) {
      // Copies: clang 14 does not let a lambda capture structured bindings.
      const std::string row = replaced(kRow, from, to);
      const std::string e = error_of([&] { parse_measured_table(kHeader + row, "g.md", on_device("h100_80gb")); });
      BOOST_TEST(contains(e, "g.md:3: "), e);
      BOOST_TEST(contains(e, column), e);
    }
  }
}

BOOST_AUTO_TEST_CASE(recompute_and_activation_checkpointing_must_agree) {
  const std::string header = replaced(kHeader, "| Recompute |", "| Recompute | Activation Checkpointing |");
  const std::string sep = replaced(header, "| --- |\n", "| --- | --- |\n");
  const auto read = [&](const std::string& recompute, const std::string& ac) {
    return parse_measured_table(sep + replaced(kRow, "| selective |", "| " + recompute + " | " + ac + " |"), "g.md",
                                on_device("h100_80gb"));
  };
  BOOST_TEST((read("full", "True").rows.at(0).layout.checkpointing == Checkpointing::kFull));
  BOOST_TEST((read("none", "False").rows.at(0).layout.checkpointing == Checkpointing::kNone));
  BOOST_TEST((read("selective", "selective").rows.at(0).layout.checkpointing == Checkpointing::kSelective));
  const std::string e = error_of([&] { read("full", "False"); });
  BOOST_TEST(contains(e, "g.md:3: 'Recompute' full disagrees with 'Activation Checkpointing' none"), e);
  // Neither: the header names what is missing.
  const std::string neither = replaced(kHeader, "| Recompute |", "| Remat |");
  BOOST_TEST(contains(error_of([&] { parse_measured_table(neither + kRow, "g.md", on_device("h100_80gb")); }),
                      "g.md:1: required column 'Activation Checkpointing' is missing (or give 'Recompute')"));
}

BOOST_AUTO_TEST_CASE(a_row_needs_throughput_or_step_time) {
  // Neither column.
  const std::string no_step = replaced(kHeader, "| Step Time (s) |", "| Step (s) |");
  BOOST_TEST(contains(error_of([&] { parse_measured_table(no_step + kRow, "g.md", on_device("h100_80gb")); }),
                      "g.md:1: required column 'Throughput (T/s)' is missing (or give 'Step Time (s)')"));
  // Both columns, both cells empty on the row.
  const std::string both = replaced(kHeader, "| Step Time (s) |", "| Step Time (s) | Throughput (T/s) |");
  const std::string sep = replaced(both, "| --- |\n", "| --- | --- |\n");
  const std::string e = error_of(
      [&] { parse_measured_table(sep + replaced(kRow, "| 5.5 |", "|  |  |"), "g.md", on_device("h100_80gb")); });
  BOOST_TEST(contains(e, "g.md:3: neither 'Throughput (T/s)' nor 'Step Time (s)' is given"), e);
  // Throughput, when given, is what the row measured.
  const MeasuredRow r =
      parse_measured_table(sep + replaced(kRow, "| 5.5 |", "| 5.5 | 381300 |"), "g.md", on_device("h100_80gb"))
          .rows.at(0);
  BOOST_TEST(!r.step_time_measured());
  BOOST_TEST(r.tokens_per_s == 381300.0);
}

BOOST_AUTO_TEST_CASE(a_table_without_a_gpu_column_needs_device_and_composer_rows_need_fsdps_columns) {
  BOOST_TEST(
      contains(error_of([&] { parse_measured_table(kHeader + kRow, "g.md"); }),
               "g.md:1: required column 'GPU' is missing (a table in the general form may leave it to --device)"));
  // llm-foundry's tables always name the GPU: one without it is broken, --device or not.
  const std::string foundry =
      "| Model | SeqLen (T) | # GPUs | MicroBatchSize | GlobalBatchSize | Throughput (T/s) | Precision | MP Mode | "
      "Sharding Strategy | Activation Checkpointing |\n| - | - | - | - | - | - | - | - | - | - |\n"
      "| 1b | 2048 | 8 | 4 | 64 | 100000 | amp_bf16 | DEFAULT | FULL_SHARD | True |\n";
  BOOST_TEST(contains(error_of([&] { parse_measured_table(foundry, "f.md", on_device("a100_80gb")); }),
                      "f.md:1: required column 'GPU' is missing"));
  // A composer row of a table with a Framework column but no Sharding Strategy.
  const std::string e = error_of([&] {
    parse_measured_table(kHeader + replaced(kRow, "| megatron |", "| composer |"), "g.md", on_device("h100_80gb"));
  });
  BOOST_TEST(contains(e, "g.md:3: a composer row needs the column 'MP Mode'"), e);
}

BOOST_AUTO_TEST_CASE(vtrains_table_is_read_as_it_is) {
  const MeasuredTable t = read_measured_table(kVtrain, on_device("a100_80gb"));
  BOOST_TEST_REQUIRE(t.rows.size() == 4u);
  const MeasuredRow& r = t.rows[1];  // 8,32,4,1024,16,24,1024,2,2,2,219.732754
  BOOST_TEST(r.line == 3);
  BOOST_TEST(r.gpu == "a100_80gb");
  BOOST_TEST(r.n_gpus == 8);
  BOOST_TEST(r.global_batch == 32);
  BOOST_TEST(r.micro_batch == 4);
  BOOST_TEST(r.seq_len == 1024);
  BOOST_TEST((r.layout.framework == Framework::kMegatron));
  BOOST_TEST(r.layout.tensor == 2);
  BOOST_TEST(r.layout.pipeline == 2);
  BOOST_TEST(r.config().data_parallel() == 2);
  BOOST_TEST(!r.layout.sequence_parallel);
  BOOST_TEST(!r.layout.distributed_optimizer);
  BOOST_TEST(!r.layout.overlap_grad_reduce);     // no DDP gradient bucketing
  BOOST_TEST(r.layout.pipeline_scatter_gather);  // Megatron-DeepSpeed's default
  BOOST_TEST((r.layout.checkpointing == Checkpointing::kFull));
  BOOST_TEST((r.precision == Precision::kAmpFp16));
  BOOST_TEST((r.layout.sharding == Sharding::kNoShard));
  BOOST_TEST(r.measured_step_s == 0.219732754, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.tokens_per_s == 32.0 * 1024 / 0.219732754, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.cells.size() == 11u);
  BOOST_TEST(r.cells.back().first == "iteration time (ms)");

  // Each row's own model: GPT with h = 1024, 16 heads, 24 layers, vocabulary 50257, learned
  // positions of the sequence length (1024), tied embeddings. By hand:
  //   a block: 12 h^2 + 13 h = 12 * 1,048,576 + 13 * 1,024 = 12,596,224; 24 blocks: 302,309,376
  //   token embedding 50,257 * 1,024 = 51,463,168; positions 1,024 * 1,024 = 1,048,576; final norm 2,048
  //   total 354,823,168
  BOOST_TEST_REQUIRE(r.architecture.has_value());
  const ModelConfig& m = *r.architecture;
  BOOST_TEST(r.model == "gpt-h1024-a16-l24");
  BOOST_TEST(m.name == r.model);
  BOOST_TEST(check_architecture(m).empty());
  BOOST_TEST(parameter_count(m, r.seq_len) == 354823168);
  BOOST_TEST(t.rows[3].model == "gpt-h2048-a16-l20");
  BOOST_TEST(t.rows[3].architecture->n_layers == 20);
}

BOOST_AUTO_TEST_CASE(vtrains_gpu_count_must_be_the_product_of_its_degrees) {
  const std::string header = first_line(tpsim::testing::slurp(kVtrain)) + "\n";
  const std::string e = error_of([&] {
    parse_measured_table(header + "2,16,8,1024,16,24,1024,1,1,2,372.1\n8,32,4,1024,16,24,1024,2,1,2,219.7\n", "v.csv",
                         on_device("a100_80gb"));
  });
  BOOST_TEST(contains(e, "v.csv:3: '# GPUs' 8 is not tensor x pipeline x data parallelism 2 x 2 x 1"), e);
  BOOST_TEST(contains(error_of([&] {
                        parse_measured_table(header + "2,16,8,1024,16,24,1024,1,1,2,x\n", "v.csv",
                                             on_device("a100_80gb"));
                      }),
                      "v.csv:2: column 'iteration time (ms)' must be a number"));
  // A header with vTrain's measured column but not all of its others.
  const std::string partial = replaced(header, "hidden size", "hidden");
  BOOST_TEST(contains(error_of([&] {
                        parse_measured_table(partial + "2,16,8,1024,16,24,1024,1,1,2,1\n", "v.csv",
                                             on_device("a100_80gb"));
                      }),
                      "v.csv:1: required column 'hidden size' is missing (of vTrain's table)"));
}

BOOST_AUTO_TEST_CASE(vtrains_multi_node_table_states_each_models_size) {
  // ground_truth_multi.csv's header and two of its rows. The sizes are the rows' GPT models to the
  // digits written: 30 x (12 x 3,072^2 + 13 x 3,072) + (50,257 + 2,048) x 3,072 + 2 x 3,072 =
  // 3,398,584,320 + 160,680,960 + 6,144 = 3,559,271,424 (3.6), and 96 blocks of 12,288 with 2,048
  // positions 174.6 billion (175).
  const std::string header =
      "Parameters (billion),# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
      "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n";
  const std::string rows =
      "3.6,64,512,8,3072,32,30,2048,1,64,1,3566.5\n175,512,1536,2,12288,96,96,2048,8,8,8,55109.6\n";
  const MeasuredTable t = parse_measured_table(header + rows, "m.csv", on_device("a100_80gb"));
  BOOST_TEST_REQUIRE(t.rows.size() == 2u);
  BOOST_TEST(parameter_count(*t.rows[0].architecture, 2048) == 3559271424);
  BOOST_TEST(t.rows[1].model == "gpt-h12288-a96-l96");
  BOOST_TEST(t.rows[1].layout.pipeline == 8);
  BOOST_TEST(t.rows[1].measured_step_s == 55.1096, boost::test_tools::tolerance(1e-12));
  // Another size is another model than the one tpsim would cost: an error naming the row.
  const std::string e = error_of(
      [&] { parse_measured_table(header + replaced(rows, "3.6,64", "3.7,64"), "m.csv", on_device("a100_80gb")); });
  BOOST_TEST(contains(e, "m.csv:2: 'Parameters (billion)' is 3.7 but the GPT model of this row's hidden size"), e);
  BOOST_TEST(contains(e, "has 3.559 billion"), e);
  // The shipped copy of the whole table reads, every row's size agreeing.
  const MeasuredTable shipped =
      read_measured_table(std::string(TPSIM_DATA) + "/measured/vtrain_multi_node.csv", on_device("a100_80gb"));
  BOOST_TEST(shipped.rows.size() == 109u);
}

namespace {

// Least squares of y on four regressors (normal equations, Gaussian elimination with partial
// pivoting): enough for the few dozen rows of one configuration group.
std::array<double, 4> least_squares(const std::vector<std::array<double, 4>>& x, const std::vector<double>& y) {
  double a[4][5] = {};
  for (size_t r = 0; r < x.size(); ++r)
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) a[i][j] += x[r][i] * x[r][j];
      a[i][4] += x[r][i] * y[r];
    }
  for (int c = 0; c < 4; ++c) {
    int pivot = c;
    for (int i = c + 1; i < 4; ++i)
      if (std::fabs(a[i][c]) > std::fabs(a[pivot][c])) pivot = i;
    for (int j = 0; j < 5; ++j) std::swap(a[c][j], a[pivot][j]);
    for (int i = 0; i < 4; ++i) {
      if (i == c) continue;
      const double f = a[i][c] / a[c][c];
      for (int j = c; j < 5; ++j) a[i][j] -= f * a[c][j];
    }
  }
  return {a[0][4] / a[0][0], a[1][4] / a[1][1], a[2][4] / a[2][2], a[3][4] / a[3][3]};
}

}  // namespace

BOOST_AUTO_TEST_CASE(vtrains_single_node_times_are_composed_from_a_few_numbers_per_kernel_shape) {
  // What docs/accuracy.md says of vTrain's single-node table (tests/data/vtrain), held to the
  // file itself: at data parallelism 1, every iteration time of a
  // (hidden, tensor parallel, micro-batch, pipeline) group is a*m*L/p + b*m + c*L/p + d for its m
  // micro-batches and L layers over p stages, to a part in 10^5 (independently timed runs scatter
  // by far more); a, the time of one layer and micro-batch, is the same at every pipeline and data
  // parallel degree; and three of those per-layer times fall as the work in the same kernels grows.
  const std::filesystem::path file = std::filesystem::path(TPSIM_TEST_DATA) / "vtrain" / "vtrain-single-node.csv";
  BOOST_TEST_REQUIRE(std::filesystem::exists(file));
  const MeasuredTable t = read_measured_table(file, on_device("a100_80gb"));
  BOOST_TEST_REQUIRE(t.rows.size() == 1440u);
  using Group = std::array<int64_t, 5>;  // hidden, tp, micro-batch, pp, dp
  std::map<Group, std::pair<std::vector<std::array<double, 4>>, std::vector<double>>> groups;
  for (const MeasuredRow& r : t.rows) {
    const int64_t tp = r.layout.tensor, pp = r.layout.pipeline, dp = r.n_gpus / (tp * pp);
    const double m = static_cast<double>(r.global_batch / (r.micro_batch * dp));
    const double per_stage = static_cast<double>(r.architecture->n_layers) / static_cast<double>(pp);
    auto& g = groups[{r.architecture->d_model, tp, r.micro_batch, pp, dp}];
    g.first.push_back({m * per_stage, m, per_stage, 1.0});
    g.second.push_back(r.measured_step_s * 1e3);
  }
  std::map<std::array<int64_t, 3>, std::vector<double>> per_layer;  // a of each (pp, dp) group
  int exact = 0;
  for (const auto& [key, g] : groups) {
    if (g.second.size() < 8) continue;  // micro-batch 8: four rows, no more than the four numbers
    const std::array<double, 4> c = least_squares(g.first, g.second);
    per_layer[{key[0], key[1], key[2]}].push_back(c[0]);
    if (key[4] != 1) continue;  // beyond dp 1 the gradient all-reduce adds a term in L alone
    double worst = 0;
    for (size_t i = 0; i < g.second.size(); ++i) {
      const auto& x = g.first[i];
      worst = std::max(worst, std::fabs(c[0] * x[0] + c[1] * x[1] + c[2] * x[2] + c[3] - g.second[i]) / g.second[i]);
    }
    BOOST_TEST_CONTEXT("hidden " << key[0] << ", tp " << key[1] << ", micro-batch " << key[2] << ", pp " << key[3]) {
      BOOST_TEST(worst < 1e-5);
    }
    ++exact;
  }
  BOOST_TEST(exact == 48);
  for (const auto& [key, a] : per_layer) {
    const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
    BOOST_TEST_CONTEXT("hidden " << key[0] << ", tp " << key[1] << ", micro-batch " << key[2]) {
      BOOST_TEST(*hi / *lo - 1.0 < 1e-4);
    }
  }
  const auto a = [&](int64_t hidden, int64_t tp, int64_t mb) { return per_layer.at({hidden, tp, mb}).front(); };
  BOOST_TEST(a(2048, 4, 2) < 0.95 * a(2048, 4, 1));  // twice the tokens per kernel, 8% less time
  BOOST_TEST(a(1024, 2, 4) < 0.92 * a(1024, 2, 2));  // 11% less
  BOOST_TEST(a(2048, 4, 1) < 0.9 * a(1024, 4, 1));   // four times the FLOPs in the same kernels, 13% less
}

BOOST_AUTO_TEST_CASE(vtrains_table_needs_device) {
  const std::string e = error_of([&] { read_measured_table(kVtrain); });
  BOOST_TEST(contains(e, kVtrain + ":1: vTrain's table has no GPU column: pass --device"), e);
  const Run r = tpsim::testing::run_tpsim("validate " + kVtrain);
  BOOST_TEST(r.status == 2);
  BOOST_TEST(count_lines(r.err) == 1);
  BOOST_TEST(contains(r.err, "pass --device"), r.err);
  const Run f = tpsim::testing::run_tpsim("validate " + kVtrain + " --device a100_80gb --framework deepspeed");
  BOOST_TEST(f.status == 2);
  BOOST_TEST(count_lines(f.err) == 1);
  BOOST_TEST(contains(f.err, "--framework 'deepspeed': expected composer, megatron or torchtitan"), f.err);
}

BOOST_AUTO_TEST_CASE(validate_prints_vtrains_columns_then_the_predictions) {
  const std::string vtrain_columns =
      "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
      "data parallelism,pipeline parallelism,iteration time (ms)";
  const std::string predictions =
      "Predicted Throughput (T/s),Predicted MFU,Predicted HFU,Predicted Memory (GiB),Error (%),"
      "Predicted Throughput Low (T/s),Predicted Throughput High (T/s),Held Out,Doublings Beyond Fitted,"
      "Predicted Step Time (s)";
  const Run r =
      tpsim::testing::run_tpsim("validate " + kVtrain + " --device a100_80gb --framework megatron --format csv");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  BOOST_TEST(first_line(r.out) == vtrain_columns + "," + predictions);
  BOOST_TEST(count_lines(r.out) == 5);
  // Each row: its 11 cells as written, then the predictions; the error is of step time.
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);
  std::getline(lines, line);
  BOOST_TEST(line.rfind("2,16,8,1024,16,24,1024,1,1,2,372.160408,", 0) == 0u, line);
  std::vector<std::string> cells;
  for (std::istringstream c(line); std::getline(c, line, ',');) cells.push_back(line);
  BOOST_TEST_REQUIRE(cells.size() == 21u);
  const double step_s = std::stod(cells[20]), error_percent = std::stod(cells[15]);
  // Within the rounding of the printed step time (4 decimals of 0.37 s: 0.014 points).
  BOOST_TEST(std::abs(error_percent - 100 * (step_s / 0.372160408 - 1)) < 0.05);
  // Markdown: the same columns, and the summary names each row's model.
  const Run md = tpsim::testing::run_tpsim("validate --table " + kVtrain + " --device a100_80gb");
  BOOST_TEST_REQUIRE(md.status == 0, md.err);
  BOOST_TEST(contains(md.out, "| # GPUs | global batch |"));
  BOOST_TEST(contains(md.out, "| Held Out | Doublings Beyond Fitted | Predicted Step Time (s) |"));
  BOOST_TEST(contains(md.out, "| model gpt-h2048-a16-l20 | 1 |"));
}

BOOST_AUTO_TEST_CASE(the_attention_column_costs_megatrons_core_attention) {
  const std::string header =
      replaced(replaced(kHeader, "| Recompute |", "| Recompute | Attention |"), "| --- |\n", "| --- | --- |\n");
  const auto read = [&](const std::string& cell) {
    return parse_measured_table(header + replaced(kRow, "| selective |", "| selective | " + cell + " |"), "g.md",
                                on_device("h100_80gb"));
  };
  BOOST_TEST(read("unfused").rows.at(0).unfused_attention);
  BOOST_TEST(!read("Flash").rows.at(0).unfused_attention);
  BOOST_TEST(!parse_measured_table(kHeader + kRow, "g.md", on_device("h100_80gb")).rows.at(0).unfused_attention);
  const std::string e = error_of([&] { read("fused"); });
  BOOST_TEST(contains(e, "g.md:3: column 'Attention' must be flash or unfused, got 'fused'"), e);
  ModelConfig m;
  use_megatron_core_attention(m);
  BOOST_TEST(m.unfused_attention);
  BOOST_TEST(m.attention_dropout == 0.1);
  BOOST_TEST(vtrain_gpt_model(1024, 16, 24).unfused_attention);  // vTrain's rows: the same attention
}

namespace {
const std::string kLiterature = std::string(TPSIM_DATA) + "/measured/literature_";

// Each row of a literature table on its own (its header and that line), resolved and predicted as
// `validate` does: the prediction, or the one-line reason tpsim refuses it.
struct LiteratureRow {
  std::string where;
  std::string refusal;  // empty: predicted
  RowResult result;
  bool costed_as_asked = false;  // the model's attention is the row's Attention column
};

std::vector<LiteratureRow> each_row_alone(const std::string& table) {
  std::ifstream in(table);
  std::string header, line;
  std::getline(in, header);
  CommonOptions o;
  o.models_file = std::string(TPSIM_DATA) + "/models/literature_megatron.yaml";
  Context ctx(o);
  std::vector<LiteratureRow> out;
  for (int n = 2; std::getline(in, line); ++n) {
    const std::string one = (tpsim::testing::scratch_dir() / ("literature_row_" + std::to_string(n) + ".csv")).string();
    std::ofstream(one) << header << "\n" << line << "\n";
    LiteratureRow r{.where = table + ":" + std::to_string(n)};
    std::vector<std::string> warnings;
    std::vector<ResolvedRow> rows;
    r.refusal = error_of([&] { rows = load_rows(ctx, {one}, warnings); });
    if (!r.refusal.empty()) {
      out.push_back(r);
      continue;
    }
    const ResolvedRow& row = rows.at(0);
    r.result = predict_row(row, ctx.profile(row.row.gpu).params);
    r.costed_as_asked = row.model->unfused_attention == row.row.unfused_attention;
    out.push_back(r);
  }
  return out;
}
}  // namespace

// Not an accuracy check (docs/accuracy.md, "Published Megatron and torchtitan figures", reports
// the errors): every shipped row parses, and is either predicted or refused with one line naming
// what tpsim does not model.
BOOST_AUTO_TEST_CASE(every_published_row_is_predicted_or_refused_in_one_line) {
  std::map<std::string, size_t> predicted;
  for (const std::string name : {"megatron", "megatron_cp_ep", "megatron_fsdp", "torchtitan", "lora"}) {
    const std::string table = kLiterature + name + ".csv";
    BOOST_TEST_CONTEXT(table) {
      const MeasuredTable t = read_measured_table(table);
      const std::vector<LiteratureRow> rows = each_row_alone(table);
      BOOST_TEST_REQUIRE(rows.size() == t.rows.size());
      for (const auto& r : rows) {
        BOOST_TEST_CONTEXT(r.where) {
          if (!r.refusal.empty()) {
            BOOST_TEST(r.refusal.find('\n') == std::string::npos, r.refusal);
            BOOST_TEST(contains(r.refusal, "not modelled yet"), r.refusal);
            continue;
          }
          ++predicted[name];
          BOOST_TEST(std::isfinite(r.result.error));
          BOOST_TEST(r.result.prediction.step_s > 0);
          BOOST_TEST(r.costed_as_asked);
        }
      }
    }
  }
  // The Megatron table is the one docs/accuracy.md's errors are of: every row of it is predicted.
  BOOST_TEST(predicted["megatron"] == read_measured_table(kLiterature + "megatron.csv").rows.size());
  BOOST_TEST(predicted["megatron_fsdp"] == 2u);  // the Llama 3 8B rows; the others offload activations
  BOOST_TEST(predicted["lora"] == read_measured_table(kLiterature + "lora.csv").rows.size());
}

// validate --skip-refused predicts the rows tpsim models and warns of each it refuses, one line each;
// without it the first refused row is the run's one-line error.
BOOST_AUTO_TEST_CASE(skip_refused_predicts_the_rest_and_names_each_refused_row) {
  // The literature's Qwen3-235B row with its experts split over the tensor ranks (expert tensor
  // parallel 2, tp's): its 32 expert ranks no longer fit in the 16 data-parallel ones.
  const std::string table = (tpsim::testing::scratch_dir() / "literature_megatron_cp_ep_etp2.csv").string();
  {
    std::ifstream in(kLiterature + "megatron_cp_ep.csv");
    std::ofstream out(table);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (n == 5) {
        const std::string from = ",32,1,16,",
                          to = ",32,2,16,";  // Expert Parallel, Expert Tensor Parallel, Data Parallel
        BOOST_TEST_REQUIRE(contains(line, "qwen3-235b-a22b"));
        BOOST_TEST_REQUIRE(contains(line, from));
        line.replace(line.find(from), from.size(), to);
      }
      out << line << "\n";
    }
  }
  const std::string args = "validate --framework megatron --models " + std::string(TPSIM_DATA) +
                           "/models/literature_megatron.yaml --profile " + std::string(TPSIM_DATA) +
                           "/profiles/h100_80gb.json --table " + table + " --format json";
  const Run strict = tpsim::testing::run_tpsim(args);
  BOOST_TEST(strict.status != 0);
  BOOST_TEST(tpsim::testing::count_lines(strict.err) == 1, strict.err);
  BOOST_TEST(contains(strict.err, "literature_megatron_cp_ep_etp2.csv:5: expert parallel 32"), strict.err);
  const Run skip = tpsim::testing::run_tpsim(args + " --skip-refused");
  BOOST_TEST_REQUIRE(skip.status == 0, skip.err);
  const size_t refused = static_cast<size_t>(std::count(skip.err.begin(), skip.err.end(), '\n'));
  BOOST_TEST(refused >= 1u);
  BOOST_TEST(contains(skip.err, "literature_megatron_cp_ep_etp2.csv:5: expert parallel 32"), skip.err);
  BOOST_TEST(contains(skip.err, "not predicted (--skip-refused)"), skip.err);
  const auto j = nlohmann::json::parse(skip.out);
  BOOST_TEST(j["rows"].size() + refused == read_measured_table(table).rows.size());
}
