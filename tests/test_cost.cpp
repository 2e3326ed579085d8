// The cost model's pieces against hand calculations.
#define BOOST_TEST_MODULE cost
#include <boost/test/unit_test.hpp>

#include "io/devices.hpp"
#include "model/cost.hpp"
#include "model/profile.hpp"

using namespace tpsim;
namespace tt = boost::test_tools;

namespace {
constexpr double kExact = 1e-12;

DeviceSpec device() {
  DeviceSpec d;
  d.id = "test";
  d.compute_units = 100;
  d.gpus_per_node = 8;
  d.intra_node_bytes_per_s = 300e9;
  d.inter_node_bytes_per_s = 200e9;
  d.hbm_bytes_per_s = 2e12;
  d.peak_flops_per_s[static_cast<int>(DType::kBf16)] = 300e12;
  return d;
}

CostParams params() {
  CostParams p;
  p.gemm_flops_per_s(DType::kBf16) = 250e12;
  p.gemm_tile_m = 128;
  p.gemm_tile_n = 128;
  p.gemm_k_half = 256;
  p.gemm_tile_intensity_half = 16;
  p.membound_efficiency = 0.8;  // of 2e12 B/s: 1.6e12
  p.intra_node_link_efficiency = 0.8;
  p.inter_node_link_efficiency = 0.5;
  p.intra_node_latency_s = 2e-6;
  p.inter_node_latency_s = 5e-6;
  p.compute_clock_ratio = 1.0;
  return p;
}
}  // namespace

BOOST_AUTO_TEST_CASE(gemm_efficiency_is_wave_quantisation_times_k_ramp) {
  const DeviceSpec d = device();
  const CostParams p = params();
  const CostModel c(d, p);
  // 100 tiles of 128x128 fill one wave exactly: only the K ramp remains.
  BOOST_TEST(c.gemm_efficiency(1280, 1280, 4096) == 4096.0 / (4096.0 + 256.0), tt::tolerance(kExact));
  // 101 tiles of 128x128 need two waves, the second nearly empty (0.505); 202 tiles of 128x64 fill
  // 2.02 waves (0.673) at the smaller tile's rate: intensity 42.7 against 64, at half-rate 16.
  const double small_tile = (128.0 * 64 / 192 / (128.0 * 64 / 192 + 16)) / (64.0 / 80.0);
  BOOST_TEST(c.gemm_efficiency(101 * 128, 128, 4096) == 202.0 / 300.0 * small_tile * 4096.0 / (4096.0 + 256.0),
             tt::tolerance(kExact));
  // Tiles overhanging m waste their padding and add a wave.
  BOOST_TEST(c.gemm_efficiency(12800 + 1, 1280, 4096) < c.gemm_efficiency(12800, 1280, 4096));
}

BOOST_AUTO_TEST_CASE(small_gemms_split_k_to_fill_the_device) {
  const DeviceSpec d = device();
  const CostParams p = params();
  const CostModel c(d, p);
  // 25 tiles of a 640x640 output: without split-K 25% of the device; split 4 ways it fills it.
  const double e = c.gemm_efficiency(640, 640, 8192);
  BOOST_TEST(e > 0.9 * 2048.0 / (2048.0 + 256.0));
}

BOOST_AUTO_TEST_CASE(ring_collectives_inside_a_node) {
  const DeviceSpec d = device();
  const CostParams p = params();
  const CostModel c(d, p);
  const double bytes = 1e9;
  const CommGroup g{8, 1, 1};
  const double ag = 7.0 / 8.0 * bytes / (300e9 * 0.8) + 7 * 2e-6;
  BOOST_TEST(c.collective_seconds(CollectiveKind::kAllGather, bytes, g) == ag, tt::tolerance(kExact));
  BOOST_TEST(c.collective_seconds(CollectiveKind::kReduceScatter, bytes, g) == ag, tt::tolerance(kExact));
  BOOST_TEST(c.collective_seconds(CollectiveKind::kAllReduce, bytes, g) == 2 * ag, tt::tolerance(kExact));
  BOOST_TEST(c.collective_seconds(CollectiveKind::kAllGather, bytes, CommGroup{1, 1, 1}) == 0.0);
}

