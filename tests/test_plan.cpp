// tpsim plan and predict --config, run as a user runs them.
#define BOOST_TEST_MODULE plan
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/plan.hpp"
#include "model/units.hpp"
#include "tests/run_tpsim.hpp"

namespace fs = std::filesystem;

namespace {
using namespace tpsim::testing;
const std::string kData = TPSIM_DATA;

// The JSON of a run that must succeed.
nlohmann::json json_of(const std::string& args) {
  const Run r = run(args);
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  return nlohmann::json::parse(r.out);
}
}  // namespace

BOOST_AUTO_TEST_CASE(plan_ranks_configurations_that_fit_by_time) {
  const auto j = json_of(
      "plan --model 30b --seq 8192 --device h100_80gb --gpus 32,64,128 --tokens 1T "
      "--global-batch-tokens 4Mi --price-per-gpu-hour 2.50 --top 5 --format json")["plan"];
  BOOST_TEST_REQUIRE(j.size() == 5u);
  // Rank 1 is the fastest or, by the robust rule, one whose interval overlaps the fastest's.
  double fastest_high = 1e300;
  for (const auto& row : j) fastest_high = std::min(fastest_high, row["Time High (days)"].get<double>());
  BOOST_TEST(j[0]["Time Low (days)"].get<double>() <= fastest_high);
  for (const auto& row : j) {
    const double days = row["Time to Train (days)"].get<double>();
    BOOST_TEST(row["Time Low (days)"].get<double>() <= days);
    BOOST_TEST(row["Time High (days)"].get<double>() >= days);
    BOOST_TEST(row["Cost ($)"].get<double>() == row["GPU-hours"].get<double>() * 2.5,
               boost::test_tools::tolerance(1e-3));
    BOOST_TEST(row["Headroom (GiB)"].get<double>() >= 0.0);
    // 4Mi tokens at 8192 is 512 sequences, a multiple of every GPU count asked.
    BOOST_TEST(row["GlobalBatchSize (T)"].get<int64_t>() == 4194304);
  }
}

BOOST_AUTO_TEST_CASE(plan_keeps_the_global_batch_and_says_why_a_gpu_count_cannot_run_it) {
  const auto j = json_of(
      "plan --model 1b --seq 2048 --device a100_80gb,h100_80gb --gpus 8,1024 --global-batch-tokens 1M "
      "--objective cost --price-per-gpu-hour 2 --top 3 --explain --format json");
  BOOST_TEST(j.contains("plan"));
  BOOST_TEST(j["best per device"].size() == 2u);
  BOOST_TEST(j["best per GPU count"].size() == 4u);  // 2 GPU counts x 2 devices
  // 1e6 tokens is 488.3 sequences of 2048: the plan runs 488 (whole sequences) at every GPU count.
  // llm-foundry splits the batch over every GPU: 488 is 61 per GPU on 8, and no whole number on
  // 1024, which is rejected with that reason, not run with another batch.
  BOOST_TEST_REQUIRE(j["plan"].size() > 0u);
  for (const auto& row : j["plan"]) {
    BOOST_TEST(row["GlobalBatchSize"].get<int64_t>() == 488);
    BOOST_TEST(row["# GPUs"].get<int64_t>() == 8);
  }
  bool refused = false;
  for (const auto& row : j["rejected"])
    if (row["# GPUs"].get<int64_t>() == 1024)
      refused = row["Reason"].get<std::string>().find("global batch 488 is not a multiple of the GPU count 1024") !=
                std::string::npos;
  BOOST_TEST(refused);
}

