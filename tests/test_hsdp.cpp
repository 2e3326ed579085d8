// Composer's HSDP (a replicate x shard device mesh) and plain DDP (a training YAML without
// fsdp_config): groups, collective bytes and memory against hand-computed cases; the cluster network
// flags' device override and the network a profile records.
#define BOOST_TEST_MODULE hsdp
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "common.hpp"
#include "model/memory.hpp"
#include "model/parallelism.hpp"
#include "model/simulator.hpp"

using namespace tpsim;
using tpsim::test::contains;
namespace tt = boost::test_tools;

namespace {
// Collective and step times from the same inputs in another order: equal to rounding.
constexpr double kRelTol = 1e-9;

struct Fixture {
  ModelCatalog catalog = ModelCatalog::load_default();
  DeviceSpec device = load_device("h100_80gb");  // 8 GPUs per node
  DeviceProfile profile = load_shipped_profile("h100_80gb");
  const ModelConfig& model = catalog.get("7b");
  CostModel cost{device, profile.params};

  TrainConfig config(int64_t gpus, Sharding sharding, int64_t shard, int64_t replicate, int64_t accum = 1) const {
    TrainConfig c{.seq_len = 2048,
                  .global_batch = gpus * 2 * accum,
                  .micro_batch = 2,
                  .n_gpus = gpus,
                  .layout = {.sharding = sharding}};
    c.layout.shard_degree = shard;
    c.layout.replicate_degree = replicate;
    return c;
  }
  std::string why(const TrainConfig& c) const { return check_config(model, device, profile.params, c); }
  Prediction run(const TrainConfig& c) const { return predict(model, device, profile.params, c); }
  double block_params() const { return static_cast<double>(layer_parameter_count(model)); }
  double root_params() const { return static_cast<double>(embedding_parameter_count(model, 2048)); }
  double total_params() const { return block_params() * static_cast<double>(model.n_layers) + root_params(); }
};

bool same_group(const CommGroup& a, const CommGroup& b) {
  return a.ranks == b.ranks && a.nodes == b.nodes && a.groups_per_node == b.groups_per_node;
}
}  // namespace

BOOST_AUTO_TEST_CASE(the_mesh_follows_composers_create_device_mesh) {
  HsdpMesh m;
  Layout p;
  BOOST_TEST(resolve_hsdp_mesh(p, Sharding::kFullShard, 32, &m).empty());
  BOOST_TEST(!m.mesh);  // neither degree: the strategy's own groups
  p.shard_degree = -1;  // Composer's default, written out
  BOOST_TEST(resolve_hsdp_mesh(p, Sharding::kHybridShard, 32, &m).empty());
  BOOST_TEST(!m.mesh);
  p.replicate_degree = 4;  // shard: the rest
  BOOST_TEST(resolve_hsdp_mesh(p, Sharding::kFullShard, 32, &m).empty());
  BOOST_TEST((m.mesh && m.two_d && m.shard == 8 && m.replicate == 4));
  p = {};
  p.shard_degree = 16, p.replicate_degree = -1;
  BOOST_TEST(resolve_hsdp_mesh(p, Sharding::kFullShard, 64, &m).empty());
  BOOST_TEST((m.shard == 16 && m.replicate == 4));
  p.replicate_degree = 0;  // a 1D mesh: the shard degree is every GPU
  BOOST_TEST(resolve_hsdp_mesh(p, Sharding::kFullShard, 16, &m).empty());
  BOOST_TEST((m.mesh && !m.two_d && m.shard == 16 && m.replicate == 1));
  // One-line errors naming the degrees.
  BOOST_TEST(resolve_hsdp_mesh(p, Sharding::kFullShard, 64, &m) ==
             "shard degree 16: the product is not the GPU count 64");
  p.replicate_degree = 3;
  BOOST_TEST(resolve_hsdp_mesh(p, Sharding::kFullShard, 64, &m) ==
             "replicate degree 3 x shard degree 16: the product is not the GPU count 64");
  p.shard_degree = -1;
  BOOST_TEST(resolve_hsdp_mesh(p, Sharding::kFullShard, 64, &m) ==
             "replicate degree 3 x shard degree -1: does not divide the GPU count 64");
  p.replicate_degree = -1;
  BOOST_TEST(contains(resolve_hsdp_mesh(p, Sharding::kFullShard, 64, &m), "only one degree may be -1"));
  p.shard_degree = 8, p.replicate_degree = 8;
  BOOST_TEST(contains(resolve_hsdp_mesh(p, Sharding::kNoShard, 64, &m), "NO_SHARD takes no 2D device mesh"));
  BOOST_TEST(contains(resolve_hsdp_mesh(p, Sharding::kDdp, 64, &m), "DDP has no shard or replicate groups"));
  p.shard_degree = 0, p.replicate_degree = -2;
  BOOST_TEST(contains(resolve_hsdp_mesh(p, Sharding::kFullShard, 64, &m), "a degree is -1 (the rest) or 1.."));
}

