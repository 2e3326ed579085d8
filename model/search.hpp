// The one search every command runs: over the configurations of a training run on one device and
// GPU count, which fit in memory, which is fastest, and why the others were rejected. `sweep` keeps
// the fastest of each point, `plan` ranks every configuration that fits, and `predict --micro-batch
// auto` asks for the largest micro-batch that fits.
//
// The space is data: the axes of a configuration and their values. Every axis but the micro-batch
// makes a *layout*: under composer the FSDP sharding strategy and activation checkpointing (none,
// selective or full); under megatron (and torchtitan) the model-parallel degrees (tensor, pipeline,
// virtual stages, context, expert; data parallel is what is left), sequence parallelism, the
// distributed optimizer and checkpointing. The micro-batch axis is searched inside each layout,
// with two rules that prune instead of visiting every point:
//   1. Memory grows with the micro-batch: the first micro-batch whose predicted peak exceeds the
//      device's memory rules out every larger one. The bound is found from memory alone (no
//      schedule), by an exponential then binary search, before any configuration is timed. Under
//      megatron the micro-batches are the divisors of the per-replica batch (Megatron-LM asserts
//      global batch = micro-batch x data parallel x accumulation: no ragged last micro-batch), and
//      the bound is searched over them in ascending order: memory still grows with the micro-batch
//      within a layout, whose degrees fix what each rank holds.
//   2. Dominated and equivalent choices (goal kFastest only): a layout whose predictions equal an
//      earlier one's (HYBRID_SHARD within one node is FULL_SHARD) is not searched; with
//      checkpointing, micro-batches that fit under an earlier layout of the same sharding and
//      parallel degrees that
//      recomputes less are not timed: selective's where they fit without checkpointing, full's
//      where they fit without it or under selective (full recomputes a superset of what selective
//      does). Recomputing more only adds compute to the same schedule (the step time cannot fall),
//      and equal times go to the earlier layout.
// kAllThatFit applies only rule 1: a plan lists configurations that rule 2 would skip.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/layout.hpp"
#include "model/simulator.hpp"

namespace tpsim {

// The configuration `base` runs with `layout`.
TrainConfig with_layout(TrainConfig base, const Layout& layout);

struct Rejection;

// A megatron (or torchtitan) search varies each model-parallel axis the LayoutRequest leaves unset
// and keeps the asked ones:
//   tensor: powers of two up to the GPUs of a node dividing the query and K/V heads and the FFN
//     width (Megatron-LM's column/row-parallel split; TP beyond a node crosses the slow network);
//   pipeline: the divisors of the GPU count up to the layer count (under torchtitan, which splits
//     layers evenly, also dividing the layers);
//   virtual_stages and the split: every count giving whole layers per model chunk, under megatron
//     with Megatron-Core's uneven splits where the even one does not divide (search.cpp
//     searched_splits: the embedding and loss counted as layers, then fixed lighter first and last
//     stages), each split shown in the layout's columns;
//   context: 1 below 8192 tokens per sequence; from 8192 up also the powers of two splitting the
//     sequence into 2cp equal chunks with at least 4096 tokens per rank (search.cpp
//     searched_context);
//   expert: the divisors of the experts of a mixture-of-experts model (1 for a dense one);
//   expert_tensor: tp's (Megatron-Core's default), and under megatron for a mixture of experts with
//     tensor > 1 also 1 (the expert groups then span the tensor ranks);
//   sequence_parallel: on wherever tensor > 1 (Megatron-LM's recommended setting);
//   distributed_optimizer: on (ZeRO-1, Megatron-LM's --use-distributed-optimizer).
// The rest is as asked in every layout: the switches (TransformerEngine's TP communication overlap
// only wherever tensor > 1 with sequence parallelism, the combined 1F1B's all-to-all overlap only
// wherever expert > 1 without full recompute and with pipeline parallelism only interleaved:
// Megatron-Core's conditions; async TP only wherever tensor > 1), the uneven pipeline split,
// torchtitan's HSDP degrees and selective_ac_option. A layout keeps tensor x pipeline x context
// dividing the GPU count and data parallel (the rest) dividing the global batch; check_layout says
// what else it must satisfy.
struct SearchSpace {
  LayoutRequest asked;  // the framework and the axes given (composer: its HSDP degrees)
  std::vector<Sharding> shardings = {kAllShardings.begin(), kAllShardings.end()};  // composer
  // Without selective by default: llm-foundry and Composer checkpoint whole blocks
  // (activation_checkpointing), so a sweep or plan searches what they can run.
  std::vector<Checkpointing> checkpointing = {Checkpointing::kNone, Checkpointing::kFull};
  std::vector<int64_t> micro_batches;  // empty: every micro-batch from 1 up to the per-device batch
  // composer, when no HSDP degree is given: also HYBRID_SHARD on 2D meshes sharding over 2, 4, ...
  // hosts (shard degree 2^k x GPUs per host below the GPU count, the replicas the rest), after
  // Composer's own groups (HYBRID_SHARD's default shards within a node). What plan searches: at
  // hundreds of GPUs a group of a few nodes holds a large model where one node cannot, and its
  // collectives take fewer ring steps than FULL_SHARD's over every GPU.
  bool hsdp_meshes = false;