BOOST_AUTO_TEST_CASE(plan_with_a_micro_batch_plans_only_that_micro_batch) {
  const auto j = json_of(
      "plan --model 7b --seq 2048 --device h100_80gb --gpus 8,64 --global-batch-tokens 4Mi "
      "--micro-batch 3 --top 50 --explain --format json");
  BOOST_TEST_REQUIRE(j["plan"].size() > 0u);
  for (const auto& row : j["plan"]) BOOST_TEST(row["MicroBatchSize"].get<int64_t>() == 3);
  // Without it, plan scans every micro-batch that fits.
  const Run all =
      run("plan --model 7b --seq 2048 --device h100_80gb --gpus 8,64 --global-batch-tokens 4Mi "
          "--top 50 --format json");
  BOOST_TEST_REQUIRE(all.status == 0, all.err);
  bool other = false;
  const auto all_rows = nlohmann::json::parse(all.out)["plan"];
  for (const auto& row : all_rows) other = other || row["MicroBatchSize"].get<int64_t>() != 3;
  BOOST_TEST(other);
  // A micro-batch above the per-GPU batch is lowered to it, as llm-foundry does, with a note; under
  // megatron (Megatron-LM refuses it) it is a rejection with its reason, not a silent scan.
  const Run lowered =
      run("plan --model 7b --seq 2048 --device h100_80gb --gpus 64 --global-batch-tokens 1Mi "
          "--micro-batch 64 --format json");
  BOOST_TEST_REQUIRE(lowered.status == 0, lowered.err);
  const auto b = nlohmann::json::parse(lowered.out);
  BOOST_TEST_REQUIRE(b["plan"].size() > 0u);
  for (const auto& row : b["plan"]) BOOST_TEST(row["MicroBatchSize"].get<int64_t>() == 8);
  BOOST_TEST(lowered.err.find("micro-batch 64 is more than the per-device batch at some GPU counts: lowered to it (8 "
                              "on 64 GPUs)") != std::string::npos,
             lowered.err);
  const auto m = json_of(
      "plan --model 7b --seq 2048 --device h100_80gb --gpus 64 --global-batch-tokens 1Mi --framework megatron --tp 1 --pp 1 "
      "--micro-batch 64 --explain --format json");
  BOOST_TEST(m["plan"].empty());
  BOOST_TEST_REQUIRE(m["rejected"].size() > 0u);
  BOOST_TEST(
      m["rejected"][0]["Reason"].get<std::string>().find("--micro-batch 64 is more than the") != std::string::npos,
      m["rejected"][0].dump());
}

BOOST_AUTO_TEST_CASE(predict_and_plan_read_llm_foundry_yamls_and_flags_win) {
  const Run r = run("predict --config " + kData + "/examples/mpt-7b-pretrain.yaml --gpus 64 --format json");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j[0]["SeqLen (T)"].get<int64_t>() == 2048);
  BOOST_TEST(j[0]["GlobalBatchSize"].get<int64_t>() == 1024);
  BOOST_TEST(r.err.find("not modelled, ignored: variables, run_name") != std::string::npos);
  BOOST_TEST(r.err.find("micro-batch auto:") != std::string::npos);
  const auto k = json_of("predict --config " + kData +
                         "/examples/mpt-7b-pretrain.yaml --gpus 64 --seq 4096 --micro-batch 2 --format json");
  BOOST_TEST(k[0]["SeqLen (T)"].get<int64_t>() == 4096);
  BOOST_TEST(k[0]["MicroBatchSize"].get<int64_t>() == 2);
  const Run p = run("plan --config " + kData +
                    "/examples/mpt-30b-fp8.yaml --device h100_80gb --gpus 64,128 --tokens 500B --top 2 --format json");
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
  const auto dj = json_of(plan);
  BOOST_TEST(kinds(dj) == (std::vector<std::string>{"full", "none"}));
  BOOST_TEST(choices(dj).find("selective") == std::string::npos);
  const auto aj = json_of(plan + "--ckpt any");
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

