#include "model/framework.hpp"
#include "model/layout.hpp"
#include "model/search.hpp"
#include "model/model_parallel.hpp"
#include "model/rules.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

namespace tpsim {

TrainConfig with_layout(TrainConfig base, const Layout& layout) {
  base.layout = layout;
  return base;
}

std::vector<Layout> SearchSpace::layouts() const {
  std::vector<Layout> out;
  Layout composer;
  composer.shard_degree = asked.shard_degree.value_or(0);
  composer.replicate_degree = asked.replicate_degree.value_or(0);
  composer.torch_compile = asked.torch_compile;
  for (Sharding sharding : shardings)
    for (Checkpointing ckpt : checkpointing) {
      composer.sharding = sharding, composer.checkpointing = ckpt;
      out.push_back(composer);
    }
  return out;
}

std::string check_layout(const ModelConfig& model, const TrainConfig& cfg) {
  return first_broken_layout_rule(model, cfg).why;
}

std::string batch_unsplit(const ModelConfig& model, const TrainConfig& base, const LayoutRequest& asked) {
  if (framework_def(asked.framework).model_parallel) return {};
  const BrokenRule broken = first_broken_layout_rule(model, with_layout(base, fixed_layout(asked)));
  return broken && splits_the_batch(broken.rule) ? broken.why : std::string{};
}

namespace {

// One axis's values: the fixed one, or the searched ones.
template <typename T>
std::vector<T> axis(const std::optional<T>& fixed, std::vector<T> searched) {
  return fixed ? std::vector<T>{*fixed} : searched;
}

// The powers of two up to a node's GPUs that split the model's heads and FFN widths (the rules
// tensor-divides-heads and tensor-divides-ffn on the routed experts too).
std::vector<int64_t> searched_tensor(const ModelConfig& model, const DeviceSpec& device, Framework framework) {
  std::vector<int64_t> out;
  TrainConfig trial;
  trial.layout.framework = framework;
  const RuleInput in{.model = &model, .cfg = trial};
  for (int64_t tp = 1; tp <= std::max<int64_t>(1, device.gpus_per_node); tp *= 2) {
    trial.layout.tensor = tp;
    if (kTensorDividesHeads.broken(in).empty() && kTensorDividesFfn.broken(in).empty()) out.push_back(tp);
  }
  return out;
}

// The divisors of n, ascending (pairs d, n / d up to the square root).
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      low.push_back(d);
      if (d != n / d) high.push_back(n / d);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// Context parallel degrees worth searching for `base` under tensor parallel `tp`: 1 below 8192 tokens
// per sequence (the ring's K/V exchange then rivals the attention it overlaps, and what cp saves,
// activation memory, recompute and pipeline stages save as well); from 8192 up the powers of two
// that split the sequence into 2cp equal chunks, leave each rank at least 4096 tokens of it and fit
// in the GPUs beside tp. Powers of two only, as for tp, so that a long-sequence point adds at most
// log2(seq/4096) degrees (five at 65536) and shorter ones none: the megatron sweep stays within
// its time.
std::vector<int64_t> searched_context(const TrainConfig& base, int64_t tp) {
  std::vector<int64_t> out = {1};
  if (base.seq_len < 8192) return out;
  for (int64_t cp = 2; base.seq_len % (2 * cp) == 0 && base.seq_len / cp >= 4096 && tp * cp <= base.n_gpus; cp *= 2)
    out.push_back(cp);
  return out;
}

// Expert parallel degrees: the divisors of a mixture of experts' expert count (check_layout keeps
// those dividing data x context parallel); 1 for a dense model.
std::vector<int64_t> searched_expert(const ModelConfig& model) {
  return model.moe.active() ? divisors(model.moe.experts) : std::vector<int64_t>{1};
}

// Expert tensor parallel degrees under tensor parallel `tp` (0: tp's, Megatron-Core's default): the
// given one, else for a mixture of experts under megatron with tp > 1 also 1, the experts whole on
// each rank with EP spanning the tensor ranks (what NVIDIA's Megatron-Bridge recipes for
// fine-grained experts run). A given degree equal to tp is the default.
std::vector<int64_t> searched_expert_tensor(const LayoutRequest& a, const ModelConfig& model, int64_t tp) {
  if (a.expert_tensor) return {*a.expert_tensor == tp ? 0 : *a.expert_tensor};
  if (framework_def(a.framework).expert_tensor_parallel && model.moe.active() && tp > 1) return {0, 1};
  return {0};
}

// The pipeline degrees worth searching: those dividing the GPU count (tensor x pipeline x context
// must), at most one stage per layer; where the framework has no uneven split, also dividing the
// layers.
std::vector<int64_t> searched_pipeline(const ModelConfig& model, const TrainConfig& base, bool uneven) {
  std::vector<int64_t> out;
  for (int64_t pp : divisors(std::max<int64_t>(base.n_gpus, 1)))
    if (pp <= model.n_layers && (uneven || model.n_layers % pp == 0)) out.push_back(pp);
  return out;
}

// How the layers are split over the stages: the virtual stages and Megatron-Core's uneven split.
struct PipelineSplit {
  int64_t virtual_stages = 1;
  int64_t first_stage_layers = 0, last_stage_layers = 0;
  bool account_for_embedding = false, account_for_loss = false;
};

// Fixed first and last stages no heavier than the stages between them: each middle stage gets the
// fewest layers (a multiple of vp) that is at least the average, the first and last share the rest
// (the first the larger half). False when that leaves either end without a layer per chunk.
bool lighter_ends(int64_t layers, int64_t pp, int64_t vp, PipelineSplit& s) {
  const int64_t middle = pp > 2 ? (layers + pp * vp - 1) / (pp * vp) * vp : 0;
  const int64_t ends = layers - (pp - 2) * middle;
  s.first_stage_layers = (ends + 2 * vp - 1) / (2 * vp) * vp;
  s.last_stage_layers = ends - s.first_stage_layers;
  return s.last_stage_layers >= vp && s.first_stage_layers >= vp;
}

// The splits of `layers` over `pp` stages a search tries, each leaving whole layers in every model
// chunk (split_layers accepts it), for every virtual-stage count from 1 (or the one asked). For
// each count, in order: the even split and the embedding and loss both counted as layers
// (Megatron-Core's --account-for-embedding/loss-in-pipeline-split); where neither gives whole
// layers, either one counted; where none does, fixed first and last stages lighter than those
// between (--decoder-first/last-pipeline-num-layers). A split whose chunks hold the same layers as an
// earlier one of the same count predicts as it and is left out. A split asked for (any uneven option
// given), or a framework without uneven splits, has that one split only.
std::vector<PipelineSplit> searched_splits(const LayoutRequest& a, const FrameworkDef& def, int64_t layers,
                                           int64_t pp) {
  const bool asked = a.first_stage_layers || a.last_stage_layers || a.account_for_embedding || a.account_for_loss;
  const PipelineSplit as_asked{1, a.first_stage_layers.value_or(0), a.last_stage_layers.value_or(0),
                               a.account_for_embedding, a.account_for_loss};
  const bool search_uneven = !asked && pp > 1 && def.owns(FrameworkOption::kUnevenPipeline);
  // Each tier is tried only when the tiers before it gave no split.
  const std::vector<std::vector<PipelineSplit>> tiers =
      search_uneven ? std::vector<std::vector<PipelineSplit>>{{{}, {1, 0, 0, true, true}},
                                                              {{1, 0, 0, true, false}, {1, 0, 0, false, true}},
                                                              {{1, -1, -1, false, false}}}
                    : std::vector<std::vector<PipelineSplit>>{{as_asked}};
  std::vector<PipelineSplit> out;
  Layout trial;
  trial.pipeline = pp;
  std::vector<int64_t> chunks;
  std::vector<std::vector<int64_t>> seen;  // the chunk layers of this count's splits
  // The embedding and loss counted, a chunk holds at least one of the layers + 2.
  for (int64_t vp = 1; vp <= std::max<int64_t>(1, (layers + 2) / pp); ++vp) {
    if ((a.virtual_stages && vp != *a.virtual_stages) || (!a.virtual_stages && vp > 1 && pp == 1)) continue;
    seen.clear();
    for (const std::vector<PipelineSplit>& tier : tiers) {
      for (PipelineSplit s : tier) {
        s.virtual_stages = vp;
        if (s.first_stage_layers < 0 && !lighter_ends(layers, pp, vp, s)) continue;
        trial.virtual_stages = vp;
        trial.first_stage_layers = s.first_stage_layers, trial.last_stage_layers = s.last_stage_layers;
        trial.account_for_embedding = s.account_for_embedding, trial.account_for_loss = s.account_for_loss;
        // An asked split is kept whatever split_layers says: check_layout gives the reason.
        if (search_uneven && !split_layers(layers, trial, chunks).empty()) continue;
        if (search_uneven && std::find(seen.begin(), seen.end(), chunks) != seen.end()) continue;
        seen.push_back(chunks);
        out.push_back(s);
      }
      if (!seen.empty()) break;
    }
  }
  return out;
}

// The micro-batches a megatron layout can run, ascending: the divisors of the per-replica batch,
// and under interleaved 1F1B only those leaving a multiple of the pipeline stages of micro-batches.
std::vector<int64_t> megatron_micro_batches(const TrainConfig& cfg) {
  const int64_t per_replica = cfg.per_device_batch();
  std::vector<int64_t> out = divisors(per_replica);
  if (cfg.layout.virtual_stages > 1)
    std::erase_if(out, [&](int64_t mb) { return (per_replica / mb) % cfg.layout.pipeline != 0; });
  return out;
}

// A layout rejected for `why`: counted with the earlier ones rejected for the same reason.
void add_rejection(std::vector<Rejection>& rejections, const Layout& layout, const std::string& why) {
  for (Rejection& r : rejections)
    if (r.kind == RejectionKind::kInvalid && r.reason == why) {
      ++r.count;
      return;
    }
  Rejection r{.layout = layout, .kind = RejectionKind::kInvalid};
  r.reason = why;
  rejections.push_back(std::move(r));
}

// Megatron-FSDP's strategies a search tries: the asked one; else, where the framework has it and
// one pipeline stage holds the model (megatron-fsdp-modelled), DDP (with its distributed-optimizer
// axis) and the two strategies that shard more than it (gradients; gradients and parameters).
std::vector<MegatronFsdp> searched_megatron_fsdp(const LayoutRequest& a, const FrameworkDef& def, int64_t pp) {
  if (a.megatron_fsdp) return {*a.megatron_fsdp};
  if (!def.owns(FrameworkOption::kMegatronFsdp) || pp > 1) return {MegatronFsdp::kOff};
  return {MegatronFsdp::kOff, MegatronFsdp::kOptimGrads, MegatronFsdp::kOptimGradsParams};
}

// Megatron's layouts: every product of the axes' values that check_layout accepts.
std::vector<Layout> parallel_layouts(const SearchSpace& s, const ModelConfig& model, const DeviceSpec& device,
                                     const TrainConfig& base, std::vector<Rejection>* batch_rejected) {
  const LayoutRequest& a = s.asked;
  const FrameworkDef& def = framework_def(a.framework);
  std::vector<Layout> out;
  TrainConfig cfg = base;
  cfg.micro_batch = 0;  // the micro-batch is searched inside each layout
  Layout& p = cfg.layout;
  p = fixed_layout(a);  // the switches and the uneven split as asked; the rest is set below
  if (!def.data_parallel_degrees) p.shard_degree = p.replicate_degree = 0;  // torchtitan's as given (TorchtitanMesh)
  const bool overlap_grad_reduce = p.overlap_grad_reduce;                   // as asked; Megatron-FSDP sets it
  // The pipeline degrees and their splits do not depend on tp: listed once, not per tp.
  std::vector<std::pair<int64_t, std::vector<PipelineSplit>>> pipelines;
  for (int64_t pp : axis(a.pipeline, searched_pipeline(model, base, def.owns(FrameworkOption::kUnevenPipeline))))
    pipelines.emplace_back(pp, searched_splits(a, def, model.n_layers, pp));
  for (int64_t tp : axis(a.tensor, searched_tensor(model, device, a.framework)))
    for (const auto& [pp, splits] : pipelines)
      for (const PipelineSplit& split : splits)
        for (int64_t cp : axis(a.context, searched_context(base, tp)))
          for (int64_t ep : axis(a.expert, searched_expert(model)))
            for (int64_t etp : searched_expert_tensor(a, model, tp))
              for (bool sp : axis(a.sequence_parallel, {tp > 1}))
                for (bool dist_opt : axis(a.distributed_optimizer, {def.distributed_optimizer}))
                  for (MegatronFsdp fsdp : searched_megatron_fsdp(a, def, pp)) {
                    // A strategy sets the distributed optimizer itself: one layout, not one per
                    // value; over one data-parallel rank it shards nothing.
                    if (fsdp != MegatronFsdp::kOff && !a.megatron_fsdp &&
                        (dist_opt != def.distributed_optimizer || base.n_gpus == tp * cp * pp))
                      continue;
                    p.tensor = tp, p.pipeline = pp, p.virtual_stages = split.virtual_stages, p.context = cp;
                    p.expert = ep;
                    p.first_stage_layers = split.first_stage_layers, p.last_stage_layers = split.last_stage_layers;
                    p.account_for_embedding = split.account_for_embedding;
                    p.account_for_loss = split.account_for_loss;
                    p.expert_tensor = etp;
                    p.mtp_layers = a.mtp_layers.value_or(0), p.mtp_repeated_layer = a.mtp_repeated_layer;
                    p.pipeline_layout = a.pipeline_layout;
                    p.moe_dispatcher = a.moe_dispatcher.value_or(MoeDispatcher::kAllToAll);
                    p.cuda_graphs = a.cuda_graphs.value_or(0);
                    p.moe_capacity_factor = a.moe_capacity_factor.value_or(0);
                    p.moe_paged_stash = a.moe_paged_stash.value_or(0);
                    p.bf16_layers_start = a.bf16_layers_start.value_or(0);
                    p.bf16_layers_end = a.bf16_layers_end.value_or(0);
                    p.sequence_parallel = sp;
                    p.distributed_optimizer = dist_opt, p.overlap_grad_reduce = overlap_grad_reduce;
                    set_megatron_fsdp(p, fsdp);
                    p.async_tensor_parallel = a.async_tensor_parallel && tp > 1;
                    p.tp_comm_overlap = a.tp_comm_overlap && tp > 1 && sp;
                    // What depends on the checkpointing is set below and checked with the
                    // configuration (check_config).
                    p.checkpointing = Checkpointing::kNone, p.selective_ac_layers = 0, p.moe_a2a_overlap = false;
                    p.delay_wgrad = false;
                    if (const BrokenRule broken = first_broken_layout_rule(model, cfg)) {
                      if (batch_rejected && splits_the_batch(broken.rule))
                        add_rejection(*batch_rejected, p, broken.why);
                      continue;
                    }
                    // Megatron's data parallelism replicates parameters and gradients (DDP, FSDP's
                    // NO_SHARD); the distributed optimizer shards the optimizer state (ZeRO-1).
                    // torchtitan's FSDP2 shards all of them (FULL_SHARD; model/torchtitan.hpp).
                    const Sharding sharding = framework_sharding(a.framework);
                    for (Checkpointing ckpt : s.checkpointing) {
                      p.selective_ac_layers = ckpt == Checkpointing::kSelective ? a.selective_ac_layers.value_or(0) : 0;
                      p.recompute_modules = ckpt == Checkpointing::kSelective
                                                ? a.recompute_modules.value_or(kDefaultRecomputeModules)
                                                : kDefaultRecomputeModules;
                      p.moe_a2a_overlap = a.moe_a2a_overlap && ep > 1 && ckpt != Checkpointing::kFull &&
                                          (pp == 1 || split.virtual_stages > 1);
                      p.delay_wgrad = a.delay_wgrad && p.moe_a2a_overlap;
                      p.sharding = sharding, p.checkpointing = ckpt;
                      set_megatron_fsdp(p, fsdp);
                      out.push_back(p);
                    }
                  }
  return out;
}

}  // namespace

std::vector<Layout> SearchSpace::layouts(const ModelConfig& model, const DeviceSpec& device, const TrainConfig& base,
                                         std::vector<Rejection>* batch_rejected) const {
  if (framework_def(asked.framework).model_parallel)
    return parallel_layouts(*this, model, device, base, batch_rejected);
  std::vector<Layout> out = layouts();
  if (!hsdp_meshes || asked.shard_degree || asked.replicate_degree ||
      std::find(shardings.begin(), shardings.end(), Sharding::kHybridShard) == shardings.end())
    return out;
  // HYBRID_SHARD's own shard group is a host's GPUs (a server or compute tray; model/parallelism).
  const int64_t per_host = std::max(1, device.gpus_per_host > 0 ? device.gpus_per_host : device.gpus_per_node);
  for (int64_t shard = 2 * per_host; shard < base.n_gpus; shard *= 2) {
    if (base.n_gpus % shard != 0) continue;
    Layout mesh;
    mesh.torch_compile = asked.torch_compile;
    mesh.sharding = Sharding::kHybridShard;
    mesh.shard_degree = shard;
    mesh.replicate_degree = base.n_gpus / shard;
    for (Checkpointing ckpt : checkpointing) {
      mesh.checkpointing = ckpt;
      out.push_back(mesh);
    }
  }
  return out;
}

namespace {

bool same_but_sharding(Layout a, const Layout& b) {
  a.sharding = b.sharding;
  return a == b;
}

bool same_but_checkpointing(Layout a, const Layout& b) {
  a.checkpointing = b.checkpointing;
  return a == b;
}

// Within one host HYBRID_SHARD shards over the host and has no replicas to reduce across: it
// predicts exactly as FULL_SHARD (model/parallelism.cpp).
bool equivalent(const Layout& a, const Layout& b, const TrainConfig& base, const DeviceSpec& device) {
  const auto full_like = [](Sharding s) { return s == Sharding::kFullShard || s == Sharding::kHybridShard; };
  return full_like(a.sharding) && full_like(b.sharding) &&
         base.n_gpus <= (device.gpus_per_host > 0 ? device.gpus_per_host : device.gpus_per_node) &&
         same_but_sharding(a, b);
}

// The largest m in [lo, hi] with ok(m), for ok true up to some point and false after it; lo - 1 when
// ok(lo) is false. Gallops up from lo, then bisects: the probes stay within twice the answer, where
// a search times configurations anyway.
template <typename Ok>
int64_t last_ok(int64_t lo, int64_t hi, Ok ok) {
  if (lo > hi || !ok(lo)) return lo - 1;
  int64_t good = lo, bad = hi + 1;
  for (int64_t step = 1; good + step < bad; step *= 2) {
    if (!ok(good + step)) {
      bad = good + step;
      break;
    }
    good += step;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (ok(mid) ? good : bad) = mid;
  }
  return good;
}

Rejection rejection(const Layout& layout, RejectionKind kind, int64_t micro_batch = 0, int64_t per_device_batch = 0,
                    double peak_bytes = 0) {
  return Rejection{layout, kind, micro_batch, per_device_batch, peak_bytes};
}

class Searcher {
 public:
  Searcher(const ModelConfig& model, const DeviceSpec& device, const CostParams& params, const SearchSpace& space,
           SearchGoal goal)
      : model_(model),
        device_(device),
        params_(params),
        space_(space),
        goal_(goal),
        evaluator_(model, device, params) {}

