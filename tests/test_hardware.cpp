// Hardware that compares (issue 16, items 6 and 7): profiles transferred from the nearest measured
// sibling, a device that dominates another on every datasheet figure never predicted slower, the
// 2026 devices (NVL72's scale-up domain) and the block-scaled formats mxfp8 and nvfp4.
#define BOOST_TEST_MODULE hardware
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <iostream>

#include "calibrate/profile_transfer.hpp"
#include "common.hpp"
#include "model/cost.hpp"
#include "model/ops.hpp"
#include "model/parallelism.hpp"
#include "model/search.hpp"
#include "model/simulator.hpp"

using namespace tpsim;
using tpsim::test::contains;

namespace {

const std::vector<std::string> kMeasured = {"a100_40gb", "a100_80gb", "h100_80gb"};

std::vector<DeviceSpec> measured_specs() {
  std::vector<DeviceSpec> v;
  for (const auto& id : kMeasured) v.push_back(load_device(id));
  return v;
}

// Every datasheet figure: each peak, HBM capacity and bandwidth, the scale-up link and domain, the
// network per GPU; and each peak per compute unit, since GEMM tiles run in waves over the units (a
// GEMM of 148 tiles takes one wave on B200's 148 SMs and one 92%-full wave on B300's 160 at the same
// bf16 peak: B300 is slower on it, in the model as on the chip).
std::vector<double> figures(const DeviceSpec& d) {
  std::vector<double> f(d.peak_flops_per_s.begin(), d.peak_flops_per_s.end());
  for (double peak : d.peak_flops_per_s) f.push_back(peak / d.compute_units);
  f.push_back(d.memory_bytes);
  f.push_back(d.hbm_bytes_per_s);
  f.push_back(d.intra_node_bytes_per_s);
  f.push_back(d.gpus_per_node);
  f.push_back(d.inter_node_bytes_per_s / d.gpus_per_node);
  return f;
}

bool dominates(const DeviceSpec& a, const DeviceSpec& b) {
  const auto fa = figures(a), fb = figures(b);
  bool strictly = false;
  for (size_t i = 0; i < fa.size(); ++i) {
    if (fa[i] < fb[i]) return false;
    strictly = strictly || fa[i] > fb[i];
  }
  return strictly;
}

// Pairs whose profiles are two independent fits that disagree: a100_80gb and a100_40gb were each
// fitted to their own seed tables (different Composer versions and settings), and the 40GB fit has
// faster attention (0.58 vs 0.31 of the bf16 rate). Not a transfer's doing, and not changed here
// (the A100 fits must not move); reported.
bool known_exception(const std::string& a, const std::string& b) { return a == "a100_80gb" && b == "a100_40gb"; }

// The fastest fitting configuration's tokens per second (0: nothing fits), as `tpsim sweep` finds it.
// The fastest layout's throughput, 0 where none fits; `allocator_bound` (if given): whether that
// layout's step is mostly the caching allocator's retries (a model that barely fits).
double fastest(const ModelConfig& m, const DeviceSpec& d, const DeviceProfile& p, int64_t seq, int64_t gpus,
               Precision precision = Precision::kAmpBf16, bool* allocator_bound = nullptr) {
  TrainConfig cfg;
  cfg.precision = precision;
  cfg.seq_len = seq;
  cfg.n_gpus = gpus;
  cfg.global_batch = std::max<int64_t>(1, std::llround(1048576.0 / seq / gpus)) * gpus;  // sweep's 1Mi tokens
  cfg.micro_batch = 1;
  if (!check_config(m, d, p.params, cfg).empty()) return 0;
  const SearchResult r = search_fastest(m, d, p.params, cfg, SearchSpace{});
  if (allocator_bound)
    *allocator_bound = r.found && r.best_prediction.time.allocator_s > 0.5 * r.best_prediction.step_s;
  return r.found ? r.best_prediction.tokens_per_s : 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(nearest_sibling_is_same_architecture_then_vendor_then_distance) {
  const auto measured = measured_specs();
  const auto pick = [&](const char* id) {
    const SiblingChoice c = nearest_sibling(load_device(id), measured);
    return std::make_pair(measured[c.index].id, c.tier);
  };
  BOOST_TEST((pick("h200_141gb") == std::make_pair(std::string("h100_80gb"), 0)));
  BOOST_TEST((pick("b200") == std::make_pair(std::string("h100_80gb"), 1)));  // nearer than the A100s
  BOOST_TEST((pick("gb300") == std::make_pair(std::string("h100_80gb"), 1)));
  BOOST_TEST(pick("v100_32gb").second == 1);
  BOOST_TEST(pick("mi300x").second == 2);  // no AMD device is measured
  // The interval widens with the distance: other vendors more than the same die.
  BOOST_TEST(interval_widening(0, 0.9) < interval_widening(1, 0.9));
  BOOST_TEST(interval_widening(1, 0.9) < interval_widening(2, 0.9));
  BOOST_TEST(interval_widening(1, 2.0) > interval_widening(1, 1.0));
}

// H200 from H100 keeps every kernel efficiency, overhead and attention efficiency, and its GEMM rates
// (same peaks); what differs is only the HBM bandwidth and capacity the datasheet gives. Checked on
// the shipped profiles (fit.sh made them with `calibrate transfer`).
BOOST_AUTO_TEST_CASE(shipped_h200_is_h100_changed_only_by_the_datasheet) {
  const DeviceProfile h100 = load_shipped_profile("h100_80gb");
  const DeviceProfile h200 = load_shipped_profile("h200_141gb");
  for (const ParamInfo& info : cost_param_registry()) {
    BOOST_TEST_CONTEXT(info.name) {
      BOOST_TEST(info.value(h200.params) == info.value(h100.params), boost::test_tools::tolerance(1e-9));
      const ParamSource& s = h200.sources.at(std::string(info.name));
      if (info.value(h200.params) > 0) BOOST_TEST(contains(s.detail, "transfer from h100_80gb"));
    }
  }
  const auto i100 = prediction_interval(h100), i200 = prediction_interval(h200);
  BOOST_TEST(i200->p10 < i100->p10);
  BOOST_TEST(i200->p90 > i100->p90);
  BOOST_TEST(i200->p90 - i200->p10 < 0.25);  // same die: stays close
}

BOOST_AUTO_TEST_CASE(gemm_rates_scale_by_the_peak_ratio_at_the_siblings_fraction) {
  const DeviceProfile h100 = load_shipped_profile("h100_80gb");
  const DeviceSpec dh100 = load_device("h100_80gb");
  for (const char* id : {"b200", "gb200", "b300", "gb300"}) {
    const DeviceSpec d = load_device(id);
    const DeviceProfile p = load_shipped_profile(id);
    BOOST_TEST_CONTEXT(id) {
      for (DType t : {DType::kBf16, DType::kFp8, DType::kFp16, DType::kTf32}) {
        const double expect = h100.params.gemm_flops_per_s(t) / dh100.peak(t) * d.peak(t);
        BOOST_TEST(p.params.gemm_flops_per_s(t) == expect, boost::test_tools::tolerance(1e-9));
      }
      // fp4: H100 has none, its fp8 fraction stands in.
      const double fp4 = h100.params.gemm_flops_per_s(DType::kFp8) / dh100.peak(DType::kFp8) * d.peak(DType::kFp4);
      BOOST_TEST(p.params.gemm_flops_per_s(DType::kFp4) == fp4, boost::test_tools::tolerance(1e-9));
      BOOST_TEST(p.params.microbatch_overhead_s == h100.params.microbatch_overhead_s);
      BOOST_TEST(p.params.attn_fwd_efficiency == h100.params.attn_fwd_efficiency);
    }
  }
  // No measured AMD sibling: the interval is the widest.
  const auto mi = prediction_interval(load_shipped_profile("mi355x")),
             h200 = prediction_interval(load_shipped_profile("h200_141gb"));
  BOOST_TEST(mi->p90 - mi->p10 > h200->p90 - h200->p10 + 0.3);
}

// Issue 16 item 6: a device >= another on every datasheet figure is never predicted slower (nor
// predicted not to fit where the other fits), for the fastest fitting configuration of each, over
// the catalogue, several sequences, 8 and 64 GPUs. Tolerance 0.1% (the search is discrete).
BOOST_AUTO_TEST_CASE(a_dominating_device_is_never_predicted_slower) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  std::vector<DeviceSpec> devices;
  for (const auto& id : known_devices()) devices.push_back(load_device(id));
  std::map<std::string, DeviceProfile> profiles;
  for (const auto& d : devices) profiles.emplace(d.id, load_shipped_profile(d.id));
  int pairs = 0, points = 0;
  std::map<std::string, double> exception_low;
  double worst = 1e9;
  std::string worst_at;
  std::map<std::tuple<std::string, std::string, int64_t, int64_t>, double> memo;
  const auto tps = [&](const DeviceSpec& d, const ModelConfig& m, int64_t seq, int64_t gpus, Precision precision) {
    const auto key = std::make_tuple(d.id + std::string(to_string(precision)), m.name, seq, gpus);
    // amp_bf16, or amp_fp16 where the dominated device has no bf16 (V100): both run the same.
    if (!memo.count(key)) memo[key] = fastest(m, d, profiles.at(d.id), seq, gpus, precision);
    return memo[key];
  };
  for (const auto& a : devices)
    for (const auto& b : devices) {
      if (!dominates(a, b)) continue;
      ++pairs;
      for (const auto& m : catalog.models())
        for (int64_t seq : {2048, 8192})
          for (int64_t gpus : {8, 64}) {
            const Precision p = b.supports(DType::kBf16) ? Precision::kAmpBf16 : Precision::kAmpFp16;
            const double ta = tps(a, m, seq, gpus, p), tb = tps(b, m, seq, gpus, p);
            if (tb == 0) continue;
            ++points;
            const double ratio = ta / tb;
            const bool known = known_exception(a.id, b.id);
            double& low = known ? exception_low.try_emplace(a.id + " over " + b.id, 1e9).first->second : worst;
            if (ratio < low || (!known && ratio == worst)) {
              low = ratio;
              if (!known)
                worst_at =
                    a.id + " / " + b.id + " " + m.name + " seq " + std::to_string(seq) + " on " + std::to_string(gpus);
            }
            if (known) continue;
            BOOST_TEST_CONTEXT(a.id << " over " << b.id << ", " << m.name << ", seq " << seq << ", " << gpus
                                    << " GPUs") {
              BOOST_TEST(ratio >= 0.999);
            }
          }
    }
  std::cout << "dominance: " << pairs << " pairs, " << points << " points, lowest ratio " << worst << " (" << worst_at
            << ")\n";
  // The known exceptions still are: when the A100 fits agree, this fails and the list goes.
  for (const auto& [pair, low] : exception_low) {
    std::cout << "known exception " << pair << ": lowest ratio " << low << "\n";
    BOOST_TEST_CONTEXT(pair) { BOOST_TEST(low < 0.999); }
  }
  BOOST_TEST(exception_low.size() == 1u);
  BOOST_TEST(pairs >= 8);  // h200/h100, b200/h100, gb200/b200, b300/b200, gb300/gb200, mi325x/mi300x, ...
}

// Issue 17: H100 at least 1.3x the A100 80GB's throughput at every catalogue model and sequence
// 512..65536 on 8 GPUs (both fitted to their own tables). Left out: a point whose fastest layout
// spends most of its step in the caching allocator's retries on either device (Nemotron 3 Nano's
// 31.6B under FSDP on 8 GPUs at short sequences), where neither device's speed is what is compared.
BOOST_AUTO_TEST_CASE(h100_is_at_least_1_3x_a100_80gb_on_8_gpus) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const DeviceSpec h100 = load_device("h100_80gb"), a100 = load_device("a100_80gb");
  const DeviceProfile ph = load_shipped_profile("h100_80gb"), pa = load_shipped_profile("a100_80gb");
  double worst = 1e9;
  std::string worst_at;
  int allocator_bound = 0;
  for (const auto& m : catalog.models())
    for (int64_t seq = 512; seq <= 65536; seq *= 2) {
      bool bound_a = false, bound_h = false;
      const double ta = fastest(m, a100, pa, seq, 8, Precision::kAmpBf16, &bound_a);
      if (ta == 0) continue;
      const double th = fastest(m, h100, ph, seq, 8, Precision::kAmpBf16, &bound_h);
      if (bound_a || bound_h) {
        std::cout << "allocator-bound: " << m.name << " seq " << seq << "\n";
        ++allocator_bound;
        continue;
      }
      const double ratio = th / ta;
      if (ratio < worst) worst = ratio, worst_at = m.name + " seq " + std::to_string(seq);
    }
  std::cout << "h100 / a100_80gb on 8 GPUs: lowest ratio " << worst << " (" << worst_at << "); " << allocator_bound
            << " allocator-bound points left out\n";
  BOOST_TEST(allocator_bound <= 8);  // a few, not a way around the check
  BOOST_TEST(worst >= 1.3);
}