// Issue 16 item 9: the best configuration of each GPU count (and device) as its own table, ordered
// by GPU count, with time and cost; in json a second array, in csv rows of one table whose first
// column says which table.
BOOST_AUTO_TEST_CASE(plan_lists_the_best_configuration_of_each_gpu_count) {
  const std::string args =
      "plan --model 70b --seq 4096 --device h100_80gb,a100_80gb --gpus 64..512 --tokens 1T "
      "--price-per-gpu-hour 2 ";
  const auto j = json_of(args + "--format json");
  BOOST_TEST_REQUIRE(j.contains("best per GPU count"));
  const auto& best = j["best per GPU count"];
  BOOST_TEST_REQUIRE(best.size() == 8u);  // 64, 128, 256, 512 x two devices
  const std::vector<int64_t> counts = {64, 64, 128, 128, 256, 256, 512, 512};
  for (size_t i = 0; i < best.size(); ++i) {
    BOOST_TEST_CONTEXT("row " << i) {
      BOOST_TEST(best[i]["# GPUs"].get<int64_t>() == counts[i]);
      BOOST_TEST(best[i]["GPU"].get<std::string>() == (i % 2 == 0 ? "h100_80gb" : "a100_80gb"));
      if (best[i]["Throughput (T/s)"].is_null()) continue;  // nothing fits: the Chosen by column says so
      BOOST_TEST(best[i]["Cost ($)"].get<double>() == best[i]["GPU-hours"].get<double>() * 2.0,
                 boost::test_tools::tolerance(1e-3));
      BOOST_TEST(best[i]["Time to Train (days)"].get<double>() > 0.0);
    }
  }
  // The ranked table alone would show only the largest GPU counts: 512 and 256 on the H100.
  bool has_128 = false;
  for (const auto& row : best) has_128 = has_128 || (row["# GPUs"] == 128 && !row["Throughput (T/s)"].is_null());
  BOOST_TEST(has_128);
  // csv: one header whose first column is Table; the per-GPU-count rows carry that title.
  const Run c = run(args + "--format csv");
  BOOST_TEST_REQUIRE(c.status == 0, c.err);
  BOOST_TEST(c.out.rfind("Table,Rank,GPU,# GPUs,", 0) == 0u, c.out.substr(0, 80));
  BOOST_TEST(c.out.find("\n\n") == std::string::npos);  // no second header
  BOOST_TEST(std::count(c.out.begin(), c.out.end(), '\n') ==
             1 + 5 + 8 + 2);  // header, top 5, per GPU count, per device
  BOOST_TEST(c.out.find("\nbest per GPU count,,h100_80gb,128,") != std::string::npos);
}

// Issue 16 item 10: --min-headroom drops configurations at the memory edge (default 5% of the
// device's memory: 4 GiB of an 80 GiB H100), --explain counts them; among configurations whose
// intervals overlap, the robust one is ranked first and the output says which rule chose it.
BOOST_AUTO_TEST_CASE(plan_ranks_robustly_within_the_interval_and_keeps_headroom) {
  const std::string args = "plan --model 70b --seq 4096 --device h100_80gb --gpus 128 --top 1000 --format json ";
  const Run d = run(args + "--explain");
  BOOST_TEST_REQUIRE(d.status == 0, d.err);
  const auto dj = nlohmann::json::parse(d.out);
  for (const auto& row : dj["plan"]) BOOST_TEST(row["Headroom (GiB)"].get<double>() >= 4.0);
  bool counted = false;
  for (const auto& row : dj["rejected"])
    counted = counted || row["Reason"].get<std::string>().find("headroom under 4.0 GiB") != std::string::npos;
  BOOST_TEST(counted);
  // Without a margin the fastest (micro-batch 8) sits at 3.6 GiB; micro-batch 5 is 3.6% slower.
  const auto zj = json_of(args + "--min-headroom 0")["plan"];
  BOOST_TEST_REQUIRE(zj.size() > dj["plan"].size());
  BOOST_TEST(zj[0]["MicroBatchSize"].get<int64_t>() == 8);
  BOOST_TEST(zj[0]["Headroom (GiB)"].get<double>() < 4.0);
  // A 2 GiB margin keeps micro-batch 8 but it is under twice the margin: a configuration with room
  // and within the interval goes first, and stderr says why.
  const Run h = run(args + "--min-headroom 2");
  BOOST_TEST_REQUIRE(h.status == 0, h.err);
  const auto hj = nlohmann::json::parse(h.out)["plan"];
  BOOST_TEST(hj[0]["Headroom (GiB)"].get<double>() >= 4.0);
  BOOST_TEST(hj[0]["Throughput (T/s)"].get<double>() < zj[0]["Throughput (T/s)"].get<double>());
  BOOST_TEST(hj[0]["Throughput High (T/s)"].get<double>() >= zj[0]["Throughput Low (T/s)"].get<double>());
  BOOST_TEST(
      h.err.find("rank 1: the fastest (128 x h100_80gb, micro-batch 8, FULL_SHARD, checkpointing) is faster by") !=
          std::string::npos,
      h.err);
  // Default margin: micro-batch 5 is the fastest left, micro-batch 4 (0.6% slower) is a power of two.
  BOOST_TEST(dj["plan"][0]["MicroBatchSize"].get<int64_t>() == 4);
  BOOST_TEST(d.err.find("within the interval: chose micro-batch 4, a power of two") != std::string::npos, d.err);
  const auto& best = dj["best per GPU count"];
  BOOST_TEST_REQUIRE(best.size() == 1u);
  BOOST_TEST(best[0]["MicroBatchSize"].get<int64_t>() == 4);
  BOOST_TEST(best[0]["Chosen by"].get<std::string>().find("a power of two") != std::string::npos);
  // Bad margins: one line naming the flag.
  const Run bad = run(args + "--min-headroom -1");
  BOOST_TEST(bad.status != 0);
  BOOST_TEST(bad.err.find("--min-headroom '-1'") != std::string::npos, bad.err);
}

