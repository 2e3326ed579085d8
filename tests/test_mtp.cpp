// Multi-token prediction (--mtp-layers): Megatron-LM's FLOP count of a depth against the hand
// formula, the parameters and time it adds to the last stage, a shared layer's weights once, and
// the rules, flag and column that ask for it.
#define BOOST_TEST_MODULE mtp
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "io/hf_config.hpp"
#include "io/measured_table.hpp"
#include "model/architecture.hpp"
#include "model/metrics.hpp"
#include "model/model_parallel.hpp"
#include "model/simulator.hpp"
#include "run_tpsim.hpp"

using namespace tpsim;
using tpsim::test::contains;
using tpsim::test::shipped_hf;
using tpsim::testing::run_tpsim;
namespace tt = boost::test_tools;
namespace fs = std::filesystem;

namespace {

// DeepSeek-V3's MoE layer with latent attention (tests/test_mla.cpp counts it the same way).
constexpr int64_t kDm = 7168;
int64_t moe_layer_params() {
  const int64_t attn = kDm * 1536 + 1536 + 1536 * 128 * (128 + 64) + kDm * (512 + 64) + 512 + 512 * 128 * (128 + 128) +
                       128 * 128 * kDm + 2 * kDm;
  const int64_t expert = 3 * kDm * 2048;
  return attn + (256 * kDm + 256) + 256 * expert + expert;
}

TrainConfig one_stage(int64_t mtp, bool repeated) {
  TrainConfig cfg{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = 64};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.expert = 64;
  cfg.layout.mtp_layers = mtp;
  cfg.layout.mtp_repeated_layer = repeated;
  return cfg;
}

}  // namespace