  // Composer's layouts: the product of the axes, in the order ties are broken: shardings, then
  // checkpointing.
  std::vector<Layout> layouts() const;
  // The layouts of `base` (its GPU count, global batch and sequence length) for `model` on
  // `device`: composer's as above; megatron's the valid products of the parallel axes (those
  // check_layout accepts), tensor outermost, then pipeline, virtual stages, context, expert,
  // sequence parallel, distributed optimizer and checkpointing innermost, each ascending.
  // `batch_rejected`, when given, gets the layouts whose degrees are valid but do not split the
  // global batch (one Rejection per reason, counting its layouts).
  std::vector<Layout> layouts(const ModelConfig& model, const DeviceSpec& device, const TrainConfig& base,
                              std::vector<Rejection>* batch_rejected = nullptr) const;
};

// What a configuration's parallel layout must satisfy for the search to consider it ("" when it
// does): composer runs no model parallelism; tensor parallel divides the query heads, K/V heads and
// FFN width; pipeline parallel divides the layers (at most one stage per layer); virtual stages
// need a pipeline and whole layers per chunk; context parallel divides the sequence; expert
// parallel divides the experts and the data x context ranks; sequence parallelism needs tensor
// parallelism; tensor x pipeline x context divides the GPU count; data parallel divides the global
// batch; under megatron the micro-batch (when set) divides the per-replica batch. A global batch
// and micro-batch of 0 check the degrees and the GPU count alone. check_config (model/simulator)
// holds the simulator's own rules; predict checks both.
std::string check_layout(const ModelConfig& model, const TrainConfig& cfg);

// Why no layout of `asked` can split the global batch of `base` ("" when some may): without model
// parallelism every layout splits it alike (llm-foundry: over every GPU), so one rule answers for
// the GPU count; a model-parallel search answers layout by layout (SearchSpace::layouts'
// batch_rejected).
std::string batch_unsplit(const ModelConfig& model, const TrainConfig& base, const LayoutRequest& asked);

enum class SearchGoal : uint8_t {
  kFastest,     // the fastest configuration that fits (and, when none fits, the leanest)
  kAllThatFit,  // every configuration that fits, each with its prediction
};

// Why a layout, or some of its micro-batches, were not kept.
enum class RejectionKind : uint8_t {
  kInvalid,             // check_config refuses the layout: `reason`
  kMicroBatchTooLarge,  // a listed micro-batch is more than the per-device batch (composer lowers it instead)
  kOutOfMemory,         // not even the smallest micro-batch fits: it needs `peak_bytes`
  kOutOfMemoryAbove,    // micro-batches above `micro_batch` do not fit
  kEquivalent,          // predicts exactly as an earlier layout (`same_as`)
  kNoLayout,  // megatron: no layout of the fixed axes is valid (`reason`: check_layout's, with the axes fixed)
};

struct Rejection {
  Layout layout;
  RejectionKind kind = RejectionKind::kInvalid;
  int64_t micro_batch =
      0;  // kMicroBatchTooLarge, kOutOfMemory: the micro-batch; kOutOfMemoryAbove: the largest that fits
  int64_t per_device_batch = 0;
  double peak_bytes = 0;  // kOutOfMemory: the peak of `micro_batch`
  Layout same_as;         // kEquivalent
  std::string reason;     // kInvalid: check_config's reason; kNoLayout: check_layout's
  int64_t count = 1;      // kInvalid: the layouts rejected for `reason` (`layout` is the first of them)
};

struct Candidate {
  TrainConfig cfg;
  Prediction prediction;
};

struct SearchResult {
  bool found = false;        // some configuration fits in memory
  bool has_leanest = false;  // some layout was valid: its memory was predicted
  TrainConfig best;          // kFastest: the fastest that fits
  Prediction best_prediction;
  TrainConfig leanest;                // kFastest, when nothing fits: the smallest predicted peak memory
  Prediction leanest_prediction;      // (what to report then)
  std::vector<Candidate> fitting;     // kAllThatFit: every configuration that fits, layout by layout,
                                      // micro-batches ascending (a listed space: in its order)
  std::vector<Rejection> rejections;  // in the order of the layouts
  int64_t evaluated = 0;              // configurations timed (predicted in full)
};

// `base` fixes seq_len, global_batch, n_gpus, precision and mp_mode; the search varies the rest.
// Equal step times keep the configuration met first in the order of the space (layouts, then
// micro-batches ascending).
SearchResult search(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                    const TrainConfig& base, const SearchSpace& space, SearchGoal goal);

inline SearchResult search_fastest(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                                   const TrainConfig& base, const SearchSpace& space) {
  return search(model, device, params, base, space, SearchGoal::kFastest);
}

// The largest micro-batch of `cfg`'s layout that check_config accepts and that fits in memory, by
// rule 1 above (what `predict --micro-batch auto` runs); 0 when none does.
int64_t largest_fitting_micro_batch(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                                    const TrainConfig& cfg);

// What Composer runs for device_train_microbatch_size: auto (composer/trainer/trainer.py:
// _get_initial_device_train_microbatch_size and _adjust_device_train_microbatch_size): it starts
// from the per-device batch and, on each out-of-memory, retries with max(int(m / 2), 1). The
// sequence tried, ending with the first that fits (or with 1, when check_config refuses even that,
// for a reason the caller's check reports); empty when not even 1 fits.
std::vector<int64_t> composer_auto_micro_batches(const ModelConfig& model, const DeviceSpec& device,
                                                 const CostParams& params, const TrainConfig& cfg);

}  // namespace tpsim