namespace {
tpsim::PlannedConfig config(double score, double headroom_gib, int64_t micro_batch, tpsim::Checkpointing ckpt,
                            double p10 = -0.03, double p90 = 0.03) {
  tpsim::PlannedConfig c;
  c.score = score;
  c.score_low = score * (1 + p10);
  c.score_high = score * (1 + p90);
  c.headroom_bytes = headroom_gib * tpsim::kGiB;
  c.margin_bytes = 2 * tpsim::kGiB;
  c.cfg.micro_batch = micro_batch;
  c.cfg.layout.checkpointing = ckpt;
  return c;
}
}  // namespace

// The rule of model/plan.hpp, case by case (scores relative; the interval +-3%).
BOOST_AUTO_TEST_CASE(robust_ranking_rules) {
  using tpsim::Checkpointing;
  using tpsim::PickRule;
  const auto pick = [](std::vector<tpsim::PlannedConfig> v) { return tpsim::rank_robustly(v); };
  // The case: 0.4% faster at the memory edge (under twice the 2 GiB margin).
  auto p = pick({config(1.000, 2.9, 8, Checkpointing::kFull), config(1.004, 4.1, 8, Checkpointing::kFull)});
  BOOST_TEST(p.chosen.headroom_bytes == 4.1 * tpsim::kGiB);
  BOOST_TEST((p.rule == PickRule::kHeadroom));
  // Odd micro-batches for gains under 0.5%.
  p = pick({config(1.000, 20, 17, Checkpointing::kNone), config(1.003, 22, 16, Checkpointing::kNone)});
  BOOST_TEST(p.chosen.cfg.micro_batch == 16);
  BOOST_TEST((p.rule == PickRule::kPowerOfTwoMicroBatch));
  // No checkpointing when a configuration without it is within the interval.
  p = pick({config(1.000, 30, 4, Checkpointing::kFull), config(1.02, 10, 4, Checkpointing::kNone)});
  BOOST_TEST((p.chosen.cfg.layout.checkpointing == Checkpointing::kNone));
  BOOST_TEST((p.rule == PickRule::kLessCheckpointing));
  // Outside the interval (10% apart with +-3%), the fastest stays first.
  p = pick({config(1.10, 30, 4, Checkpointing::kNone), config(1.000, 3, 5, Checkpointing::kFull)});
  BOOST_TEST(p.chosen.score == 1.0);
  BOOST_TEST((p.rule == PickRule::kFastest));
  // Without an interval only equal scores are a group: the ranking is by score.
  p = pick({config(1.001, 30, 4, Checkpointing::kNone, 0, 0), config(1.000, 2.1, 5, Checkpointing::kFull, 0, 0)});
  BOOST_TEST(p.chosen.score == 1.0);
  // Comfortable headroom (twice the margin) is not traded for more: then simplicity, then speed.
  std::vector<tpsim::PlannedConfig> v = {
      config(1.000, 5, 8, Checkpointing::kNone), config(1.01, 40, 1, Checkpointing::kNone),
      config(1.02, 30, 3, Checkpointing::kNone), config(1.2, 60, 1, Checkpointing::kNone)};
  p = tpsim::rank_robustly(v);
  BOOST_TEST(p.chosen.cfg.micro_batch == 8);
  BOOST_TEST(v[1].cfg.micro_batch == 1);
  BOOST_TEST(v[2].cfg.micro_batch == 3);
  BOOST_TEST(v[3].score == 1.2);  // outside the group: after it
}