  SearchResult run(const TrainConfig& base);

 private:
  void search_layout(const TrainConfig& cfg, size_t index);
  Rejection no_layout(const TrainConfig& base) const;
  void search_listed(TrainConfig cfg, size_t index);
  int64_t undominated_from(size_t index) const;
  // run() checked every rule of the layout at micro-batch 1: only those reading the micro-batch can
  // break at another.
  bool valid(const TrainConfig& cfg) const {
    return !first_broken_micro_batch_rule({.model = &model_, .cfg = cfg, .device = &device_, .params = &params_});
  }
  // Memory of cfg; records it as the leanest when it is. True when it fits.
  bool fits(const TrainConfig& cfg, int order, int64_t position, double* peak = nullptr);
  void time(const TrainConfig& cfg, int order, int64_t position);
  void reject(Rejection r) { result_.rejections.push_back(std::move(r)); }

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  const SearchSpace& space_;
  const SearchGoal goal_;
  Evaluator evaluator_;
  std::vector<Layout> layouts_;
  std::vector<int64_t> fit_upto_;  // per layout: the micro-batches 1..this were timed and fit
  SearchResult result_;
  // Equal step times (or peaks) keep the configuration met first: layouts in order, then positions.
  using Rank = std::tuple<double, int, int64_t>;
  Rank best_rank_{}, leanest_rank_{};
};

SearchResult Searcher::run(const TrainConfig& base) {
  layouts_ = space_.layouts(model_, device_, base, &result_.rejections);
  fit_upto_.assign(layouts_.size(), 0);
  if (layouts_.empty() && result_.rejections.empty() && framework_def(space_.asked.framework).model_parallel)
    reject(no_layout(base));
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const Layout& layout = layouts_[i];
    bool skipped = false;
    for (size_t j = 0; j < i && !skipped && goal_ == SearchGoal::kFastest; ++j) {
      if (!equivalent(layout, layouts_[j], base, device_)) continue;
      Rejection r = rejection(layout, RejectionKind::kEquivalent);
      r.same_as = layouts_[j];
      reject(r);
      skipped = true;
    }
    if (skipped) continue;
    TrainConfig cfg = with_layout(base, layout);
    cfg.micro_batch = 1;
    if (const std::string why = check_config(model_, device_, params_, cfg); !why.empty()) {
      add_rejection(result_.rejections, layout, why);
      continue;
    }
    if (space_.micro_batches.empty()) search_layout(cfg, i);
    else search_listed(cfg, i);
  }
  if (!result_.found && result_.has_leanest) result_.leanest_prediction = evaluator_.predict(result_.leanest);
  return std::move(result_);
}

// Every micro-batch from 1 up: memory bounds them (rule 1), then the undominated ones are timed.
void Searcher::search_layout(const TrainConfig& layout_cfg, size_t index) {
  const int order = static_cast<int>(index);
  const int64_t per_device = layout_cfg.per_device_batch();
  // The micro-batches, ascending: every one from 1 (composer, whose last micro-batch may be
  // smaller), or the divisors of the per-replica batch (megatron: check_layout).
  const bool every = !framework_def(layout_cfg.layout.framework).batching.whole_micro_batches;
  const std::vector<int64_t> listed = every ? std::vector<int64_t>{} : megatron_micro_batches(layout_cfg);
  const auto micro_batch_at = [&](int64_t k) { return every ? k : listed[static_cast<size_t>(k - 1)]; };
  const int64_t count = every ? per_device : static_cast<int64_t>(listed.size());
  TrainConfig cfg = layout_cfg;
  // run() checked the layout at micro-batch 1. Composer's rules on the micro-batch are bounds (at
  // most the per-device batch, at most check_config's tokens per micro-batch): when the largest
  // passes, every one between does, and the probes need not check each again.
  cfg.micro_batch = count;
  const bool every_valid = every && valid(cfg);
  double first_peak = 0;
  const int64_t last = last_ok(1, count, [&](int64_t k) {
    cfg.micro_batch = micro_batch_at(k);
    return (every_valid || valid(cfg)) && fits(cfg, order, k - 1, k == 1 ? &first_peak : nullptr);
  });
  const int64_t largest = last == 0 ? 0 : micro_batch_at(last);
  fit_upto_[index] = largest;
  if (largest == 0) {
    reject(rejection(layouts_[index], RejectionKind::kOutOfMemory, 1, per_device, first_peak));
    return;
  }
  if (largest < per_device) reject(rejection(layouts_[index], RejectionKind::kOutOfMemoryAbove, largest, per_device));
  const int64_t from = undominated_from(index);
  for (int64_t k = 1; k <= last; ++k) {
    cfg.micro_batch = micro_batch_at(k);
    if (cfg.micro_batch >= from) time(cfg, order, k - 1);
  }
}

// When the fixed axes leave no valid layout: why, from the layout of the fixed axes with the
// searched ones at 1.
Rejection Searcher::no_layout(const TrainConfig& base) const {
  Rejection r = rejection(fixed_layout(space_.asked), RejectionKind::kNoLayout);
  r.layout.sharding = Sharding::kNoShard;
  TrainConfig cfg = with_layout(base, r.layout);
  cfg.micro_batch = 0;
  r.reason = check_layout(model_, cfg);
  if (r.reason.empty())
    r.reason = "no layout of the searched degrees divides " + std::to_string(base.n_gpus) +
               " GPUs and the global batch " + std::to_string(base.global_batch);
  return r;
}

// The micro-batches the space lists, each on its own.
void Searcher::search_listed(TrainConfig cfg, size_t index) {
  const int order = static_cast<int>(index);
  for (size_t k = 0; k < space_.micro_batches.size(); ++k) {
    cfg.micro_batch = space_.micro_batches[k];
    const auto position = static_cast<int64_t>(k);
    if (cfg.micro_batch > cfg.per_device_batch()) {
      // llm-foundry lowers it to the per-device batch (calculate_batch_size_info); Megatron-LM and
      // torchtitan refuse it.
      if (!framework_def(cfg.layout.framework).batching.whole_micro_batches) {
        cfg.micro_batch = cfg.per_device_batch();
      } else {
        reject(rejection(layouts_[index], RejectionKind::kMicroBatchTooLarge, cfg.micro_batch, cfg.per_device_batch()));
        continue;
      }
    }
    double peak = 0;
    if (!valid(cfg)) continue;
    if (!fits(cfg, order, position, &peak)) {
      reject(rejection(layouts_[index], RejectionKind::kOutOfMemory, cfg.micro_batch, cfg.per_device_batch(), peak));
      continue;
    }
    time(cfg, order, position);
  }
}

// What a kind of checkpointing runs again in the backward, in order: each recomputes a superset of
// the one before (none; selective: the attention core; full: the whole block's forward).
int recompute_order(Checkpointing c) {
  switch (c) {
    case Checkpointing::kNone: return 0;
    case Checkpointing::kSelective: return 1;
    case Checkpointing::kFull: return 2;
  }
  return 0;
}

// Rule 2: with checkpointing, the micro-batches that fit under an earlier layout of the same sharding
// and parallel degrees that recomputes less (none before selective, none or selective before full) are slower or equal
// there, and equal goes to the earlier layout. Such an earlier layout's own dominated micro-batches
// were skipped for the same reason, so the chain ends at one that was timed.
int64_t Searcher::undominated_from(size_t index) const {
  const Layout& layout = layouts_[index];
  if (goal_ != SearchGoal::kFastest || layout.checkpointing == Checkpointing::kNone) return 1;
  int64_t from = 1;
  // Layouts that differ in their checkpointing alone are adjacent (SearchSpace::layouts lists it
  // innermost): the walk back ends at the first layout that differs in more. (Were one missed, its
  // micro-batches would be timed, not skipped: the same result, found slower.)
  for (size_t j = index; j-- > 0 && same_but_checkpointing(layouts_[j], layout);)
    if (recompute_order(layouts_[j].checkpointing) < recompute_order(layout.checkpointing))
      from = std::max(from, fit_upto_[j] + 1);
  return from;
}

bool Searcher::fits(const TrainConfig& cfg, int order, int64_t position, double* peak) {
  const MemoryBreakdown m = evaluator_.memory(cfg);
  if (peak) *peak = m.peak_bytes;
  const Rank lean{m.peak_bytes, order, position};
  if (!result_.has_leanest || lean < leanest_rank_) {
    result_.leanest = cfg;
    leanest_rank_ = lean;
    result_.has_leanest = true;
  }
  return evaluator_.fits(m);
}

void Searcher::time(const TrainConfig& cfg, int order, int64_t position) {
  Prediction p = evaluator_.predict(cfg);
  ++result_.evaluated;
  const Rank fast{p.step_s, order, position};
  if (!result_.found || fast < best_rank_) {
    result_.best = cfg;
    result_.best_prediction = p;
    best_rank_ = fast;
    result_.found = true;
  }
  if (goal_ == SearchGoal::kAllThatFit) result_.fitting.push_back({cfg, p});
}

}  // namespace