BOOST_AUTO_TEST_CASE(megatron_counts_a_depth_as_a_layer_its_projection_and_its_logits) {
  // Per token, one depth of DeepSeek-V3: its MoE layer (8 routed experts of 2,048 and the shared one,
  // SwiGLU: 6 h 2048 x 3 x 9), its latent attention's linears and core (s = 4,096), the projection
  // and the norms, 6 (3 h + 2 h^2), and its logits, 6 h V (V = 129,280, a multiple of 128).
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  const double h = kDm, s = 4096, vocab = 129280;
  const double moe = 6.0 * h * 2048.0 * 3.0 * 9.0;
  const double attn_linear =
      6.0 * (1536.0 * (h + 128 * 192 + 1) + 512.0 * (h + 128 * 256 + 1) + h * 64 + 128 * 128 * h);
  const double attn_core = 6.0 * (128 * 192 / 2.0 + 128 * 128 / 2.0) * s;
  const double per_token = moe + attn_linear + attn_core + 6.0 * (3.0 * h + 2.0 * h * h) + 6.0 * h * vocab;
  const double base = megatron_flops_per_sequence(v3, 4096, 129280);
  BOOST_TEST(megatron_flops_per_sequence(v3, 4096, 129280, 1) - base == s * per_token, tt::tolerance(1e-9));
  BOOST_TEST(megatron_flops_per_sequence(v3, 4096, 129280, 2) - base == 2.0 * s * per_token, tt::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(a_depth_adds_its_layer_and_projection_to_the_last_stage) {
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  const DeviceSpec device = load_device("b200");
  const DeviceProfile profile = load_shipped_profile("b200");
  const TrainConfig none = one_stage(0, false), one = one_stage(1, false);
  BOOST_TEST_REQUIRE(check_config(v3, device, profile.params, one) == "");
  const Prediction p0 = predict(v3, device, profile.params, none), p1 = predict(v3, device, profile.params, one);
  const Prediction p2 = predict(v3, device, profile.params, one_stage(2, false));
  const Prediction r2 = predict(v3, device, profile.params, one_stage(2, true));
  // The rank's parameters: the dense ones whole, the routed experts' 1/64; each depth its layer, eh_proj
  // (2 h x h) and three norms (enorm, hnorm, the depth's final norm).
  const double expert = 3.0 * kDm * 2048;
  const double routed = 256.0 * expert;
  const double depth = static_cast<double>(moe_layer_params()) - routed + routed / 64.0 + 2.0 * kDm * kDm + 3.0 * kDm;
  // Without the distributed optimizer (a Layout's default), 2 bytes of weights, 4 of fp32 gradients
  // and 12 of master weights and moments per parameter.
  const double added = depth * 18.0;
  BOOST_TEST(p1.memory.sharded_state_bytes - p0.memory.sharded_state_bytes == added, tt::tolerance(1e-9));
  BOOST_TEST(p2.memory.sharded_state_bytes - p0.memory.sharded_state_bytes == 2.0 * added, tt::tolerance(1e-9));
  BOOST_TEST(r2.memory.sharded_state_bytes - p0.memory.sharded_state_bytes == added, tt::tolerance(1e-9));
  // Time: each depth one more layer, its embedding lookup, projection and logits.
  BOOST_TEST(p1.step_s > p0.step_s);
  BOOST_TEST(p2.step_s - p0.step_s == 2.0 * (p1.step_s - p0.step_s), tt::tolerance(0.02));
  BOOST_TEST(r2.step_s == p2.step_s, tt::tolerance(0.005));  // the same compute, the optimizer over fewer weights
  BOOST_TEST(p1.memory.activation_bytes > p0.memory.activation_bytes);
  // Under MXFP8 each depth's layer casts its weights once a step into TransformerEngine's cache
  // (without fp8 parameters the copies stay allocated): once per copy of the weights.
  const auto cache = [&](int64_t mtp, bool repeated) {
    TrainConfig cfg = one_stage(mtp, repeated);
    cfg.precision = Precision::kMxfp8;
    return predict(v3, device, profile.params, cfg).memory.gathered_params_bytes;
  };
  const double c0 = cache(0, false), c1 = cache(1, false);
  BOOST_TEST(c1 > c0);
  BOOST_TEST(cache(2, false) - c0 == 2.0 * (c1 - c0), tt::tolerance(1e-9));
  BOOST_TEST(cache(2, true) == c1, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_hybrid_depth_is_its_mtp_pattern) {
  // Nemotron 3 Super's config.json: mtp_hybrid_override_pattern "*E", an attention layer then an
  // expert layer per depth (Megatron-Core's HybridStack inside MultiTokenPredictionLayer).
  const ModelConfig super = shipped_hf("nemotron-3-super");
  BOOST_TEST_REQUIRE(super.mtp_kinds.size() == 2u);
  BOOST_TEST((super.mtp_kinds[0].mixer == Mixer::kAttention && super.mtp_kinds[0].no_ffn));
  BOOST_TEST((super.mtp_kinds[1].mixer == Mixer::kNone && !super.mtp_kinds[1].no_ffn));
  BOOST_TEST(check_architecture(super) == "");
  // Megatron-LM's hybrid count (hybrid_flops): per depth one more attention and expert layer and the
  // logits once more; t = s = 4,096 tokens, h = 4,096, 32 heads of 128, 2 key/value heads, experts of
  // 2,688 at a latent width of 1,024 (top 22), a shared expert of 5,376, squared ReLU (no GLU).
  const double t = 4096, h = 4096, vocab = 131072;
  const double attn = 4.0 * t * h * (h + h * 2.0 / 32.0) + 2.0 * t * t * h;
  const double moe = 4.0 * t * 1024 * 2688 * 22 + 4.0 * t * h * 1024 + 4.0 * t * h * 5376;
  const double base = megatron_flops_per_sequence(super, 4096, 131072);
  BOOST_TEST(
      megatron_flops_per_sequence(super, 4096, 131072, 2) - base == 2.0 * 3.0 * (attn + moe + 2.0 * t * h * vocab),
      tt::tolerance(1e-9));

  const DeviceSpec device = load_device("gb200");
  const DeviceProfile profile = load_shipped_profile("gb200");
  const auto run = [](int64_t mtp, bool repeated) {
    TrainConfig cfg = one_stage(mtp, repeated);
    cfg.precision = Precision::kAmpBf16;
    return cfg;
  };
  BOOST_TEST_REQUIRE(check_config(super, device, profile.params, run(2, true)) == "");
  const Prediction p0 = predict(super, device, profile.params, run(0, false));
  const Prediction p1 = predict(super, device, profile.params, run(1, false));
  const Prediction p2 = predict(super, device, profile.params, run(2, false));
  const Prediction r2 = predict(super, device, profile.params, run(2, true));
  // Per depth on the rank: the attention layer, the expert layer with 1/64 of its routed experts,
  // eh_proj (2 h x h) and three norms; 18 bytes per parameter (weights, fp32 gradients, master
  // weights and moments without the distributed optimizer).
  const double attention = h * 32 * 128 * 2 + h * 2 * 128 * 2 + h;
  const double routed = 512.0 * 2 * 1024 * 2688;
  const double experts = (h * 512 + 512) + routed + 2 * h * 1024 + 2 * h * 5376 + h;
  const double depth = attention + experts - routed + routed / 64.0 + 2.0 * h * h + 3.0 * h;
  BOOST_TEST(p1.memory.sharded_state_bytes - p0.memory.sharded_state_bytes == 18.0 * depth, tt::tolerance(1e-9));
  BOOST_TEST(p2.memory.sharded_state_bytes - p0.memory.sharded_state_bytes == 36.0 * depth, tt::tolerance(1e-9));
  BOOST_TEST(r2.memory.sharded_state_bytes - p0.memory.sharded_state_bytes == 18.0 * depth, tt::tolerance(1e-9));
  // Time: each depth two layers more, its embedding lookup, projection and logits; the depth costs
  // more than one expert layer alone would.
  BOOST_TEST(p1.step_s > p0.step_s);
  BOOST_TEST(p2.step_s - p0.step_s == 2.0 * (p1.step_s - p0.step_s), tt::tolerance(0.02));
  // The same compute; the optimizer over one depth's weights (8 of 512 experts' on the rank) not two.
  BOOST_TEST(r2.step_s < p2.step_s);
  BOOST_TEST(r2.step_s == p2.step_s, tt::tolerance(0.01));
  BOOST_TEST(p1.memory.activation_bytes > p0.memory.activation_bytes);

  // The reader: an MTP layer of a kind the model lacks, a symbol it does not model, or an empty
  // pattern is refused with its key.
  std::ifstream in(fs::path(TPSIM_DATA) / "models" / "hf" / "nemotron-3-super.json");
  nlohmann::json j = nlohmann::json::parse(in);
  for (
      const auto& [pattern, why] : std::vector<std::pair<std::string, std::string>>{
          {"*-",
           "mtp_hybrid_override_pattern: \"*-\" -- a multi-token prediction layer '-' of a kind the model's layers lack"},
          {"*X", "layer symbol 'X'"},
          {"", "must name 1 to 64 layers"}}) {
    j["mtp_hybrid_override_pattern"] = pattern;
    const std::string error = test::error_of([&] { read_hf_config(j.dump(2), "super.json"); });
    BOOST_TEST(contains(error, why), pattern << ": " << error);
  }
}

BOOST_AUTO_TEST_CASE(the_rules_flag_and_column) {
  const DeviceSpec device = load_device("b200");
  const DeviceProfile profile = load_shipped_profile("b200");
  TrainConfig cfg = one_stage(0, true);
  cfg.layout.expert = 1;
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  BOOST_TEST(contains(check_config(v3, device, profile.params, cfg), "--mtp-repeated-layer needs --mtp-layers"));
  cfg.layout.mtp_layers = 2;
  const ModelConfig nano = shipped_hf("nemotron-3-nano");  // a hybrid whose config names no MTP pattern
  BOOST_TEST(contains(check_config(nano, device, profile.params, cfg), "(a hybrid model"));
  cfg.layout.framework = Framework::kTorchtitan;
  BOOST_TEST(contains(check_config(v3, device, profile.params, cfg), "Megatron-Core's option"));
  const auto ok = run_tpsim(
      "predict --model deepseek-v3 --seq 4096 --device b200 --gpus 64 --framework megatron --ep 64 --micro-batch 1 "
      "--global-batch 64 --mtp-layers 1 --format csv");
  BOOST_TEST(ok.status == 0);
  BOOST_TEST(contains(ok.out, "MTP Layers,MTP Repeated Layer"));
  const auto composer = run_tpsim("predict --model 7b --seq 2048 --device h100_80gb --gpus 8 --mtp-layers 1");
  BOOST_TEST(composer.status != 0);
  BOOST_TEST(contains(composer.err, "--mtp-layers: Megatron-Core's option; use --framework megatron"));
  const fs::path file = fs::temp_directory_path() / "tpsim_mtp.csv";
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Expert Parallel,Recompute,"
         "MTP Layers,MTP Repeated Layer,Throughput (T/s)\n"
         "deepseek-v3,4096,64,b200,amp_bf16,1,64,megatron,64,none,2,True,100000\n"
         "deepseek-v3,4096,64,b200,amp_bf16,1,64,megatron,64,none,two,False,100000\n";
  }
  const std::string error = test::error_of([&] { read_measured_table(file); });
  BOOST_TEST(contains(error, ":3: column 'MTP Layers' must be a whole number in 0..64, got 'two'"));
  fs::remove(file);
}

BOOST_AUTO_TEST_CASE(pipeline_layouts_parse_as_megatron_core_unrolls_them) {
  // DeepSeek-V3's recipes: the embedding and 4 layers, 14 chunks of 4, then 1 layer, the MTP depth and
  // the loss (61 layers in 16 chunks).
  std::string error;
  const std::optional<uint16_t> id = parse_pipeline_layout("Et*4|(t*4|)*14tmL", error);
  BOOST_TEST_REQUIRE(id.has_value(), error);
  const PipelineLayout& l = pipeline_layout(*id);
  std::vector<int64_t> expected(16, 4);
  expected.back() = 1;
  BOOST_TEST(l.decoders == expected, tt::per_element());
  BOOST_TEST(l.mtp.back() == 1);
  BOOST_TEST(*parse_pipeline_layout("Et*4|(t*4|)*14tmL", error) == *id);        // registered once
  BOOST_TEST(parse_pipeline_layout("E,t*4|(t*4|)*14,tmL", error).has_value());  // commas are cosmetic
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"Et|x|L", "'x' is not a layer"},
           {"Et|tt", "exactly once"},
           {"E*|tL", "needs a layer before it and a count after it"},
           {"Et|mtL", "must come before the multi-token prediction depths"},
           {"E(t|L", "is not a group"}}) {
    BOOST_TEST(!parse_pipeline_layout(bad, error).has_value(), bad);
    BOOST_TEST(contains(error, why), bad << ": " << error);
  }
}