// Issue 16 item 4: plan --config honours the YAML's sharding, checkpointing and micro-batch as the
// flags would, says so, and --sharding any / --ckpt any search them again; the help says what plan does.
BOOST_AUTO_TEST_CASE(plan_config_honours_the_yaml_and_help_says_what_plan_does) {
  // --min-headroom 0: with the default margin only micro-batch 1 of this YAML is left.
  const std::string args = "plan --config " + kData +
                           "/examples/mpt-30b-fp8.yaml --device h100_80gb --gpus 64,128 "
                           "--top 1000 --min-headroom 0 --format json ";
  const Run r = run(args);
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  const auto j = nlohmann::json::parse(r.out)["plan"];
  BOOST_TEST_REQUIRE(j.size() > 0u);
  bool several_micro_batches = false;
  for (const auto& row : j) {
    BOOST_TEST(row["Sharding Strategy"].get<std::string>() == "HYBRID_SHARD");  // fsdp_config.sharding_strategy
    BOOST_TEST(row["Activation Checkpointing"].get<bool>() == true);            // activation_checkpointing: true
    several_micro_batches = several_micro_batches || row["MicroBatchSize"] != j[0]["MicroBatchSize"];
  }
  BOOST_TEST(several_micro_batches);  // device_train_microbatch_size: auto
  BOOST_TEST(
      r.err.find("plan keeps sharding HYBRID_SHARD, checkpointing full; searches micro-batch") != std::string::npos,
      r.err);
  const Run a = run(args + "--sharding any --ckpt any");
  BOOST_TEST_REQUIRE(a.status == 0, a.err);
  bool other_sharding = false;
  const auto a_rows = nlohmann::json::parse(a.out)["plan"];
  for (const auto& row : a_rows)
    other_sharding = other_sharding || row["Sharding Strategy"].get<std::string>() != "HYBRID_SHARD";
  BOOST_TEST(other_sharding);
  const Run f = run(args + "--sharding FULL_SHARD --micro-batch 2");  // flags win
  BOOST_TEST_REQUIRE(f.status == 0, f.err);
  const auto f_rows = nlohmann::json::parse(f.out)["plan"];
  BOOST_TEST_REQUIRE(f_rows.size() > 0u);
  for (const auto& row : f_rows) {
    BOOST_TEST(row["Sharding Strategy"].get<std::string>() == "FULL_SHARD");
    BOOST_TEST(row["MicroBatchSize"].get<int64_t>() == 2);
  }
  const Run h = run("plan --help");
  BOOST_TEST_REQUIRE(h.status == 0);
  BOOST_TEST(h.out.find("(default FULL_SHARD)") == std::string::npos);
  BOOST_TEST(h.out.find("search only this sharding strategy") != std::string::npos);
  BOOST_TEST(h.out.find("--min-headroom") != std::string::npos);
  BOOST_TEST(h.out.find("Ranking:") != std::string::npos);
  const Run s = run("sweep --help");
  BOOST_TEST_REQUIRE(s.status == 0);
  BOOST_TEST(s.out.find("Not given: none and full") != std::string::npos);
}

