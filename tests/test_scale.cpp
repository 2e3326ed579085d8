// tpsim scale: the scaling tables' readers, the scaling model on hand-computed cases, the held-out
// error on the two seed tables, and bad input through the binary.
#define BOOST_TEST_MODULE test_scale
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "calibrate/scale_fit.hpp"
#include "io/error.hpp"
#include "io/scaling_io.hpp"
#include "model/scaling.hpp"
#include "run_tpsim.hpp"

using namespace tpsim;
using namespace tpsim::testing;

namespace {
const std::string kCsc = std::string(TPSIM_DATA) + "/measured/dp_scaling_csc.md";
const std::string k32 = std::string(TPSIM_DATA) + "/measured/dp_scaling_32gpu.md";
const char* kHeader = "| Benchmark | Framework | Cluster | GPUs | Date | Img/sec |\n|---|---|---|---|---|---|\n";

ScaleCv held_out(const std::string& path) {
  const ScalingTable t = read_scaling_table(path);
  const ScaleInputs in = scale_inputs(t, load_scaling_models());
  const ScaleParamSet set(in.cases);
  return cross_validate_scaling(set, in.cases, t.rows.size());
}
}  // namespace

BOOST_AUTO_TEST_CASE(csc_table_error_cell_is_a_missing_measurement_with_its_line) {
  const ScalingTable t = read_scaling_table(kCsc);
  BOOST_TEST(t.kind == "csc");
  BOOST_TEST(t.rows.size() == 165u);  // 167 table lines less the header and its rule
  BOOST_REQUIRE(t.warnings.size() == 1u);
  BOOST_TEST(t.warnings[0].find("dp_scaling_csc.md:22") != std::string::npos);
  BOOST_TEST(!t.rows[19].measured.has_value());
}

BOOST_AUTO_TEST_CASE(csc_groups_without_a_one_gpu_row_take_the_ddp_row_of_their_run) {
  const ScalingTable t = read_scaling_table(kCsc);
  const ScalingRow& deepspeed = t.rows[6];  // DeepSpeed, synthetic data, mahti, 2022-05-18, 4 GPUs
  const ScalingRow* one = one_gpu_row(t, deepspeed);
  BOOST_REQUIRE(one != nullptr);
  BOOST_TEST(one->line == 3);  // DDP, synthetic, 1 GPU, same version, cluster and date
  // A group with neither its own nor a DDP one-GPU row is left unpredicted, and listed.
  const ScalingTable lone = parse_scaling_table(
      std::string(kHeader) + "| Horovod, synthetic | PyTorch 2 | mahti | 8 | 2024-01-01 | 5000 |\n", "t.md");
  BOOST_TEST(one_gpu_row(lone, lone.rows[0]) == nullptr);
  BOOST_TEST(scale_inputs(lone, load_scaling_models()).unanchored.size() == 1u);
}

BOOST_AUTO_TEST_CASE(malformed_tables_are_one_line_errors) {
  const auto fails = [](const std::string& text, const std::string& part) {
    try {
      parse_scaling_table(text, "t.md");
    } catch (const Error& e) {
      const std::string m = e.what();
      BOOST_TEST(m.find(part) != std::string::npos, m);
      BOOST_TEST(m.find('\n') == std::string::npos);
      return;
    }
    BOOST_FAIL("no error for: " + text);
  };
  fails(std::string(kHeader) + "| DDP, synthetic | x | mahti | 1 | d |\n", "t.md:3: 5 cells");
  fails(std::string(kHeader) + "| DDP, synthetic | x | nowhere | 1 | d | 5 |\n", "Cluster 'nowhere'");
  fails(std::string(kHeader) + "| DDP, synthetic | x | mahti | 0 | d | 5 |\n", "GPUs '0'");
  fails(std::string(kHeader) + "| Caffe | x | mahti | 1 | d | 5 |\n", "Benchmark 'Caffe'");
  fails("| a | b |\n|---|---|\n| 1 | 2 |\n", "not a scaling table");
  fails(
      "## batch size = 8\n| num_nodes | gpu_num_per_node | batch_size_per_device | throughput | speedup |\n|-|-|-|-|-|\n"
      "| 1 | 1 | 16 | 10 | 1 |\n",
      "batch_size_per_device 16");
}