BOOST_AUTO_TEST_CASE(a_layout_splits_the_layers_over_the_chunks) {
  std::string error;
  const uint16_t deepseek = *parse_pipeline_layout("Et*4|(t*4|)*14tmL", error);
  Layout par;
  par.framework = Framework::kMegatron;
  par.pipeline_layout = deepseek;
  par.mtp_layers = 1;
  std::vector<int64_t> layers;
  for (const auto& [pp, vp] : {std::pair{16, 1}, std::pair{8, 2}, std::pair{2, 8}}) {
    par.pipeline = pp, par.virtual_stages = vp;
    BOOST_TEST(split_layers(61, par, layers) == "");
    BOOST_TEST(layers.size() == 16u);
    BOOST_TEST(layers.back() == 1);
  }
  par.pipeline = 4, par.virtual_stages = 1;
  BOOST_TEST(contains(split_layers(61, par, layers), "has 16 model chunks; pipeline parallel 4 x virtual stages 1"));
  par.pipeline = 16;
  BOOST_TEST(contains(split_layers(60, par, layers), "places 61 decoder layers of the model's 60"));
  par.mtp_layers = 0;
  BOOST_TEST(contains(split_layers(61, par, layers), "places 1 multi-token prediction depths (m); --mtp-layers is 0"));
  par.mtp_layers = 1;
  par.first_stage_layers = 4;
  BOOST_TEST(contains(split_layers(61, par, layers), "give one of them"));

  // A layout of equal chunks predicts what the even split does.
  const ModelConfig llama = shipped_hf("llama-3.1-8b");
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  TrainConfig even{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = 8};
  even.layout.framework = Framework::kMegatron;
  even.layout.pipeline = 4;
  TrainConfig laid = even;
  laid.layout.pipeline_layout = *parse_pipeline_layout("E(t*8|)*3t*8L", error);
  BOOST_TEST_REQUIRE(check_config(llama, device, profile.params, laid) == "");
  BOOST_TEST(predict(llama, device, profile.params, laid).step_s == predict(llama, device, profile.params, even).step_s,
             tt::tolerance(1e-12));
  // The recipe's layout on DeepSeek-V3 through the command line.
  const auto ok = run_tpsim(
      "predict --model deepseek-v3 --seq 4096 --device b200 --gpus 256 --framework megatron --pp 16 --ep 16 "
      "--micro-batch 1 --global-batch 4096 --mtp-layers 1 --pipeline-layout 'Et*4|(t*4|)*14tmL' --format csv");
  BOOST_TEST(ok.status == 0, ok.err);
  const auto titan = run_tpsim(
      "predict --model llama-3.1-8b --seq 4096 --device h100_80gb --gpus 8 --framework torchtitan --pp 4 "
      "--pipeline-layout 'E(t*8|)*3t*8L'");
  BOOST_TEST(titan.status != 0);
  BOOST_TEST(contains(titan.err, "--pipeline-layout: Megatron-Core's option"));
}
