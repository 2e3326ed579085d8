// What a new user meets first (issue 16): Composer's own auto-microbatching, contradictory flags,
// ids typed in any case with the nearest known ones suggested, and a device that cannot run given
// its reason in the summary.
#define BOOST_TEST_MODULE first_use
#include <boost/test/unit_test.hpp>

#include <string>

#include "io/names.hpp"
#include "tests/run_tpsim.hpp"

namespace {
using namespace tpsim::testing;

const std::string kMpt7b =
    std::string(TPSIM_TEST_DATA) + "/llm-foundry/pretrain/mpt-7b.yaml";  // a copy of llm-foundry's

Run expect_one_line_error(const std::string& args, const std::string& message) {
  const Run r = run(args);
  BOOST_TEST(r.status != 0);
  BOOST_TEST(count_lines(r.err) == 1, "stderr: " << r.err);
  BOOST_TEST(r.err.rfind("tpsim: error: ", 0) == 0u, "stderr: " << r.err);
  BOOST_TEST(r.err.find(message) != std::string::npos, "stderr: " << r.err);
  return r;
}

// The value of a CSV column in a one-row predict output.
std::string csv_value(const std::string& csv, const std::string& column) {
  const size_t nl = csv.find('\n');
  const std::string header = csv.substr(0, nl), row = csv.substr(nl + 1);
  size_t index = 0, pos = 0;
  for (;;) {
    const size_t comma = header.find(',', pos);
    if (header.substr(pos, comma - pos) == column) break;
    if (comma == std::string::npos) return {};
    pos = comma + 1;
    ++index;
  }
  pos = 0;
  for (size_t i = 0; i < index; ++i) pos = row.find(',', pos) + 1;
  return row.substr(pos, row.find_first_of(",\n", pos) - pos);
}
}  // namespace

// Composer starts auto-microbatching at the per-device batch (1024 / 8 = 128 for mpt-7b.yaml on 8
// GPUs) and halves it on each out-of-memory: it runs the first of 128, 64, 32, ... that fits, not
// the largest micro-batch that would fit (62 here before this was modelled).
BOOST_AUTO_TEST_CASE(auto_micro_batch_is_composers_halving) {
  const std::string common = "predict --config " + kMpt7b + " --gpus 8 --device h100_80gb --format csv";
  const Run r = run(common + " --micro-batch auto");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  const std::string mb = csv_value(r.out, "MicroBatchSize");
  BOOST_TEST_REQUIRE(!mb.empty());
  const int m = std::stoi(mb);
  const bool halved = m == 128 || m == 64 || m == 32 || m == 16 || m == 8 || m == 4 || m == 2 || m == 1;
  BOOST_TEST(halved, "micro-batch " << m);
  BOOST_TEST(r.err.find("Composer's halving on out-of-memory stops") != std::string::npos, r.err);
  // The micro-batch before it in the halving does not fit; the largest that fits is named too.
  const Run twice = run(common + " --micro-batch " + std::to_string(2 * m));
  const bool twice_does_not_fit = twice.status != 0 || twice.out.find(",False,") != std::string::npos;
  BOOST_TEST(twice_does_not_fit, twice.out + twice.err);
  BOOST_TEST(r.err.find(", which Composer does not try") != std::string::npos, r.err);
}

// Flags that contradict each other are an error, whichever order they come in.
BOOST_AUTO_TEST_CASE(contradictory_flags_are_errors) {
  const std::string p = "predict --model 7b --seq 2048 --gpus 8 --micro-batch 4 ";
  expect_one_line_error(p + "--ckpt --no-ckpt", "contradicts the --ckpt full");
  expect_one_line_error(p + "--no-ckpt --ckpt", "contradicts");
  expect_one_line_error(p + "--ckpt full --ckpt none", "--ckpt: contradicts the --ckpt full given before it");
  BOOST_TEST(run(p + "--ckpt full --ckpt full").status == 0);  // the same thing twice says nothing new
  expect_one_line_error(p + "--sp --no-sp", "excludes");
  expect_one_line_error("plan --model 7b --seq 2048 --gpus 8 --ckpt selective --no-ckpt", "contradicts");
}