BOOST_AUTO_TEST_CASE(shard_groups_are_consecutive_and_replicas_strided) {
  Layout p;
  p.replicate_degree = 4, p.shard_degree = 8;  // 32 GPUs on nodes of 8: a node shards, nodes replicate
  FsdpLayout l = composer_layout(Sharding::kFullShard, p, 32, 8);
  BOOST_TEST(l.shard_ranks == 8);
  BOOST_TEST(same_group(l.shard_group, CommGroup{8, 1, 1}));
  BOOST_TEST(same_group(l.replica_group, CommGroup{4, 4, 8}));  // eight replica groups share each node's NICs
  BOOST_TEST((l.gather_in_forward && l.gather_in_backward));
  // As HYBRID_SHARD without degrees, which shards over the node.
  const FsdpLayout hybrid = fsdp_layout(Sharding::kHybridShard, 32, 8);
  BOOST_TEST(same_group(l.shard_group, hybrid.shard_group));
  BOOST_TEST(same_group(l.replica_group, hybrid.replica_group));
  // A shard group of two nodes; replicas 16 ranks apart, each on its own node.
  p.replicate_degree = 2, p.shard_degree = 16;
  l = composer_layout(Sharding::kFullShard, p, 32, 8);
  BOOST_TEST(same_group(l.shard_group, CommGroup{16, 2, 1}));
  BOOST_TEST(same_group(l.replica_group, CommGroup{2, 2, 8}));
  // Inside one node: shard 2, replicas 2 apart, all in the node.
  p.replicate_degree = 4, p.shard_degree = 2;
  l = composer_layout(Sharding::kFullShard, p, 8, 8);
  BOOST_TEST(same_group(l.shard_group, CommGroup{2, 1, 1}));
  BOOST_TEST(same_group(l.replica_group, CommGroup{4, 1, 1}));
  // SHARD_GRAD_OP on a 2D mesh is _HYBRID_SHARD_ZERO2: gathered in the forward only.
  l = composer_layout(Sharding::kShardGradOp, p, 8, 8);
  BOOST_TEST((l.gather_in_forward && !l.gather_in_backward));
  // A 1D mesh turns HYBRID_SHARD into FULL_SHARD over every GPU.
  p.replicate_degree = 0, p.shard_degree = 32;
  l = composer_layout(Sharding::kHybridShard, p, 32, 8);
  BOOST_TEST(l.shard_ranks == 32);
  BOOST_TEST(l.replica_group.ranks == 1);
}

