// tpsim plan and predict --config, run as a user runs them.
#define BOOST_TEST_MODULE plan
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/run_tpsim.hpp"

namespace fs = std::filesystem;

namespace {
using tpsim::testing::Run;
using tpsim::testing::slurp;
Run run(const std::string& args) { return tpsim::testing::run_tpsim(args); }
const std::string kData = TPSIM_DATA;
}  // namespace

BOOST_AUTO_TEST_CASE(plan_ranks_configurations_that_fit_by_time) {
  const Run r = run("plan --model 30b --seq 8192 --device h100_80gb --gpus 32,64,128 --tokens 1T "
                    "--global-batch-tokens 4Mi --price-per-gpu-hour 2.50 --top 5 --format json");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  BOOST_TEST_REQUIRE(j.size() == 5u);
  double previous = 0;
  for (const auto& row : j) {
    const double days = row["Time to Train (days)"].get<double>();
    BOOST_TEST(days >= previous);  // fastest first
    previous = days;
    BOOST_TEST(row["Time Low (days)"].get<double>() <= days);
    BOOST_TEST(row["Time High (days)"].get<double>() >= days);
    BOOST_TEST(row["Cost ($)"].get<double>() == row["GPU-hours"].get<double>() * 2.5, boost::test_tools::tolerance(1e-3));
    BOOST_TEST(row["Headroom (GiB)"].get<double>() >= 0.0);
    // 4Mi tokens at 8192 is 512 sequences, a multiple of every GPU count asked.
    BOOST_TEST(row["GlobalBatchSize (T)"].get<int64_t>() == 4194304);
    BOOST_TEST(row["Global Batch"].get<std::string>() == "as asked");
  }
}

BOOST_AUTO_TEST_CASE(plan_says_how_the_global_batch_was_reached_and_why_choices_were_rejected) {
  const Run r = run("plan --model 1b --seq 2048 --device a100_80gb,h100_80gb --gpus 8,1024 --global-batch-tokens 1M "
                    "--objective cost --price-per-gpu-hour 2 --top 3 --explain --format json");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j.contains("plan"));
  BOOST_TEST(j["best per device"].size() == 2u);
  // 1e6 tokens is 488 sequences of 2048: on 8 GPUs the nearest multiple is 488; on 1024 GPUs no
  // whole sequence per GPU is possible.
  bool unreachable = false;
  for (const auto& row : j["rejected"])
    if (row["# GPUs"].get<int64_t>() == 1024) unreachable = row["Reason"].get<std::string>().find("not reachable") != std::string::npos;
  BOOST_TEST(unreachable);
}