BOOST_AUTO_TEST_CASE(seed_002_summary_rows_keep_their_seven_repeats) {
  const ScalingTable t = read_scaling_table(k32);
  BOOST_TEST(t.kind == "32gpu");
  BOOST_TEST(t.rows.size() == 15u);  // 4 + 4 + 4 + 3 summary rows
  for (const ScalingRow& r : t.rows) BOOST_TEST(r.repeats.size() == 7u);
  BOOST_TEST(t.rows[0].gpus_per_node == 8);
  // batch 96 at 1 GPU: 149.9 149.8 149.8 149.9 149.7 149.8 150.0 -> sd 0.0976, mean 149.843
  BOOST_TEST(repeat_cv(t.rows[0].repeats) == 0.0976 / 149.843, boost::test_tools::tolerance(0.01));
}

namespace {
// A node of 4 GPUs (300 GB/s links, 100 GB/s network) and ResNet-50's step on all four: batch 32
// per GPU at 800 samples/s on one (40 ms per step), 102.4 MB of gradients.
DeviceSpec four_gpu_node() {
  DeviceSpec node;
  node.gpus_per_node = 4;
  node.intra_node_bytes_per_s = 300e9;
  node.inter_node_bytes_per_s = 100e9;
  return node;
}
ScalingRun resnet_on_four(SyncFramework framework) {
  ScalingRun run;
  run.gpus = 4;
  run.per_device_batch = 32;
  run.throughput_1gpu = 800;
  run.grad_bytes = 102.4e6;
  run.framework = framework;
  return run;
}
}  // namespace