BOOST_FIXTURE_TEST_CASE(hsdp_collectives_move_the_hand_computed_bytes, Fixture) {
  // 64 GPUs, replicate 4 x shard 16 (two nodes per shard group), FULL_SHARD (HYBRID_SHARD on the mesh).
  const TrainConfig c = config(64, Sharding::kFullShard, 16, 4);
  BOOST_TEST_REQUIRE(why(c).empty());
  const Prediction p = run(c);
  // One micro-batch (global batch 128 = 64 GPUs x 2): per block two all-gathers of the bf16 block over
  // the 16 shard ranks, a reduce-scatter of its fp32 gradients over them, and an all-reduce of the
  // 1/16 shard over the 4 replicas; the root unit gathered once and reduced once.
  const CommGroup shard{16, 2, 1}, replicas{4, 4, 8};
  const auto gather = [&](double params) {
    return cost.collective_seconds(CollectiveKind::kAllGather, 2.0 * params, shard);
  };
  const auto reduce = [&](double params) {
    return cost.collective_seconds(CollectiveKind::kReduceScatter, 4.0 * params, shard) +
           cost.collective_seconds(CollectiveKind::kAllReduce, 4.0 * params / 16.0, replicas);
  };
  const double L = static_cast<double>(model.n_layers);
  const double expected =
      L * (2.0 * gather(block_params()) + reduce(block_params())) + gather(root_params()) + reduce(root_params());
  BOOST_TEST(p.timeline.comm_s == expected, tt::tolerance(kRelTol));
  // The state is sharded 16 ways.
  BOOST_TEST(p.memory.sharded_state_bytes == 16.0 * total_params() / 16.0, tt::tolerance(kRelTol));
  // HYBRID_SHARD with the same degrees runs the same mesh.
  const Prediction hybrid = run(config(64, Sharding::kHybridShard, 16, 4));
  BOOST_TEST(hybrid.step_s == p.step_s);
  // replicate 8 x shard 8 is HYBRID_SHARD's own layout on nodes of 8: the same step, to the bit.
  const Prediction mesh8 = run(config(64, Sharding::kFullShard, -1, 8));
  const Prediction node = run(config(64, Sharding::kHybridShard, 0, 0));
  BOOST_TEST(mesh8.step_s == node.step_s);
  BOOST_TEST(mesh8.memory.peak_bytes == node.memory.peak_bytes);
}

BOOST_FIXTURE_TEST_CASE(hsdp_degrees_are_checked_with_the_gpu_count, Fixture) {
  BOOST_TEST(why(config(64, Sharding::kFullShard, 16, 2)) ==
             "replicate degree 2 x shard degree 16: the product is "
             "not the GPU count 64");
  BOOST_TEST(contains(why(config(64, Sharding::kNoShard, 8, 8)), "NO_SHARD takes no 2D device mesh"));
  // With a mesh HYBRID_SHARD needs no whole nodes: the mesh says the groups.
  BOOST_TEST(why(config(12, Sharding::kHybridShard, 4, 3)).empty());
  BOOST_TEST(contains(why(config(12, Sharding::kHybridShard, 0, 0)), "HYBRID_SHARD needs whole nodes"));
}

BOOST_FIXTURE_TEST_CASE(ddp_memory_is_every_parameter_gradient_and_moment, Fixture) {
  const TrainConfig c = config(8, Sharding::kDdp, 0, 0);
  BOOST_TEST_REQUIRE(why(c).empty());
  const Prediction p = run(c);
  const double P = total_params();
  BOOST_TEST(p.memory.sharded_state_bytes == 16.0 * P, tt::tolerance(kRelTol));  // fp32 weights, grads, Adam m and v
  // DDP's buckets (a second fp32 copy of the gradients) are always there; autocast's bf16 copies of
  // every weight are kept for the backward.
  BOOST_TEST(p.memory.transient_bytes >= 4.0 * P * (1 - kRelTol));
  BOOST_TEST(p.memory.gathered_params_bytes == 2.0 * P, tt::tolerance(kRelTol));
  // More than NO_SHARD, which frees its copies block by block, and far more than FULL_SHARD.
  BOOST_TEST(p.memory.peak_bytes > run(config(8, Sharding::kNoShard, 0, 0)).memory.peak_bytes);
  // One GPU runs no DDP: no buckets.
  TrainConfig one = c;
  one.n_gpus = 1, one.global_batch = 2;
  const Prediction single = run(one);
  BOOST_TEST(single.memory.sharded_state_bytes == 16.0 * P, tt::tolerance(kRelTol));
  BOOST_TEST(single.memory.transient_bytes < 4.0 * P);
  BOOST_TEST(single.timeline.comm_s == 0.0);
}