// Where plan chooses the sharding it also searches HSDP meshes over 2, 4, ... nodes, names their
// degrees, and predicts each as predict does with those degrees; a fixed sharding keeps Composer's
// own groups.
BOOST_AUTO_TEST_CASE(plan_searches_hsdp_meshes_and_predict_agrees) {
  const auto rows =
      json_of("plan --model 70b --seq 4096 --device h100_80gb --gpus 1024 --top 1000 --format json")["plan"];
  const nlohmann::json* mesh = nullptr;
  for (const auto& row : rows)
    if (!mesh && row["Sharding Strategy"].get<std::string>().rfind("HYBRID_SHARD (shard ", 0) == 0) mesh = &row;
  BOOST_TEST_REQUIRE(mesh != nullptr);
  // "HYBRID_SHARD (shard S x replicate R)": S is a multiple of the node's 8 GPUs, S x R the GPUs.
  const std::string text = (*mesh)["Sharding Strategy"];
  const int64_t shard = std::stoll(text.substr(text.find("shard ") + 6));
  const int64_t replicate = std::stoll(text.substr(text.find("replicate ") + 10));
  BOOST_TEST(shard % 8 == 0);
  BOOST_TEST(shard > 8);
  BOOST_TEST(shard * replicate == 1024);
  const Run p =
      run("predict --model 70b --seq 4096 --device h100_80gb --gpus 1024 --global-batch 1024 --sharding HYBRID_SHARD "
          "--shard-degree " +
          std::to_string(shard) + " --replicate-degree " + std::to_string(replicate) + " --micro-batch " +
          std::to_string((*mesh)["MicroBatchSize"].get<int64_t>()) +
          ((*mesh)["Activation Checkpointing"].get<bool>() ? " --ckpt" : " --no-ckpt") + " --format json");
  BOOST_TEST_REQUIRE(p.status == 0, p.err);
  const auto pr = nlohmann::json::parse(p.out)[0];  // one table: its rows
  BOOST_TEST(pr["Throughput (T/s)"].get<int64_t>() == (*mesh)["Throughput (T/s)"].get<int64_t>());
  // --sharding HYBRID_SHARD: Composer's groups (a node), no mesh.
  const auto fixed_rows = json_of(
      "plan --model 70b --seq 4096 --device h100_80gb --gpus 1024 --sharding HYBRID_SHARD --top 1000 --format json")
      ["plan"];
  for (const auto& row : fixed_rows) BOOST_TEST(row["Sharding Strategy"].get<std::string>() == "HYBRID_SHARD");
}

// sweep searches the same meshes: for 70b at 4096 tokens on 1024 H100s its fastest configuration is a
// mesh, named as plan names it, as fast as plan's fastest (plan also ranks by headroom; sweep takes
// the fastest that fits), and predict with its degrees gives the same throughput.
BOOST_AUTO_TEST_CASE(sweep_searches_hsdp_meshes_as_plan_does) {
  const std::string at = " --seq 4096 --device h100_80gb --gpus 1024 --global-batch-tokens 4Mi --format json";
  const auto best = json_of("sweep --models 70b" + at)[0];
  const std::string text = best["Sharding Strategy"];
  BOOST_TEST_REQUIRE(text.rfind("HYBRID_SHARD (shard ", 0) == 0u, text);
  const Run p = run("plan --model 70b --top 1000" + at);
  BOOST_TEST_REQUIRE(p.status == 0, p.err);
  int64_t fastest = 0;
  const auto plan_rows = nlohmann::json::parse(p.out)["plan"];  // kept: a range-for over a temporary's member dangles
  for (const auto& row : plan_rows) fastest = std::max(fastest, row["Throughput (T/s)"].get<int64_t>());
  BOOST_TEST(best["Throughput (T/s)"].get<int64_t>() >= fastest);
  const int64_t shard = std::stoll(text.substr(text.find("shard ") + 6));
  const int64_t replicate = std::stoll(text.substr(text.find("replicate ") + 10));
  const auto pr =
      json_of("predict --model 70b --seq 4096 --device h100_80gb --gpus 1024 --global-batch " +
              std::to_string(best["GlobalBatchSize"].get<int64_t>()) + " --sharding HYBRID_SHARD --shard-degree " +
              std::to_string(shard) + " --replicate-degree " + std::to_string(replicate) + " --micro-batch " +
              std::to_string(best["MicroBatchSize"].get<int64_t>()) +
              (best["Activation Checkpointing"].get<bool>() ? " --ckpt" : " --no-ckpt") + " --format json")[0];
  BOOST_TEST(pr["Sharding Strategy"].get<std::string>() == text);
  BOOST_TEST(pr["Throughput (T/s)"].get<int64_t>() == best["Throughput (T/s)"].get<int64_t>());
  // Without HYBRID_SHARD among --shardings, no mesh.
  const Run flat = run("sweep --models 70b --shardings FULL_SHARD,SHARD_GRAD_OP" + at);
  BOOST_TEST_REQUIRE(flat.status == 0, flat.err);
  BOOST_TEST(nlohmann::json::parse(flat.out)[0]["Sharding Strategy"].get<std::string>().find('(') == std::string::npos);
}