BOOST_AUTO_TEST_CASE(plan_with_a_micro_batch_plans_only_that_micro_batch) {
  const Run r = run("plan --model 7b --seq 2048 --device h100_80gb --gpus 8,64 --global-batch-tokens 4Mi "
                    "--micro-batch 3 --top 50 --explain --format json");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  BOOST_TEST_REQUIRE(j["plan"].size() > 0u);
  for (const auto& row : j["plan"]) BOOST_TEST(row["MicroBatchSize"].get<int64_t>() == 3);
  // Without it, plan scans every micro-batch that fits.
  const Run all = run("plan --model 7b --seq 2048 --device h100_80gb --gpus 8,64 --global-batch-tokens 4Mi "
                      "--top 50 --format json");
  BOOST_TEST_REQUIRE(all.status == 0, all.err);
  bool other = false;
  for (const auto& row : nlohmann::json::parse(all.out)) other = other || row["MicroBatchSize"].get<int64_t>() != 3;
  BOOST_TEST(other);
  // A micro-batch above the per-GPU batch is a rejection with its reason, not a silent scan.
  const Run big = run("plan --model 7b --seq 2048 --device h100_80gb --gpus 64 --global-batch-tokens 1Mi "
                      "--micro-batch 64 --explain --format json");
  BOOST_TEST_REQUIRE(big.status == 0, big.err);
  const auto b = nlohmann::json::parse(big.out);
  BOOST_TEST(b["plan"].empty());
  BOOST_TEST_REQUIRE(b["rejected"].size() > 0u);
  BOOST_TEST(b["rejected"][0]["Reason"].get<std::string>().find("--micro-batch 64 is more than the 8 sequences per GPU") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(predict_and_plan_read_llm_foundry_yamls_and_flags_win) {
  const Run r = run("predict --config " + kData + "/examples/mpt-7b-pretrain.yaml --gpus 64 --format json");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j[0]["SeqLen (T)"].get<int64_t>() == 2048);
  BOOST_TEST(j[0]["GlobalBatchSize"].get<int64_t>() == 1024);
  BOOST_TEST(r.err.find("not modelled, ignored: variables, run_name") != std::string::npos);
  BOOST_TEST(r.err.find("micro-batch auto:") != std::string::npos);
  const Run o = run("predict --config " + kData + "/examples/mpt-7b-pretrain.yaml --gpus 64 --seq 4096 --micro-batch 2 --format json");
  BOOST_TEST_REQUIRE(o.status == 0, o.err);
  const auto k = nlohmann::json::parse(o.out);
  BOOST_TEST(k[0]["SeqLen (T)"].get<int64_t>() == 4096);
  BOOST_TEST(k[0]["MicroBatchSize"].get<int64_t>() == 2);
  const Run p = run("plan --config " + kData + "/examples/mpt-30b-fp8.yaml --device h100_80gb --gpus 64,128 --tokens 500B --top 2 --format json");
  BOOST_TEST(p.status == 0, p.err);
}

// --ckpt restricts the plan to one kind; --ckpt any adds selective to none and full (the default,
// what llm-foundry runs); --explain names each kind.
BOOST_AUTO_TEST_CASE(plan_searches_the_kinds_of_checkpointing_asked) {
  const std::string plan = "plan --model 7b --seq 2048 --device h100_80gb --gpus 8 --top 1000 --explain --format json ";
  const auto kinds = [](const nlohmann::json& j) {
    std::vector<std::string> out;
    for (const auto& row : j["plan"]) {
      const auto& c = row["Activation Checkpointing"];
      const std::string kind = c.is_boolean() ? (c.get<bool>() ? "full" : "none") : c.get<std::string>();
      if (std::find(out.begin(), out.end(), kind) == out.end()) out.push_back(kind);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto choices = [](const nlohmann::json& j) {
    std::string all;
    for (const auto& row : j["rejected"]) all += row["Choice"].get<std::string>() + "; ";
    return all;
  };
  const Run d = run(plan);
  BOOST_TEST_REQUIRE(d.status == 0, d.err);
  const auto dj = nlohmann::json::parse(d.out);
  BOOST_TEST(kinds(dj) == (std::vector<std::string>{"full", "none"}));
  BOOST_TEST(choices(dj).find("selective") == std::string::npos);
  const Run a = run(plan + "--ckpt any");
  BOOST_TEST_REQUIRE(a.status == 0, a.err);
  const auto aj = nlohmann::json::parse(a.out);
  BOOST_TEST(kinds(aj) == (std::vector<std::string>{"full", "none", "selective"}));
  BOOST_TEST(choices(aj).find("FULL_SHARD, selective checkpointing; ") != std::string::npos, choices(aj));
  BOOST_TEST(choices(aj).find("FULL_SHARD, checkpointing; ") != std::string::npos);
  BOOST_TEST(choices(aj).find("FULL_SHARD, no checkpointing; ") != std::string::npos);
  const Run s = run(plan + "--ckpt selective");
  BOOST_TEST_REQUIRE(s.status == 0, s.err);
  BOOST_TEST(kinds(nlohmann::json::parse(s.out)) == std::vector<std::string>{"selective"});
  const Run n = run(plan + "--no-ckpt");
  BOOST_TEST_REQUIRE(n.status == 0, n.err);
  BOOST_TEST(kinds(nlohmann::json::parse(n.out)) == std::vector<std::string>{"none"});
}

BOOST_AUTO_TEST_CASE(bad_plan_input_is_one_line) {
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"plan --model 7b --seq 2048 --gpus 8 --objective speed", "--objective 'speed'"},
           {"plan --model 7b --seq 2048 --gpus 8 --objective cost", "needs --price-per-gpu-hour"},
           {"plan --model 7b --seq 2048 --gpus 8 --price-per-gpu-hour -3", "--price-per-gpu-hour '-3'"},
           {"plan --model 7b --seq 2048", "--gpus"},
           {"plan --model 7b --gpus 8", "--seq"},
           {"plan --seq 2048 --gpus 8", "--model"},
           {"plan --model 7b --seq 2048 --gpus 8 --tokens 0", "--tokens"},
           {"plan --model 7b --seq 2048 --gpus 8 --device tpu", "unknown device 'tpu'"},
           {"plan --config /nonexistent.yaml --gpus 8", "no such file"},
       }) {
    BOOST_TEST_CONTEXT(args) {
      const Run r = run(args);
      BOOST_TEST(r.status != 0);
      BOOST_TEST(r.err.rfind("tpsim: error: ", 0) == 0u);
      BOOST_TEST(r.err.find(message) != std::string::npos, r.err);
      BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
  }
}
