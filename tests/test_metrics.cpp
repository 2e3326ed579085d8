// MFU, HFU and Model TFLOP recomputed from each seed row's measured throughput.
#define BOOST_TEST_MODULE metrics
#include <boost/test/unit_test.hpp>

#include "common.hpp"
#include "model/metrics.hpp"

using namespace tpsim;
namespace tt = boost::test_tools;

namespace {
// The tables print MFU and HFU with two decimals from an unrounded throughput; Throughput (T/s)
// is rounded down to an integer, which moves the recomputed value by under 0.01 points.
constexpr double kPercentPointTol = 0.05;
// Model TFLOP is printed as the mantissa of FLOP/s in %.6E (4.212583 for 4.212583E+14): six
// significant digits, plus the integer rounding of the throughput.
constexpr double kModelTflopRelTol = 1e-3;
}  // namespace

BOOST_AUTO_TEST_CASE(mfu_hfu_and_model_tflop_reproduce_every_seed_row) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  int checked_tflop = 0;
  for (const auto& r : test::all_seed_rows()) {
    BOOST_TEST_CONTEXT(r.where()) {
      const ModelConfig& m = catalog.get(r.model);
      const DeviceSpec d = load_device(r.gpu);
      const double seq_per_s = r.tokens_per_s / static_cast<double>(r.seq_len);
      const FoundryMetrics fm =
          foundry_metrics(parameter_count(m, r.seq_len), m.n_layers, m.d_model, r.seq_len, seq_per_s, r.n_gpus,
                          d.peak(mfu_dtype(r.precision)), r.layout.checkpointing == Checkpointing::kFull);
      BOOST_TEST(std::abs(100 * fm.mfu - r.mfu_percent) <= kPercentPointTol);
      BOOST_TEST(std::abs(100 * fm.hfu - r.hfu_percent) <= kPercentPointTol);
      if (r.model_tflop > 0) {
        const double mantissa = fm.model_flops_per_s_per_gpu / 1e14;
        BOOST_TEST(mantissa == r.model_tflop, tt::tolerance(kModelTflopRelTol));
        ++checked_tflop;
      }
    }
  }
  BOOST_TEST(checked_tflop == 198);  // the A100 40GB rows too, after the header repair
}

BOOST_AUTO_TEST_CASE(hfu_counts_the_recompute_only_with_checkpointing) {
  const FoundryMetrics off = foundry_metrics(1000000000, 24, 2048, 2048, 10.0, 8, 312e12, false);
  const FoundryMetrics on = foundry_metrics(1000000000, 24, 2048, 2048, 10.0, 8, 312e12, true);
  BOOST_TEST(off.hfu == off.mfu);
  BOOST_TEST(on.hfu == on.mfu * 4.0 / 3.0, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(selective_checkpointing_counts_the_attention_term_four_times) {
  // Korthikanti et al. 2022: selective recompute reruns the attention core only.
  const FoundryMetrics none = foundry_metrics(1000000000, 24, 2048, 2048, 10.0, 8, 312e12, Checkpointing::kNone);
  const FoundryMetrics sel = foundry_metrics(1000000000, 24, 2048, 2048, 10.0, 8, 312e12, Checkpointing::kSelective);
  const double flops = foundry_flops_per_seq(1000000000, 2048), attn = foundry_attn_flops_per_seq(24, 2048, 2048);
  BOOST_TEST(sel.mfu == none.mfu);
  BOOST_TEST(sel.hfu == sel.mfu * (3.0 * flops + 4.0 * attn) / (3.0 * flops + 3.0 * attn), tt::tolerance(1e-12));
  const FoundryMetrics full = foundry_metrics(1000000000, 24, 2048, 2048, 10.0, 8, 312e12, Checkpointing::kFull);
  BOOST_TEST(full.hfu == foundry_metrics(1000000000, 24, 2048, 2048, 10.0, 8, 312e12, true).hfu);
}

// Megatron-LM's own count (num_floating_point_operations) against the ratio of the two columns
// Megatron-Bridge's performance summary prints for a row, Model TFLOP/s/GPU over tokens/s/GPU
// (docs/performance-summary-archive.md @ 067f987d): the FLOPs per token by its formula, to 0.5%
// (the ratio of the printed columns of one model and sequence moves by 0.2% from row to row: the
// two columns are rounded, and averaged over the run apart).
BOOST_AUTO_TEST_CASE(megatron_flops_per_token_reproduce_the_published_ratio) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  struct Row {
    const char* model;
    int64_t seq;
    double tflops, tokens;  // per GPU, as printed
    double tolerance;       // relative
  };
  const Row rows[] = {
      {"nemotron-3-nano", 8192, 328, 14719, 5e-3},  // 26.04, DGX-H100, 16 GPUs, FP8 (hybrid_flops)
      {"llama-3-70b", 4096, 1671, 3864, 5e-3},      // DGX-GB200, 32 GPUs, FP8 (transformer_flops)
      {"llama-3-70b", 4096, 2083, 4819, 5e-3},      // DGX-GB300, 32 GPUs, FP8
  };
  for (const Row& r : rows) {
    BOOST_TEST_CONTEXT(r.model << " " << r.tokens) {
      const ModelConfig& m = catalog.get(r.model);
      const int64_t vocab = (m.vocab_size + 127) / 128 * 128;  // --make-vocab-size-divisible-by 128, tp 1
      const double per_token = megatron_flops_per_sequence(m, r.seq, vocab) / static_cast<double>(r.seq);
      BOOST_TEST(per_token == r.tflops * 1e12 / r.tokens, tt::tolerance(r.tolerance));
    }
  }
}