BOOST_AUTO_TEST_CASE(ring_collectives_across_nodes_are_bound_by_the_node_nics) {
  const DeviceSpec d = device();
  const CostParams p = params();
  const CostModel c(d, p);
  const double bytes = 1e9;
  // 4 nodes x 8 GPUs: each node takes in the 3/4 of the buffer the others hold through its NICs.
  const double nic = 3.0 / 4.0 * bytes / (200e9 * 0.5);
  const double nvlink = 31.0 / 32.0 * bytes / (300e9 * 0.8);
  BOOST_TEST(nic > nvlink);
  BOOST_TEST(c.collective_seconds(CollectiveKind::kAllGather, bytes, CommGroup{32, 4, 1}) == nic + 31 * 5e-6,
             tt::tolerance(kExact));
  // HYBRID_SHARD's cross-node all-reduce: 8 groups per node share the NICs.
  const double per_group = bytes / 8;
  const double hybrid = 2.0 * (3.0 / 4.0 * per_group / (200e9 * 0.5 / 8) + 3 * 5e-6);
  BOOST_TEST(c.collective_seconds(CollectiveKind::kAllReduce, per_group, CommGroup{4, 4, 8}) == hybrid,
             tt::tolerance(kExact));
}

BOOST_AUTO_TEST_CASE(memory_bound_ops_are_bytes_over_bandwidth_plus_launches) {
  const DeviceSpec d = device();
  CostParams p = params();
  p.kernel_overhead_s = 3e-6;
  const CostModel c(d, p);
  OpList ops;
  optimizer_ops(1e9, ops);  // three kernels, 40 bytes per parameter
  BOOST_TEST(c.ops_seconds(ops) == 3 * 3e-6 + 40e9 / 1.6e12, tt::tolerance(kExact));
}

BOOST_AUTO_TEST_CASE(a_grouped_gemm_of_one_group_is_a_gemm_without_split_k) {
  const DeviceSpec d = device();
  const CostParams p = params();
  const CostModel cost(d, p);
  // Large enough that split-K never applies: the same tiles, waves and K ramp.
  BOOST_TEST(cost.grouped_gemm_efficiency(1, 8192, 8192, 4096) == cost.gemm_efficiency(8192, 8192, 4096),
             tt::tolerance(1e-12));
  // Grouped ops are costed by their groups: 8 experts of 512 rows take longer than one GEMM of
  // 4096 rows only through tile padding, here none (512 is a multiple of every tile side).
  const Op dense = gemm_op("g", 4096, 14336, 4096, DType::kBf16, 2.0, 2.0);
  const Op grouped = grouped_gemm_op("g", 8, 4096, 14336, 4096, false, DType::kBf16, 2.0, 2.0);
  BOOST_TEST(grouped.flops == dense.flops);
  BOOST_TEST(grouped.m == 512);
  BOOST_TEST(grouped.batch == 8);
  BOOST_TEST(cost.op_seconds(grouped) >= cost.op_seconds(dense) * (1.0 - 1e-12));
}

// A sustained clock above the short kernel runs' (compute_clock_ratio > 1: the runs measured a
// throttled or not the fastest kernel) may raise a format's rate to its datasheet peak, not past it.
BOOST_AUTO_TEST_CASE(clock_ratio_above_one_stops_at_the_datasheet_peak) {
  const DeviceSpec d = device();  // bf16 peak 300 TFLOP/s, measured rate 250
  CostParams p = params();
  const Op big = gemm_op("g", 12800, 12800, 65536, DType::kBf16, 2.0, 2.0);
  const double flops = 2.0 * 12800 * 12800 * 65536.0;
  p.compute_clock_ratio = 1.1;  // 275 TFLOP/s: below the peak, applied in full
  const double at_1_1 = CostModel(d, p).op_seconds(big);
  p.compute_clock_ratio = 1.0;
  BOOST_TEST(CostModel(d, p).op_seconds(big) / at_1_1 == 1.1, tt::tolerance(1e-4));  // + a fixed overhead
  p.compute_clock_ratio = 1.25;                                                      // 312.5 TFLOP/s: capped at 300
  BOOST_TEST(CostModel(d, p).op_seconds(big) >= flops / 300e12);
  BOOST_TEST(find_param("compute_clock_ratio")->upper > 1.0);
}
