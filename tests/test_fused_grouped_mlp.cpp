// TransformerEngine's fused grouped MLP of the routed experts (--fused-grouped-mlp; a table's Fused
// Grouped MLP; Megatron-Core's use_transformer_engine_op_fuser): the activation, its routing
// probability and the down projection's input cast in the first GEMM's epilogue, their backward and
// the first linear's output-gradient cast in the down projection's; the same GEMMs. The bytes each
// epilogue saves by hand, and the rule of where the kernels run; and the paged stash inside it.
#define BOOST_TEST_MODULE fused_grouped_mlp
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <string>

#include "common.hpp"
#include "model/architecture.hpp"
#include "model/ops.hpp"
#include "model/simulator.hpp"

using namespace tpsim;
using tpsim::test::contains;
using tpsim::test::shipped_hf;
namespace tt = boost::test_tools;

namespace {

struct Sums {
  double gemm_flops = 0, bytes = 0, saved = 0, kernels = 0;
};
Sums sums(const OpList& ops) {
  Sums s;
  for (const Op& op : ops) {
    if (op.per_step) continue;
    if (op.kind == OpKind::kGemm) s.gemm_flops += op.flops;
    s.bytes += op.bytes_read + op.bytes_written;
    s.saved += op.saved_bytes;
    s.kernels += static_cast<double>(op.kernels);
  }
  return s;
}

// DeepSeek-V3's expert layer as Megatron-Core runs it under MXFP8 (MegatronEvaluator's flags).
BlockShape expert_layer(bool fused) {
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  for (const LayerGroup& g : layer_pattern(v3).groups) {
    if (!g.model.moe.active()) continue;
    BlockShape s = block_shape(g.model, 1, 4096, Precision::kMxfp8);
    s.fused_swiglu = s.fp8_weight_cache = s.moe_probs_in_activation = true;
    s.fused_expert_mlp = fused;
    return s;
  }
  throw std::logic_error("DeepSeek-V3 has expert layers");
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_epilogues_save_the_activation_s_round_trips) {
  const BlockShape plain = expert_layer(false), fused = expert_layer(true);
  OpList pf, pb, ff, fb;
  block_forward_ops(plain, pf);
  block_backward_ops(plain, pb);
  block_forward_ops(fused, ff);
  block_backward_ops(fused, fb);
  // R routed rows of the expert width W (2,048), bf16 (2 bytes).
  const double rw = static_cast<double>(plain.expert_rows()) * 2048.0 * 2.0;
  BOOST_TEST(plain.expert_rows() == 4096 * 8);
  const Sums a = sums(pf), b = sums(ff), c = sums(pb), e = sums(fb);
  BOOST_TEST(b.gemm_flops == a.gemm_flops, tt::tolerance(1e-12));
  BOOST_TEST(e.gemm_flops == c.gemm_flops, tt::tolerance(1e-12));
  BOOST_TEST(b.saved == a.saved, tt::tolerance(1e-12));
  // Forward: SwiGLU no longer reads [gate | up] (2) nor writes its output (1); the down
  // projection's cast no longer reads that output (1).
  BOOST_TEST(a.bytes - b.bytes == 4.0 * rw, tt::tolerance(1e-9));
  // Backward: dSwiGLU reads the kept [gate | up] but not the incoming gradient (1) and writes no
  // bf16 gradients (2); fc1's gradient cast reads nothing (2: [gate | up] wide).
  BOOST_TEST(c.bytes - e.bytes == 5.0 * rw, tt::tolerance(1e-9));
  // Two launches fewer each way (the activation's, the cast's; per expert where launched per expert).
  BOOST_TEST(a.kernels - b.kernels == 2.0, tt::tolerance(1e-12));
  BOOST_TEST(c.kernels - e.kernels == 2.0, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(where_the_fused_kernels_run) {
  const ModelConfig v3 = shipped_hf("deepseek-v3");
  const DeviceSpec gb200 = load_device("gb200");
  const CostParams params = load_shipped_profile("gb200").params;
  TrainConfig c{.seq_len = 4096, .global_batch = 512, .micro_batch = 1, .n_gpus = 256, .precision = Precision::kMxfp8};
  c.layout.framework = Framework::kMegatron;
  c.layout.pipeline = 8, c.layout.virtual_stages = 1, c.layout.expert = 32;
  c.layout.first_stage_layers = 7, c.layout.last_stage_layers = 6;
  TrainConfig fused = c;
  fused.layout.fused_grouped_mlp = true;
  BOOST_TEST_REQUIRE(check_config(v3, gb200, params, c) == "");
  BOOST_TEST_REQUIRE(check_config(v3, gb200, params, fused) == "");
  BOOST_TEST(predict(v3, gb200, params, fused).step_s < predict(v3, gb200, params, c).step_s);
  // Compute capability 10 under MXFP8 or NVFP4, on routed experts (fuse_grouped_mlp_ops, is_supported).
  // (MI355X takes MXFP8, but runs no cuDNN kernels.)
  BOOST_TEST(contains(check_config(v3, load_device("mi355x"), load_shipped_profile("mi355x").params, fused),
                      "--fused-grouped-mlp runs on Blackwell GPUs (compute capability 10); device mi355x is cdna4"));
  TrainConfig bf16 = fused;
  bf16.precision = Precision::kAmpBf16;
  BOOST_TEST(contains(check_config(v3, gb200, params, bf16), "runs under mxfp8 or nvfp4"));
  TrainConfig dense = fused;
  dense.layout.expert = 1, dense.layout.first_stage_layers = 0, dense.layout.last_stage_layers = 0;
  dense.layout.pipeline = 2, dense.n_gpus = 16;
  BOOST_TEST(contains(check_config(shipped_hf("llama-3.1-8b"), gb200, params, dense), "has no routed experts"));
}

// Megatron-Core's paged stash (--moe-paged-stash X; a table's MoE Paged Stash): what the routed
// experts keep copied into the stash's pages after their forward and back before their backward,
// in a buffer X times its size; only inside the fused grouped MLP.
BOOST_AUTO_TEST_CASE(the_paged_stash_copies_what_the_experts_keep) {
  BlockShape plain = expert_layer(true), stashed = plain;
  stashed.paged_stash = 1.2;
  OpList pf, pb, sf, sb;
  block_forward_ops(plain, pf);
  block_backward_ops(plain, pb);
  block_forward_ops(stashed, sf);
  block_backward_ops(stashed, sb);
  double kept = 0;  // the routed experts' kept bytes, without the stash
  for (const Op& op : pf)
    if (op.role == OpRole::kRoutedExpert) kept += op.saved_bytes;
  BOOST_TEST_REQUIRE(kept > 0);
  const auto find = [](const OpList& ops, const std::string& name) {
    return std::find_if(ops.begin(), ops.end(), [&](const Op& o) { return o.name == name; });
  };
  const auto copy = find(sf, "moe.paged_stash.fwd"), back = find(sb, "moe.paged_stash.bwd");
  BOOST_TEST_REQUIRE((copy != sf.end() && back != sb.end()));
  BOOST_TEST(copy->bytes_read == kept, tt::tolerance(1e-12));
  BOOST_TEST(copy->bytes_written == kept, tt::tolerance(1e-12));
  BOOST_TEST(back->bytes_read + back->bytes_written == 2.0 * kept, tt::tolerance(1e-12));
  // The buffer keeps 1.2 times what the experts keep.
  BOOST_TEST(sums(sf).saved - sums(pf).saved == 0.2 * kept, tt::tolerance(1e-9));
  BOOST_TEST(sums(sf).kernels - sums(pf).kernels == 1.0);
  BOOST_TEST(sums(sb).kernels - sums(pb).kernels == 1.0);

  const ModelConfig v3 = shipped_hf("deepseek-v3");
  const DeviceSpec gb200 = load_device("gb200");
  const CostParams params = load_shipped_profile("gb200").params;
  TrainConfig c{.seq_len = 4096, .global_batch = 512, .micro_batch = 1, .n_gpus = 256, .precision = Precision::kMxfp8};
  c.layout.framework = Framework::kMegatron;
  c.layout.pipeline = 8, c.layout.expert = 32, c.layout.first_stage_layers = 7, c.layout.last_stage_layers = 6;
  c.layout.moe_paged_stash = 1.2;
  BOOST_TEST(contains(check_config(v3, gb200, params, c), "it needs --fused-grouped-mlp"));
  c.layout.fused_grouped_mlp = true;
  BOOST_TEST_REQUIRE(check_config(v3, gb200, params, c) == "");
  c.layout.moe_paged_stash = 0.9;
  BOOST_TEST(contains(check_config(v3, gb200, params, c), "is outside [1, 4]"));
}
