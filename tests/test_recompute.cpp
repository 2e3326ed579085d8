// Megatron-Core's selective recompute modules (--recompute-modules): what each stops keeping (against
// the hand formula of the tensors its checkpoint discards), what it runs again in the backward, the
// step and memory of a Megatron run with them, and the rules, flags and table column that ask for them.
#define BOOST_TEST_MODULE recompute
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common.hpp"
#include "io/hf_config.hpp"
#include "io/measured_table.hpp"
#include "model/architecture.hpp"
#include "model/ops.hpp"
#include "model/simulator.hpp"
#include "run_tpsim.hpp"

using namespace tpsim;
using tpsim::test::contains;
using tpsim::test::shipped_hf;
using tpsim::testing::run_tpsim;
namespace tt = boost::test_tools;
namespace fs = std::filesystem;

namespace {

// A block of `m`'s layer kind `kind` (its first such layer) for one micro-batch of `seq` tokens.
BlockShape block_of(const ModelConfig& m, int64_t seq, Precision p, bool moe) {
  const LayerPattern pattern = layer_pattern(m);
  for (const LayerGroup& g : pattern.groups)
    if (g.model.moe.active() == moe && g.model.mixer == Mixer::kAttention) {
      BlockShape s = block_shape(g.model, 1, seq, p);
      s.fused_swiglu = true;
      return s;
    }
  BOOST_FAIL("no such layer");
  return {};
}

double saved(const BlockShape& s) {
  OpList ops;
  block_forward_ops(s, ops);
  return total_saved_bytes(ops);
}

int count_named(const OpList& ops, const char* name) {
  int n = 0;
  for (const Op& op : ops) n += std::strcmp(op.name, name) == 0 ? 1 : 0;
  return n;
}

OpList backward(const BlockShape& s) {
  OpList ops;
  block_backward_ops(s, ops);
  return ops;
}

BlockShape with(BlockShape s, std::initializer_list<RecomputeModule> modules) {
  for (RecomputeModule m : modules) s.recompute |= module_bit(m);
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(module_lists_parse_as_megatron_names_them) {
  std::string error;
  const auto m = parse_recompute_modules("moe_act,layernorm", error);
  BOOST_TEST_REQUIRE(m.has_value());
  BOOST_TEST(*m == (module_bit(RecomputeModule::kMoeAct) | module_bit(RecomputeModule::kLayernorm)));
  BOOST_TEST(recompute_modules_text(*m) == "layernorm;moe_act");
  BOOST_TEST(parse_recompute_modules("mla_up_proj; mlp moe", error).has_value());
  BOOST_TEST(!parse_recompute_modules("moe_act,attention", error).has_value());
  BOOST_TEST(contains(error, "'attention' is not one of Megatron-Core's recompute modules"));
  BOOST_TEST(!parse_recompute_modules("moe,moe", error).has_value());
  BOOST_TEST(contains(error, "given twice"));
  BOOST_TEST(!parse_recompute_modules(" , ", error).has_value());
  BOOST_TEST(error == "no module given");
}

BOOST_AUTO_TEST_CASE(each_module_stops_keeping_what_its_checkpoint_discards) {
  // GPT-OSS 120B (hidden 2,880, 128 experts of 2,880, top 4, no shared experts) in bf16, one
  // sequence of 4,096 tokens: t = 4,096, routed rows 4t.
  const ModelConfig oss = shipped_hf("gpt-oss-120b");
  const BlockShape s = block_of(oss, 4096, Precision::kAmpBf16, /*moe=*/true);
  const double t = 4096, h = 2880, a = 2;
  const double base = saved(s);
  // moe_act: fc2's input (the activation's output over the routed rows) is discarded.
  BOOST_TEST(base - saved(with(s, {RecomputeModule::kMoeAct})) == 4 * t * 2880 * a, tt::tolerance(1e-12));
  // layernorm: the pre-MLP norm's output, which the router keeps, is discarded.
  BOOST_TEST(base - saved(with(s, {RecomputeModule::kLayernorm})) == t * h * a, tt::tolerance(1e-12));
  // Both: the sum (they discard different tensors).
  BOOST_TEST(
      base - saved(with(s, {RecomputeModule::kMoeAct, RecomputeModule::kLayernorm})) == 4 * t * 2880 * a + t * h * a,
      tt::tolerance(1e-12));
  // moe: the whole mixture of experts keeps only its input, t x h (the router's input before).
  OpList moe_fwd;
  block_forward_ops(s, moe_fwd);
  double moe_saved = 0;
  for (const Op& op : moe_fwd)
    if (std::strncmp(op.name, "moe.", 4) == 0) moe_saved += op.saved_bytes;
  BOOST_TEST(base - saved(with(s, {RecomputeModule::kMoe})) == moe_saved - t * h * a, tt::tolerance(1e-12));
  // moe with layernorm: not even that input.
  BOOST_TEST(base - saved(with(s, {RecomputeModule::kMoe, RecomputeModule::kLayernorm})) == moe_saved,
             tt::tolerance(1e-12));
  // The attention kernel is the framework's to recompute (core_attn): no block op changes.
  BOOST_TEST(saved(with(s, {RecomputeModule::kCoreAttn})) == base, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(the_backward_runs_each_module_again) {
  const ModelConfig oss = shipped_hf("gpt-oss-120b");
  const BlockShape s = block_of(oss, 4096, Precision::kAmpBf16, /*moe=*/true);
  const OpList base = backward(s);
  BOOST_TEST(count_named(base, "moe.experts.mul.fwd") == 0);
  BOOST_TEST(count_named(base, "norm_2.fwd") == 0);
  // moe_act: the routed experts' activation (the fused SwiGLU kernel) once more.
  const OpList act = backward(with(s, {RecomputeModule::kMoeAct}));
  BOOST_TEST(count_named(act, "moe.experts.mul.fwd") == 1);
  BOOST_TEST(act.size() == base.size() + 1);
  // layernorm: the pre-MLP norm once more, nothing kept.
  const OpList norm = backward(with(s, {RecomputeModule::kLayernorm}));
  BOOST_TEST(count_named(norm, "norm_2.fwd") == 1);
  for (const Op& op : norm) BOOST_TEST(op.saved_bytes == 0.0);
  // moe: the whole forward of the experts (router, permutation, the grouped GEMMs ...) once more.
  const OpList moe = backward(with(s, {RecomputeModule::kMoe}));
  BOOST_TEST(count_named(moe, "moe.router.fwd") == 1);
  BOOST_TEST(count_named(moe, "moe.experts.fc1.fwd") == 1);
  BOOST_TEST(count_named(moe, "moe.unpermute.fwd") == 1);
  // A dense layer's mlp: its norm and feed-forward once more (DeepSeek-V3's first layers).
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  const BlockShape dense = block_of(v3, 4096, Precision::kAmpBf16, /*moe=*/false);
  const OpList mlp = backward(with(dense, {RecomputeModule::kMlp}));
  BOOST_TEST(count_named(mlp, "norm_2.fwd") == 1);
  BOOST_TEST(count_named(mlp, "ffn.fc1.fwd") == 1);
  BOOST_TEST(count_named(mlp, "ffn.down_proj.fwd") == 1);
  // ... which then keeps only the norm's input (t x h) of its feed-forward's half.
  OpList fwd;
  block_forward_ops(with(dense, {RecomputeModule::kMlp}), fwd);
  double ffn_saved = 0;
  for (const Op& op : fwd)
    if (std::strncmp(op.name, "ffn.", 4) == 0 || std::strcmp(op.name, "norm_2.fwd") == 0) ffn_saved += op.saved_bytes;
  BOOST_TEST(ffn_saved == 4096.0 * 7168 * 2, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(latent_attention_up_projections_and_input_norm) {
  // DeepSeek-V3: mla_up_proj discards the attention's q, k (128 heads of 192) and v (128 of 128);
  // layernorm the input norm's output, which the q and kv down projections keep (in bf16 once: the
  // kv projection reads the q projection's kept input).
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  const BlockShape s = block_of(v3, 4096, Precision::kAmpBf16, /*moe=*/true);
  const double t = 4096, a = 2;
  const double base = saved(s);
  BOOST_TEST(base - saved(with(s, {RecomputeModule::kMlaUpProj})) == t * 128 * (192 + 192 + 128) * a,
             tt::tolerance(1e-12));
  OpList norm_fwd;
  block_forward_ops(with(s, {RecomputeModule::kLayernorm}), norm_fwd);
  // the input norm's output and the pre-MLP norm's: the down projections' and the router's t x h
  BOOST_TEST(base - saved(with(s, {RecomputeModule::kLayernorm})) == 2 * t * 7168 * a, tt::tolerance(1e-12));
  const OpList up = backward(with(s, {RecomputeModule::kMlaUpProj}));
  BOOST_TEST(count_named(up, "attn.q_up.fwd") == 1);
  BOOST_TEST(count_named(up, "attn.kv_up.fwd") == 1);
  BOOST_TEST(count_named(up, "attn.rope.fwd") == 1);
}

BOOST_AUTO_TEST_CASE(megatron_runs_trade_memory_for_time) {
  // GPT-OSS 120B on 64 H100s as Megatron-Bridge's H100 recipe runs it (pp 4, ep 8, bf16): the
  // recipe's layernorm and moe_act recompute costs time and saves memory; core_attn (the default
  // selective set) keeps the log-sum-exp only, which is little.
  const ModelConfig oss = shipped_hf("gpt-oss-120b");
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  TrainConfig cfg{.seq_len = 4096, .global_batch = 512, .micro_batch = 4, .n_gpus = 64};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.pipeline = 4;
  cfg.layout.expert = 8;
  cfg.layout.distributed_optimizer = true;
  BOOST_TEST(check_config(oss, device, profile.params, cfg) == "");
  const Prediction none = predict(oss, device, profile.params, cfg);
  cfg.layout.checkpointing = Checkpointing::kSelective;
  cfg.layout.recompute_modules = module_bit(RecomputeModule::kLayernorm) | module_bit(RecomputeModule::kMoeAct);
  BOOST_TEST(check_config(oss, device, profile.params, cfg) == "");
  const Prediction modules = predict(oss, device, profile.params, cfg);
  BOOST_TEST(modules.step_s > none.step_s);
  BOOST_TEST(modules.step_s < 1.1 * none.step_s);  // an activation and a norm per layer again
  BOOST_TEST(modules.memory.activation_bytes < 0.9 * none.memory.activation_bytes);
  cfg.layout.recompute_modules |= module_bit(RecomputeModule::kMoe);
  const Prediction moe = predict(oss, device, profile.params, cfg);
  BOOST_TEST(moe.step_s > modules.step_s);  // the experts and the all-to-alls again
  BOOST_TEST(moe.memory.activation_bytes < modules.memory.activation_bytes);
}

BOOST_AUTO_TEST_CASE(the_rules_refuse_what_megatron_does_not_run) {
  const DeviceSpec device = load_device("h100_80gb");
  const DeviceProfile profile = load_shipped_profile("h100_80gb");
  TrainConfig cfg{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .n_gpus = 8};
  cfg.layout.framework = Framework::kMegatron;
  cfg.layout.checkpointing = Checkpointing::kSelective;
  cfg.layout.recompute_modules = module_bit(RecomputeModule::kMoeAct);
  const ModelConfig dense = shipped_hf("llama-3.1-8b");
  BOOST_TEST(contains(check_config(dense, device, profile.params, cfg), "moe_act needs routed experts"));
  cfg.layout.recompute_modules = module_bit(RecomputeModule::kMlaUpProj);
  BOOST_TEST(contains(check_config(dense, device, profile.params, cfg), "mla_up_proj needs multi-head latent"));
  cfg.layout.recompute_modules = module_bit(RecomputeModule::kMlp);
  BOOST_TEST(check_config(dense, device, profile.params, cfg) == "");
  cfg.layout.checkpointing = Checkpointing::kFull;
  BOOST_TEST(contains(check_config(dense, device, profile.params, cfg), "run under selective recompute"));
  cfg.layout.checkpointing = Checkpointing::kSelective;
  cfg.layout.framework = Framework::kTorchtitan;
  BOOST_TEST(contains(check_config(dense, device, profile.params, cfg), "Megatron-Core's option"));
}

BOOST_AUTO_TEST_CASE(the_flag_and_the_column) {
  const std::string base =
      "predict --model gpt-oss-120b --seq 4096 --device h100_80gb --gpus 64 --framework megatron --pp 4 --ep 8 "
      "--micro-batch 4 --global-batch 512";
  const auto ok = run_tpsim(base + " --ckpt selective --recompute-modules layernorm,moe_act --format csv");
  BOOST_TEST(ok.status == 0);
  BOOST_TEST(contains(ok.out, "Recompute Modules"));
  BOOST_TEST(contains(ok.out, "layernorm;moe_act"));
  const auto no_ckpt = run_tpsim(base + " --recompute-modules moe_act");
  BOOST_TEST(no_ckpt.status != 0);
  BOOST_TEST(contains(no_ckpt.err, "--recompute-modules: Megatron-Core's recompute modules are those of selective"));
  const auto bad = run_tpsim(base + " --ckpt selective --recompute-modules moe_acts");
  BOOST_TEST(bad.status != 0);
  BOOST_TEST(contains(bad.err, "'moe_acts' is not one of Megatron-Core's recompute modules"));
  const auto composer = run_tpsim(
      "predict --model 7b --seq 2048 --device h100_80gb --gpus 8 --ckpt selective "
      "--recompute-modules mlp");
  BOOST_TEST(composer.status != 0);
  BOOST_TEST(contains(composer.err, "--recompute-modules: Megatron-Core's option; use --framework megatron"));
}

BOOST_AUTO_TEST_CASE(a_table_names_them_in_its_column) {
  const fs::path file = fs::temp_directory_path() / "tpsim_recompute_modules.csv";
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Pipeline Parallel,"
         "Expert Parallel,Recompute,Recompute Modules,Throughput (T/s)\n"
         "gpt-oss-120b,4096,64,h100_80gb,amp_bf16,4,512,megatron,4,8,selective,layernorm;moe_act,360000\n"
         "gpt-oss-120b,4096,64,h100_80gb,amp_bf16,4,512,megatron,4,8,selective,,360000\n";
  }
  const MeasuredTable t = read_measured_table(file);
  BOOST_TEST_REQUIRE(t.rows.size() == 2u);
  BOOST_TEST(t.rows[0].layout.recompute_modules ==
             (module_bit(RecomputeModule::kLayernorm) | module_bit(RecomputeModule::kMoeAct)));
  BOOST_TEST(t.rows[1].layout.recompute_modules == kDefaultRecomputeModules);
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Recompute,"
         "Recompute Modules,Throughput (T/s)\n"
         "gpt-oss-120b,4096,64,h100_80gb,amp_bf16,4,512,megatron,selective,moe_activation,360000\n";
  }
  const std::string error = test::error_of([&] { read_measured_table(file); });
  BOOST_TEST(contains(error, ":2: column 'Recompute Modules' 'moe_activation'"));
  fs::remove(file);
}

BOOST_AUTO_TEST_CASE(what_a_row_ran_that_is_not_modelled_refuses_it) {
  // A dispatcher tpsim does not cost, CUDA graphs it cannot read and token dropping change what a row ran: each
  // refuses the row by name (never a prediction of a run without it); the alltoall and flex
  // dispatchers, no graphs and no dropping are what tpsim costs, and multi-token prediction and
  // pipeline layouts are modelled.
  const fs::path file = fs::temp_directory_path() / "tpsim_unmodelled.csv";
  {
    std::ofstream f(file);
    f << "Model,SeqLen (T),# GPUs,GPU,Precision,MicroBatchSize,GlobalBatchSize,Framework,Pipeline Parallel,"
         "Expert Parallel,Recompute,MTP Layers,Pipeline Layout,MoE Dispatcher,CUDA Graphs,Token Drop,Throughput (T/s)\n"
         "gpt-oss-120b,4096,64,h100_80gb,amp_bf16,1,1280,megatron,4,8,none,0,,alltoall,,False,372736\n"
         "gpt-oss-120b,4096,64,h100_80gb,amp_bf16,1,1280,megatron,4,8,none,1,,alltoall,,False,372736\n"
         "gpt-oss-120b,4096,64,h100_80gb,amp_bf16,1,1280,megatron,4,8,none,0,Et|(tt|)*17L,alltoall,,False,372736\n"
         "gpt-oss-120b,4096,64,h100_80gb,amp_bf16,1,1280,megatron,4,8,none,0,,flex:ncclep,,False,372736\n"
         "gpt-oss-120b,4096,64,h100_80gb,amp_bf16,1,1280,megatron,4,8,none,0,,alltoall,transformer_engine:all,False,372736\n"
         "gpt-oss-120b,4096,64,h100_80gb,amp_bf16,1,1280,megatron,4,8,none,0,,alltoall,,True,372736\n";
  }
  const MeasuredTable t = read_measured_table(file);
  BOOST_TEST_REQUIRE(t.rows.size() == 6u);
  BOOST_TEST(t.rows[0].unmodelled.empty());
  BOOST_TEST(t.rows[1].unmodelled.empty());
  BOOST_TEST(t.rows[1].layout.mtp_layers == 1);
  BOOST_TEST(t.rows[2].unmodelled.empty());  // a layout is modelled: the rules check it against the row
  BOOST_TEST(t.rows[2].layout.pipeline_layout != 0);
  BOOST_TEST(contains(t.rows[3].unmodelled, "the MoE dispatcher 'flex:ncclep' is not modelled"));
  BOOST_TEST(contains(t.rows[4].unmodelled, "CUDA graphs 'transformer_engine:all': unknown CUDA graph module 'all'"));
  BOOST_TEST(contains(t.rows[5].unmodelled, "token dropping"));
  const auto v = run_tpsim("validate --table " + file.string());
  BOOST_TEST(v.status != 0);
  BOOST_TEST(contains(v.err, ":4: pipeline layout 'Et|(tt|)*17L' has 19 model chunks; pipeline parallel 4"));
  const auto skipped = run_tpsim("validate --skip-refused --table " + file.string());
  BOOST_TEST(skipped.status == 0);
  BOOST_TEST(contains(skipped.err + skipped.out, "CUDA graphs"));
  fs::remove(file);
}