BOOST_AUTO_TEST_CASE(one_node_ring_all_reduce_and_its_exposed_part_by_hand) {
  const DeviceSpec node = four_gpu_node();
  ScalingParams p;
  p.intra_node_link_efficiency = 0.5;
  p.overlap_slowdown = 0.1;
  p.exposed_fraction = 0;
  p.fixed_fraction = 0;
  ScalingRun run = resnet_on_four(SyncFramework::kDdp);
  const ScalingPrediction s = predict_scaling(run, node, p);
  // Ring all-reduce in one node: 2 x ((n-1)/n x B / (300 GB/s x 0.5) + (n-1) x 5 us).
  const double ar = 2 * (0.75 * 102.4e6 / 150e9 + 3 * 5e-6);
  BOOST_TEST(s.allreduce_s == ar, boost::test_tools::tolerance(1e-9));
  // DDP: the last 25 MiB bucket is exposed (the backward, 26.7 ms, hides the rest).
  const double exposed = ar * 25.0 * 1024 * 1024 / 102.4e6;
  BOOST_TEST(s.exposed_s == exposed, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(s.step_s == 0.04 + exposed + 0.1 * (ar - exposed), boost::test_tools::tolerance(1e-9));
  BOOST_TEST(s.throughput == 128 / s.step_s, boost::test_tools::tolerance(1e-12));
  // A fixed global batch: 64 samples per step of 2 per GPU -> 8 micro-batches on 4 GPUs.
  run.per_device_batch = 2;
  run.global_batch = 64;
  BOOST_TEST(scaling_micro_batches(run) == 8);
  run.global_batch = 60;
  BOOST_TEST(scaling_micro_batches(run) == 0);
}

// Horovod's negotiation cycles add their seconds to every step of more than one GPU, and to no
// other framework's.
BOOST_AUTO_TEST_CASE(horovod_coordination_adds_its_seconds_per_step) {
  const DeviceSpec node = four_gpu_node();
  ScalingParams p;
  p.coordination_s = 0.005;
  ScalingRun run = resnet_on_four(SyncFramework::kHorovod);
  const ScalingPrediction h = predict_scaling(run, node, p);
  BOOST_TEST(h.coordination_s == 0.005);
  BOOST_TEST(h.step_s == h.compute_s + h.fixed_s + h.exposed_s + h.slowdown_s + h.sync_s + 0.005,
             boost::test_tools::tolerance(1e-12));
  run.framework = SyncFramework::kDeepSpeed;
  BOOST_TEST(predict_scaling(run, node, p).coordination_s == 0.0);
  run.framework = SyncFramework::kHorovod;
  run.gpus = 1;
  BOOST_TEST(predict_scaling(run, node, p).coordination_s == 0.0);
}

// Held-out MAPE of the multi-GPU rows, each group held out of the fit that predicts it. Issue 18
// asks for at most 4% on seed 000: 3.98% (linear scaling: 12.25%) with the physical ranges and
// priors (link efficiencies 0.5-0.95, DDP's exposed share 0-0.7), the per-cluster step jitter and
// Horovod's coordination seconds per step (4.70% without them). An accuracy figure only: the
// sanitizer build runs the same cross-validation on seed 002 below and skips this one's minutes of
// fits there.
BOOST_AUTO_TEST_CASE(held_out_mape_on_seed_000_within_4_percent,
                     *boost::unit_test::enable_if<!TPSIM_TEST_SANITIZED>()) {
  const ScaleCv cv = held_out(kCsc);
  BOOST_TEST(cv.predicted == 124);
  BOOST_TEST(cv.mape <= 4.0);
  BOOST_TEST(cv.linear_mape > 12.0);
}

BOOST_AUTO_TEST_CASE(held_out_mape_on_seed_002_within_3_percent) {
  const ScaleCv cv = held_out(k32);
  BOOST_TEST(cv.predicted == 11);
  BOOST_TEST(cv.mape <= 3.0);
  BOOST_TEST(cv.linear_mape > 13.0);
}

// A named cluster's link efficiencies carry the sourced range and a prior; a parameter left at a
// bound names the groups whose residuals push it there. Rows that scale perfectly (4 GPUs, 4x)
// want the all-reduce free: the intra-node efficiency at its upper bound 0.95 is pushed there.
BOOST_AUTO_TEST_CASE(physical_ranges_and_the_groups_that_push_a_parameter_to_its_bound) {
  const ScalingTable t = parse_scaling_table(std::string(kHeader) +
                                                 "| DDP, synthetic | PyTorch 2 | mahti | 1 | 2024-01-01 | 800 |\n"
                                                 "| DDP, synthetic | PyTorch 2 | mahti | 4 | 2024-01-01 | 3200 |\n",
                                             "t.md");
  const ScaleInputs in = scale_inputs(t, load_scaling_models());
  const ScaleParamSet set(in.cases);
  const int intra = set.index("mahti.intra_node_link_efficiency");
  BOOST_REQUIRE(intra >= 0);
  const ParamInfo& p = *set.params()[static_cast<size_t>(intra)];
  BOOST_TEST(p.lower == 0.5);
  BOOST_TEST(p.upper == 0.95);
  BOOST_TEST(std::string(p.meaning).find("nccl-tests") != std::string::npos);
  BOOST_TEST(set.priors()[static_cast<size_t>(intra)].width > 0);
  const int exposed = set.index("ddp.exposed_fraction");
  BOOST_REQUIRE(exposed >= 0);
  BOOST_TEST(set.params()[static_cast<size_t>(exposed)]->upper == 0.7);
  ScaleFit fit;
  fit.values = set.start();
  fit.values[static_cast<size_t>(intra)] = 0.95;
  for (size_t i = 0; i < fit.values.size(); ++i)
    fit.report.push_back(fitted_report(*set.params()[i], fit.values[i], -1));
  const std::vector<AtBoundNote> notes = at_bound_notes(set, in.cases, std::vector<bool>(in.cases.size(), false), fit);
  const auto it = std::find_if(notes.begin(), notes.end(),
                               [&](const AtBoundNote& n) { return n.param == static_cast<size_t>(intra); });
  BOOST_REQUIRE(it != notes.end());
  BOOST_TEST(it->upper);
  BOOST_REQUIRE(it->pushing.size() == 1u);
  BOOST_TEST(it->pushing[0].group == in.cases[1].group);
  BOOST_TEST(it->pushing[0].gradient < 0.0);
  BOOST_TEST(it->pulling.empty());
}

BOOST_AUTO_TEST_CASE(bad_input_through_the_binary) {
  const auto one_line_failure = [](const std::string& args, const std::string& part) {
    const Run r = run_tpsim("scale " + args);
    BOOST_TEST(r.status != 0, args);
    BOOST_TEST(r.err.find(part) != std::string::npos, args + " -> " + r.err);
  };
  one_line_failure("--table /nonexistent.md --cv", "/nonexistent.md");
  one_line_failure("--table " + kCsc, "--cv");
  one_line_failure("--model resnet50 --cluster nowhere --throughput-1gpu 700", "--cluster 'nowhere'");
  one_line_failure("--model resnet51 --cluster mahti --throughput-1gpu 700", "--model 'resnet51'");
  one_line_failure("--model resnet50 --cluster mahti", "--throughput-1gpu");
  one_line_failure("--model resnet50 --cluster mahti --throughput-1gpu -3", "--throughput-1gpu '-3'");
  one_line_failure("--model gpt-neo-1.3b --cluster lumi --throughput-1gpu 22 --gpus 3", "--gpus 3");
  one_line_failure("--model resnet50 --cluster mahti --throughput-1gpu 700 --framework mpi", "--framework 'mpi'");
  const Run ok = run_tpsim("scale --model resnet50 --cluster mahti --throughput-1gpu 780 --gpus 1,4,8 --format csv");
  BOOST_TEST(ok.status == 0, ok.err);
  BOOST_TEST(count_lines(ok.out) == 4);
}

// Issue 18: without --throughput-1gpu, the one-GPU throughput of a transformer tpsim models is its
// own prediction: Composer's plain DDP on one GPU, what `tpsim predict` gives a YAML without
// fsdp_config at --gpus 1. The 1-GPU row equals predict's, cell for cell at the printed precision.
BOOST_AUTO_TEST_CASE(one_gpu_throughput_is_tpsims_own_prediction) {
  const std::filesystem::path yaml = scratch_dir() / "ddp.yaml";
  std::ofstream(yaml) << "model:\n  name: mpt_causal_lm\n  d_model: 2048\n  n_heads: 16\n  n_layers: 24\n"
                         "max_seq_len: 2048\nprecision: amp_bf16\n";
  const Run p = run_tpsim("predict --config " + yaml.string() +
                          " --model 1b --device a100_80gb --gpus 1 --micro-batch 4 --format csv");
  BOOST_TEST_REQUIRE(p.status == 0, p.err);
  BOOST_TEST(csv_cell(p.out, "Sharding Strategy") == "DDP");
  const Run s = run_tpsim("scale --model 1b --device a100_80gb --gpus 1,8 --seq 2048 --micro-batch 4 --format csv");
  BOOST_TEST_REQUIRE(s.status == 0, s.err);
  BOOST_TEST(count_lines(s.out) == 3);
  BOOST_TEST(csv_cell(s.out, "Throughput (samples/s)") == csv_cell(p.out, "Throughput (S/s)"));
  BOOST_TEST(csv_cell(s.out, "Step (s)") == csv_cell(p.out, "Step Time (s)"));
  BOOST_TEST(s.err.find("tpsim's own prediction") != std::string::npos, s.err);
  BOOST_TEST(s.err.find("its interval, the profile's widened beyond its fitted rows") != std::string::npos, s.err);
  // The same on a cluster: its device (mahti: a100_40gb) predicts the one GPU.
  const Run m = run_tpsim("scale --model 125m --cluster mahti --gpus 1,4 --seq 2048 --micro-batch 8 --format csv");
  BOOST_TEST_REQUIRE(m.status == 0, m.err);
  BOOST_TEST(m.err.find("--device a100_40gb") != std::string::npos, m.err);
  // A model that does not fit on one GPU: one line naming it.
  const Run big = run_tpsim("scale --model 7b --cluster mahti --seq 2048 --micro-batch 1");
  BOOST_TEST(big.status != 0);
  BOOST_TEST(big.err.find("--model 7b: does not fit on one a100_40gb") != std::string::npos, big.err);
  BOOST_TEST(count_lines(big.err) == 1);
  const Run nomb = run_tpsim("scale --model 1b --device a100_80gb --seq 2048");
  BOOST_TEST(nomb.status != 0);
  BOOST_TEST(nomb.err.find("--micro-batch") != std::string::npos, nomb.err);
}