// Ids are matched ignoring case, as llm-foundry's tables write them in capitals at times.
BOOST_AUTO_TEST_CASE(ids_ignore_case) {
  const Run lower = run(
      "predict --model 7b --seq 2048 --gpus 8 --device h100_80gb --micro-batch 4 --sharding full_shard --format csv");
  const Run upper = run(
      "predict --model 7B --seq 2048 --gpus 8 --device H100_80GB --micro-batch 4 --sharding FULL_SHARD --format csv");
  BOOST_TEST_REQUIRE(lower.status == 0, lower.err);
  BOOST_TEST_REQUIRE(upper.status == 0, upper.err);
  BOOST_TEST(lower.out == upper.out);
  BOOST_TEST(run("sweep --models 125M..350M --seq 512 --device A100_80GB --precision AMP_BF16 --format csv").status ==
             0);
  BOOST_TEST(run("predict --model 7b --seq 2048 --gpus 8 --micro-batch 4 --framework Megatron --format csv").status ==
             0);
}

// An unknown id names the nearest known ones before the whole list.
BOOST_AUTO_TEST_CASE(unknown_ids_suggest_the_nearest) {
  expect_one_line_error("predict --model 7b --seq 2048 --gpus 8 --micro-batch 4 --device h100",
                        "unknown device 'h100' (did you mean h100_80gb");
  expect_one_line_error("predict --model 7b --seq 2048 --gpus 8 --micro-batch 4 --device a100",
                        "(did you mean a100_40gb or a100_80gb?)");
  expect_one_line_error("predict --model 7bb --seq 2048 --gpus 8 --micro-batch 4", "(did you mean 7b");
  expect_one_line_error("predict --model llama-3.1-8 --seq 2048 --gpus 8 --micro-batch 4", "did you mean llama-3.1-8b");
}

BOOST_AUTO_TEST_CASE(nearest_names_rank_containment_then_distance) {
  const std::vector<std::string> known = {"a100_40gb", "a100_80gb", "h100_80gb", "h200_141gb", "v100_32gb"};
  BOOST_TEST(tpsim::nearest_names("H100", known) == (std::vector<std::string>{"h100_80gb"}));
  BOOST_TEST(tpsim::nearest_names("h100_80g", known) == (std::vector<std::string>{"h100_80gb"}));
  BOOST_TEST(tpsim::nearest_names("h100_80gc", known).front() == "h100_80gb");
  BOOST_TEST(tpsim::nearest_names("tpu_v5", known).empty());
  BOOST_TEST(tpsim::did_you_mean_phrase("zzz", known).empty());
}

// A device comparison names why a device has nothing, in the summary tables themselves (V100 has
// no bf16 matmuls for amp_bf16), not only under --explain.
BOOST_AUTO_TEST_CASE(nothing_fits_says_why_in_the_summary) {
  const Run r = run("plan --model 7b --seq 2048 --gpus 8 --device v100_32gb,h100_80gb --format csv");
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  BOOST_TEST(r.out.find("best per device,,v100_32gb,\"nothing fits: precision amp_bf16 needs bf16 matmuls, which "
                        "v100_32gb does not have\"") != std::string::npos,
             r.out);
  BOOST_TEST(r.out.find("rejected") == std::string::npos);  // without --explain
  // All out of memory: the least a micro-batch of 1 needs, in the same cell.
  const Run oom = run("plan --model 70b --seq 65536 --gpus 8 --device a100_40gb,h100_80gb --format csv");
  BOOST_TEST_REQUIRE(oom.status == 0, oom.err);
  BOOST_TEST(oom.out.find("nothing fits: out of memory, the least a micro-batch of 1 needs is ") != std::string::npos,
             oom.out);
}