SearchResult search(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                    const TrainConfig& base, const SearchSpace& space, SearchGoal goal) {
  return Searcher(model, device, params, space, goal).run(base);
}

int64_t largest_fitting_micro_batch(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                                    const TrainConfig& cfg) {
  Evaluator evaluator(model, device, params);
  TrainConfig c = cfg;
  // Composer: every micro-batch up to the per-device batch; megatron: its divisors (check_layout).
  const bool every = !framework_def(cfg.layout.framework).batching.whole_micro_batches;
  const std::vector<int64_t> listed = every ? std::vector<int64_t>{} : megatron_micro_batches(cfg);
  const auto micro_batch_at = [&](int64_t k) { return every ? k : listed[static_cast<size_t>(k - 1)]; };
  const int64_t count = every ? cfg.per_device_batch() : static_cast<int64_t>(listed.size());
  const int64_t last = last_ok(1, count, [&](int64_t k) {
    c.micro_batch = micro_batch_at(k);
    return check_config(model, device, params, c).empty() && evaluator.fits(evaluator.memory(c));
  });
  return last <= 0 ? 0 : micro_batch_at(last);
}

std::vector<int64_t> composer_auto_micro_batches(const ModelConfig& model, const DeviceSpec& device,
                                                 const CostParams& params, const TrainConfig& cfg) {
  Evaluator evaluator(model, device, params);
  TrainConfig c = cfg;
  std::vector<int64_t> tried;
  for (int64_t m = cfg.per_device_batch();; m = std::max<int64_t>(m / 2, 1)) {
    tried.push_back(m);
    c.micro_batch = m;
    // A micro-batch check_config refuses (beyond what the simulator models) is halved like one that
    // does not fit; one refused even at 1 is for another reason, which the caller's check reports.
    const bool valid = check_config(model, device, params, c).empty();
    if (valid && evaluator.fits(evaluator.memory(c))) return tried;
    if (m == 1) return valid ? std::vector<int64_t>{} : tried;
  }
}

}  // namespace tpsim