BOOST_FIXTURE_TEST_CASE(ddp_reduces_the_gradients_once_per_step_in_buckets, Fixture) {
  const CommGroup all{16, 2, 1};
  // Equal buckets of at most 25 MiB, one fp32 all-reduce each.
  const auto bucketed = [&](double params) {
    const double bytes = 4.0 * params, n = std::ceil(bytes / (25.0 * 1024 * 1024));
    return n * cost.collective_seconds(CollectiveKind::kAllReduce, bytes / n, all);
  };
  const double L = static_cast<double>(model.n_layers);
  const double once = L * bucketed(block_params()) + bucketed(root_params());
  const Prediction one = run(config(16, Sharding::kDdp, 0, 0, 1));
  const Prediction four = run(config(16, Sharding::kDdp, 0, 0, 4));
  BOOST_TEST(one.timeline.comm_s == once, tt::tolerance(kRelTol));
  // The first three micro-batches run under no_sync: the step still reduces once.
  BOOST_TEST(four.timeline.comm_s == once, tt::tolerance(kRelTol));
  // The last bucket (the embeddings') waits for the embedding backward: exposed.
  BOOST_TEST(one.time.exposed_comm_s >= bucketed(root_params()) * (1 - kRelTol));
  BOOST_TEST(four.time.exposed_comm_s >= bucketed(root_params()) * (1 - kRelTol));
  // NO_SHARD reduces every micro-batch (in one all-reduce per block).
  BOOST_TEST(run(config(16, Sharding::kNoShard, 0, 0, 4)).timeline.comm_s ==
                 4.0 * run(config(16, Sharding::kNoShard, 0, 0, 1)).timeline.comm_s,
             tt::tolerance(kRelTol));
}

BOOST_FIXTURE_TEST_CASE(no_degrees_leave_every_strategy_as_it_was, Fixture) {
  for (Sharding s : kAllShardings)
    for (int64_t gpus : {8, 64}) {
      const FsdpLayout a = composer_layout(s, Layout{}, gpus, 8), b = fsdp_layout(s, gpus, 8);
      BOOST_TEST(a.shard_ranks == b.shard_ranks);
      BOOST_TEST(same_group(a.shard_group, b.shard_group));
      BOOST_TEST(same_group(a.replica_group, b.replica_group));
      BOOST_TEST((a.gather_in_forward == b.gather_in_forward && a.gather_in_backward == b.gather_in_backward));
      BOOST_TEST(!a.ddp);
    }
}

BOOST_AUTO_TEST_CASE(the_network_flags_override_the_device_and_say_so) {
  DeviceSpec d = load_device("h100_80gb");
  apply_network(d, ClusterNetwork{});
  BOOST_TEST(d.gpus_per_node == 8);
  apply_network(d, ClusterNetwork{.gpus_per_node = 4, .inter_node_gbps = 400.0});
  BOOST_TEST(d.gpus_per_node == 4);
  BOOST_TEST(d.inter_node_bytes_per_s == 400e9 / 8.0);
  BOOST_TEST(d.sources["gpus_per_node"] == "--gpus-per-node");
  BOOST_TEST(d.sources["inter_node_gbps_per_node"] == "--inter-node-gbps");
}

BOOST_AUTO_TEST_CASE(a_profile_records_the_network_it_was_fitted_on) {
  DeviceProfile prof = load_shipped_profile("h100_80gb");
  DeviceSpec d = load_device("h100_80gb");
  // The shipped profile records the network of its device file: no note on that network.
  const auto shipped = profile_network(prof);
  BOOST_TEST_REQUIRE(shipped.has_value());
  BOOST_TEST(shipped->gpus_per_node == d.gpus_per_node);
  BOOST_TEST(network_mismatch_note(prof, d).empty());
  prof.extra.erase("network");
  BOOST_TEST(network_mismatch_note(prof, d).empty());  // no record: nothing to compare
  set_profile_network(prof, d);
  const DeviceProfile back = parse_profile_json(profile_to_json(prof), "back.json");
  const auto n = profile_network(back);
  BOOST_TEST_REQUIRE(n.has_value());
  BOOST_TEST(n->gpus_per_node == 8);
  BOOST_TEST(n->inter_node_gbps == d.inter_node_bytes_per_s * 8.0 / 1e9, tt::tolerance(kRelTol));
  BOOST_TEST(network_mismatch_note(back, d).empty());
  apply_network(d, ClusterNetwork{.inter_node_gbps = 400.0});
  const std::string note = network_mismatch_note(back, d);
  BOOST_TEST(contains(note, "was fitted on"));
  BOOST_TEST(contains(note, "this run's network is 400 Gbit/s per node of 8 GPUs"));
  BOOST_TEST(note.find('\n') == std::string::npos);
  // A malformed record is an error when the profile is read.
  std::string text = profile_to_json(prof);
  text.replace(text.find("\"gpus_per_node\": 8"), 18, "\"gpus_per_node\": 0");
  BOOST_TEST(contains(test::error_of([&] { parse_profile_json(text, "bad.json"); }), "bad.json: \"network\""));
}
