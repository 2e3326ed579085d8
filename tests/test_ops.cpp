// The ops of a block state the FLOPs and bytes the literature gives.
#define BOOST_TEST_MODULE ops
#include <boost/test/unit_test.hpp>

#include "model/ops.hpp"

using namespace tpsim;
namespace tt = boost::test_tools;

namespace {
constexpr double kExact = 1e-12;

BlockShape shape(Precision p = Precision::kAmpBf16) {
  ModelConfig m{.name = "x", .d_model = 2048, .n_heads = 16, .n_layers = 24, .vocab_size = 50368, .moe = {}};
  return block_shape(m, 4, 2048, p);
}

double gemm_flops(const OpList& ops) {
  double f = 0;
  for (const Op& op : ops)
    if (op.kind == OpKind::kGemm) f += op.flops;
  return f;
}
double attention_flops(const OpList& ops) {
  double f = 0;
  for (const Op& op : ops)
    if (op.kind != OpKind::kGemm) f += op.flops;
  return f;
}
}  // namespace

BOOST_AUTO_TEST_CASE(block_gemm_flops_are_24_t_d_squared_forward_and_twice_that_backward) {
  const BlockShape s = shape();
  const double t = static_cast<double>(s.tokens()), d = static_cast<double>(s.d_model);
  OpList fwd, bwd;
  block_forward_ops(s, fwd);
  block_backward_ops(s, bwd);
  BOOST_TEST(gemm_flops(fwd) == 24.0 * t * d * d, tt::tolerance(kExact));
  BOOST_TEST(gemm_flops(bwd) == 48.0 * t * d * d, tt::tolerance(kExact));
}

BOOST_AUTO_TEST_CASE(causal_attention_executes_half_the_counted_flops_and_backward_is_2_5x) {
  const BlockShape s = shape();
  const double t = static_cast<double>(s.tokens()), d = static_cast<double>(s.d_model), S = static_cast<double>(s.seq);
  OpList fwd, bwd;
  block_forward_ops(s, fwd);
  block_backward_ops(s, bwd);
  // llm-foundry counts 4*t*S*d per layer forward (as if not causal); the causal kernel does half.
  BOOST_TEST(attention_flops(fwd) == 0.5 * 4.0 * t * S * d, tt::tolerance(kExact));
  BOOST_TEST(attention_flops(bwd) == 2.5 * attention_flops(fwd), tt::tolerance(kExact));
}

BOOST_AUTO_TEST_CASE(saved_activations_are_korthikanti_without_dropout_and_scores) {
  // Korthikanti et al. 2022: s*b*h*(34 + 5*a*s/h) bytes per layer in 16-bit. FlashAttention drops
  // the 5*a*s/h score term; zero dropout drops the two 1-byte masks: 32*s*b*h, plus the fp32
  // log-sum-exp rows of the attention (b*a*s*4) and the norms' fp32 mean and rstd (2 * t * 8).
  const BlockShape s = shape();
  const double t = static_cast<double>(s.tokens()), d = static_cast<double>(s.d_model);
  OpList fwd;
  block_forward_ops(s, fwd);
  const double lse = static_cast<double>(s.batch * s.n_heads * s.seq) * 4.0;
  BOOST_TEST(total_saved_bytes(fwd) == 32.0 * t * d + lse + 2.0 * t * 8.0, tt::tolerance(kExact));
}

BOOST_AUTO_TEST_CASE(fp8_runs_block_gemms_in_fp8_and_adds_casts) {
  OpList bf16, fp8;
  block_forward_ops(shape(), bf16);
  block_forward_ops(shape(Precision::kAmpFp8), fp8);
  int fp8_gemms = 0, casts = 0;
  for (const Op& op : fp8) {
    if (op.kind == OpKind::kGemm && op.dtype == DType::kFp8) ++fp8_gemms;
    if (std::string(op.name).find("fp8_cast") != std::string::npos) ++casts;
  }
  BOOST_TEST(fp8_gemms == 4);
  BOOST_TEST(casts == 4);
  BOOST_TEST(gemm_flops(fp8) == gemm_flops(bf16), tt::tolerance(kExact));
  for (const Op& op : fp8)
    if (op.kind == OpKind::kAttentionFwd) BOOST_TEST((op.dtype == DType::kBf16));
}

BOOST_AUTO_TEST_CASE(head_includes_the_tied_logits_gemm) {
  const BlockShape s = shape();
  OpList head;
  head_forward_ops(s, head);
  head_backward_ops(s, head);
  const double t = static_cast<double>(s.tokens());
  BOOST_TEST(gemm_flops(head) == 3.0 * 2.0 * t * static_cast<double>(s.d_model) * static_cast<double>(s.vocab),
             tt::tolerance(kExact));
}

BOOST_AUTO_TEST_CASE(adamw_moves_28_bytes_per_parameter_plus_clipping) {
  OpList opt;
  optimizer_ops(1e6, opt);
  double bytes = 0;
  for (const Op& op : opt) bytes += op.bytes_read + op.bytes_written;
  BOOST_TEST(bytes == 1e6 * (28.0 + 4.0 + 8.0), tt::tolerance(kExact));
}