// Frontier scale (issue 39): Llama 3.1 405B at 8,192 tokens under megatron plans at every GPU count
// from 256 to 2,048 H100s, the uneven pipeline splits in the space (126 layers divide by no pipeline
// degree above 2 that divides the GPUs).
BOOST_AUTO_TEST_CASE(a_405b_plan_finds_a_layout_at_every_gpu_count) {
  const auto j = json_of(
      "plan --model llama-3.1-405b --seq 8192 --device h100_80gb --gpus 256..2048 --framework megatron --top 1 "
      "--format json");
  BOOST_TEST_REQUIRE(j["best per GPU count"].size() == 4u);
  for (const auto& row : j["best per GPU count"]) {
    BOOST_TEST(row["Throughput (T/s)"].is_number(), row.dump());
    BOOST_TEST(row["Chosen by"].get<std::string>().find("nothing fits") == std::string::npos);
  }
}

// On 512 B200s the first choice is at least as fast as TP4 PP8 VP4 CP2 with the embedding and loss
// counted, as tpsim predicts both (the layout the issue found by hand).
BOOST_AUTO_TEST_CASE(a_405b_plan_on_b200s_is_at_least_as_fast_as_tp4_pp8_vp4_cp2) {
  const std::string run = "--model llama-3.1-405b --seq 8192 --device b200 --gpus 512 --framework megatron ";
  const auto plan = json_of("plan " + run + "--top 1 --format json");
  const auto by_hand = json_of("predict " + run +
                               "--global-batch 512 --micro-batch 1 --tp 4 --pp 8 --vp 4 --cp 2 --account-for-embedding "
                               "--account-for-loss --format json");
  BOOST_TEST_REQUIRE(plan["plan"].size() == 1u);
  const double hand = by_hand[0]["Throughput (T/s)"].get<double>();
  BOOST_TEST(plan["plan"][0]["Throughput (T/s)"].get<double>() >= hand);
}

// The batch is the user's: NeMo's Llama 3 70B recipe (128 sequences on 256 GPUs) plans with 128,
// and --explain says which layouts cannot split it (data parallel 256: tp, pp and cp all 1).
BOOST_AUTO_TEST_CASE(plan_keeps_a_megatron_global_batch_smaller_than_the_gpu_count) {
  const auto j = json_of(
      "plan --model llama-3.1-70b --seq 8192 --device h100_80gb --gpus 256 --framework megatron --global-batch 128 "
      "--top 20 --explain --format json");
  BOOST_TEST_REQUIRE(j["plan"].size() > 0u);
  for (const auto& row : j["plan"]) BOOST_TEST(row["GlobalBatchSize"].get<int64_t>() == 128);
  bool said = false;
  for (const auto& row : j["rejected"])
    said = said || row["Reason"].get<std::string>() == "global batch 128 is not a multiple of data parallel 256";
  BOOST_TEST(said);
}

// sweep keeps the batch too: a point that cannot split it has no row and a note says why.
BOOST_AUTO_TEST_CASE(sweep_keeps_the_global_batch_and_names_the_points_it_cannot_run) {
  const Run r = run("sweep --models 125m --seq 2048 --gpus 8,64 --global-batch 32 --format csv");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  BOOST_TEST(std::count(r.out.begin(), r.out.end(), '\n') == 2);  // the header and 8 GPUs' row
  BOOST_TEST(r.out.find(",8,h100_80gb,") != std::string::npos);
  BOOST_TEST(r.err.find("no row for 125m at sequence length 2048 on 64 GPUs: global batch 32 is not a multiple of "
                        "the GPU count 64") != std::string::npos,
             r.err);
}