// GB200 NVL72: 72 GPUs in one NVLink domain, so an all-gather over 64 GPUs stays on NVLink; on
// 8-GPU B200 servers it crosses 8 nodes.
BOOST_AUTO_TEST_CASE(nvl72_keeps_64_gpus_on_nvlink) {
  const DeviceSpec gb200 = load_device("gb200"), b200 = load_device("b200");
  BOOST_TEST(gb200.gpus_per_node == 72);
  BOOST_TEST(gb200.gpus_per_host == 4);
  BOOST_TEST(gb200.inter_node_bytes_per_s == 72 * 400e9 / 8, boost::test_tools::tolerance(1e-12));
  // A profile's device_spec round-trips the domain and the per-host network.
  const DeviceSpec back = parse_device_json(device_spec_to_json(gb200), "gb200 (round trip)");
  BOOST_TEST(back.gpus_per_node == 72);
  BOOST_TEST(back.gpus_per_host == 4);
  BOOST_TEST(back.inter_node_bytes_per_s == gb200.inter_node_bytes_per_s, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(back.supports(ScaledFormat::kNvfp4));
  BOOST_TEST(fsdp_layout(Sharding::kFullShard, 64, gb200.gpus_per_node).shard_group.nodes == 1);
  // HYBRID_SHARD shards over the tray's 4 GPUs; its 16 replicas stay on NVLink.
  const FsdpLayout hybrid = fsdp_layout(Sharding::kHybridShard, 64, gb200.gpus_per_node, gb200.gpus_per_host);
  BOOST_TEST(hybrid.shard_ranks == 4);
  BOOST_TEST(hybrid.replica_group.ranks == 16);
  BOOST_TEST(hybrid.replica_group.nodes == 1);
  BOOST_TEST(fsdp_layout(Sharding::kFullShard, 64, b200.gpus_per_node).shard_group.nodes == 8);
  const CostParams p = load_shipped_profile("gb200").params;
  const CostModel on_nvl(gb200, p), on_hgx(b200, p);
  const CommGroup g72 = fsdp_layout(Sharding::kFullShard, 64, gb200.gpus_per_node).shard_group;
  const CommGroup g8 = fsdp_layout(Sharding::kFullShard, 64, b200.gpus_per_node).shard_group;
  const double bytes = 1e9;
  // On NVLink the ring runs at NVLink's rate: 63/64 * B / (900 GB/s * efficiency) plus latencies.
  const double nvlink = 63.0 / 64 * bytes / (900e9 * p.intra_node_link_efficiency);
  BOOST_TEST(on_nvl.collective_seconds(CollectiveKind::kAllGather, bytes, g72) >= nvlink);
  BOOST_TEST(on_nvl.collective_seconds(CollectiveKind::kAllGather, bytes, g72) < 1.2 * nvlink);
  // On eight HGX B200 nodes the ring crosses the nodes' NICs: 7/8 * B / (400 GB/s * efficiency) at least.
  const double nics = 7.0 / 8 * bytes / (b200.inter_node_bytes_per_s * p.inter_node_link_efficiency);
  BOOST_TEST(on_hgx.collective_seconds(CollectiveKind::kAllGather, bytes, g8) >= nics);
  BOOST_TEST(on_hgx.collective_seconds(CollectiveKind::kAllGather, bytes, g8) >
             on_nvl.collective_seconds(CollectiveKind::kAllGather, bytes, g72));
}

BOOST_AUTO_TEST_CASE(block_scaled_formats_parse_and_are_refused_where_the_chip_lacks_them) {
  BOOST_TEST((parse_precision("mxfp8") == Precision::kMxfp8));
  BOOST_TEST((parse_precision("nvfp4") == Precision::kNvfp4));
  BOOST_TEST(!parse_precision("mxfp4"));
  const ModelCatalog catalog = ModelCatalog::load_default();
  const ModelConfig& m = catalog.get("1b");
  TrainConfig cfg;
  cfg.seq_len = 2048;
  cfg.n_gpus = 8;
  cfg.global_batch = 64;
  cfg.micro_batch = 2;
  const auto why = [&](const char* dev, Precision p) {
    cfg.precision = p;
    return check_config(m, load_device(dev), load_shipped_profile(dev).params, cfg);
  };
  BOOST_TEST(why("b200", Precision::kNvfp4) == "");
  BOOST_TEST(why("b200", Precision::kMxfp8) == "");
  BOOST_TEST(why("mi355x", Precision::kMxfp8) == "");
  BOOST_TEST(contains(why("mi355x", Precision::kNvfp4), "its fp4 is MXFP4"));
  BOOST_TEST(contains(why("h100_80gb", Precision::kMxfp8), "needs mxfp8 tensor cores, which h100_80gb does not have"));
  BOOST_TEST(contains(why("mi325x", Precision::kNvfp4), "needs nvfp4 tensor cores"));
}

// The casts carry the block scales (1 byte per 32 elements for MX, per 16 for NVFP4), the GEMMs read
// the quantized operands, and MFU divides by the format's peak.
BOOST_AUTO_TEST_CASE(block_scaled_casts_and_mfu) {
  const ModelCatalog catalog = ModelCatalog::load_default();
  const ModelConfig& m = catalog.get("1b");
  const auto ops_of = [&](Precision p) {
    BlockShape s = block_shape(m, 2, 2048, p);
    OpList out;
    block_forward_ops(s, out);
    return std::vector<Op>(out.begin(), out.end());
  };
  const auto find = [](const std::vector<Op>& ops, const std::string& name) {
    for (const auto& o : ops)
      if (o.name == std::string_view(name)) return o;
    BOOST_FAIL("no op " + name);
    return Op{};
  };
  const auto fp8 = ops_of(Precision::kAmpFp8), mx = ops_of(Precision::kMxfp8), nv = ops_of(Precision::kNvfp4);
  const double w8 = find(fp8, "attn.Wqkv.fp8_cast").bytes_written;
  BOOST_TEST(find(mx, "attn.Wqkv.fp8_cast").bytes_written == w8 * (1 + 1.0 / 32), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(nv, "attn.Wqkv.fp8_cast").bytes_written == w8 * (0.5 + 1.0 / 16),
             boost::test_tools::tolerance(1e-12));
  BOOST_TEST((find(nv, "attn.Wqkv.fwd").dtype == DType::kFp4));
  BOOST_TEST((find(mx, "attn.Wqkv.fwd").dtype == DType::kFp8));
  BOOST_TEST((mfu_dtype(Precision::kNvfp4) == DType::kFp4));
  BOOST_TEST((mfu_dtype(Precision::kMxfp8) == DType::kFp8));
  // NVFP4 on B200 is faster than MXFP8, which is at least as fast as bf16 (a 7B model, 8 GPUs).
  const DeviceSpec b200 = load_device("b200");
  const DeviceProfile pb = load_shipped_profile("b200");
  const ModelConfig& m7 = catalog.get("7b");
  const double bf16 = fastest(m7, b200, pb, 4096, 8), mx8 = fastest(m7, b200, pb, 4096, 8, Precision::kMxfp8),
               nv4 = fastest(m7, b200, pb, 4096, 8, Precision::kNvfp4);
  BOOST_TEST(mx8 > bf16);
  BOOST_TEST(nv4 > mx8);
}