// A price per device: an H100 at $2.50 and a B200 at $4.90 compare by what they cost, and the cost
// objective ranks by dollars per token, not GPU-hours.
BOOST_AUTO_TEST_CASE(plan_prices_each_device_and_ranks_cost_by_dollars) {
  const std::string run =
      "plan --model 7b --seq 4096 --device h100_80gb,b200 --gpus 8 --tokens 1T --objective cost --top 50 ";
  const auto priced = json_of(run + "--price-per-gpu-hour h100_80gb=2.5,b200=4.9 --format json");
  BOOST_TEST_REQUIRE(priced["plan"].size() > 2u);
  double last = 0;
  for (const auto& row : priced["plan"]) {
    const double price = row["GPU"].get<std::string>() == "b200" ? 4.9 : 2.5;
    BOOST_TEST(row["Cost ($)"].get<double>() == row["GPU-hours"].get<double>() * price,
               boost::test_tools::tolerance(1e-3));
  }
  // Without an interval group to reorder (megatron has none), the cost ranking is by dollars.
  const auto megatron = json_of(run + "--framework megatron --price-per-gpu-hour h100_80gb=2.5,b200=4.9 --format json");
  for (const auto& row : megatron["plan"]) {
    const double cost = row["Cost ($)"].get<double>();
    BOOST_TEST(cost >= last * (1 - 1e-6));
    last = cost;
  }
  // One price is every device's.
  const auto one = json_of(run + "--price-per-gpu-hour 3 --format json");
  for (const auto& row : one["plan"])
    BOOST_TEST(row["Cost ($)"].get<double>() == row["GPU-hours"].get<double>() * 3.0,
               boost::test_tools::tolerance(1e-3));
}

// llm-foundry's own YAMLs (tests/data/llm-foundry), on 8 and 64 GPUs: each is predicted, or refused
// for what llm-foundry itself refuses (a global batch the GPUs do not divide, keys outside its
// TrainConfig) or for a feature named as not modelled. A micro-batch larger than the per-device
// batch is lowered, as llm-foundry does, with a note naming both.
BOOST_AUTO_TEST_CASE(llm_foundrys_yamls_are_predicted_or_refused_for_a_named_reason) {
  const std::vector<std::string> named = {"cannot model it yet",  // LoRA, local attention
                                          "an encoder-decoder model", "calculate_batch_size_info refuses it too",
                                          "llm-foundry's train.py refuses keys outside its TrainConfig",
                                          "unknown key 'attn_config' for model_type llama"};
  int predicted = 0;
  for (const char* sub : {"pretrain", "finetune"})
    for (const auto& e : fs::directory_iterator(fs::path(TPSIM_TEST_DATA) / "llm-foundry" / sub))
      for (const char* gpus : {"8", "64"}) {
        const Run r = run("predict --config " + e.path().string() + " --gpus " + gpus + " --format csv");
        BOOST_TEST_CONTEXT(e.path().filename().string() << " on " << gpus << " GPUs: " << r.err) {
          if (r.status == 0) {
            ++predicted;
            continue;
          }
          BOOST_TEST(std::any_of(named.begin(), named.end(),
                                 [&](const std::string& n) { return r.err.find(n) != std::string::npos; }));
        }
      }
  BOOST_TEST(predicted >= 30);
  // mpt-125m on 64 GPUs: 256 sequences are 4 a GPU, its micro-batch 16 runs as 4.
  const Run lowered = run("predict --config " + std::string(TPSIM_TEST_DATA) +
                          "/llm-foundry/pretrain/mpt-125m.yaml --gpus 64 --format csv");
  BOOST_TEST_REQUIRE(lowered.status == 0, lowered.err);
  BOOST_TEST(csv_cell(lowered.out, "MicroBatchSize") == "4");
  BOOST_TEST(lowered.err.find("device_train_microbatch_size 16 in") != std::string::npos, lowered.err);
  BOOST_TEST(lowered.err.find("is more than the per-device batch 4") != std::string::npos, lowered.err);
}
