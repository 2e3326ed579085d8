// The rulebook: every constraint a configuration must satisfy, each written once, with a name and
// the flag and table column of what it constrains. One call returns the first rule a configuration
// breaks (as Ceres' Solver::Options::IsValid does for its options): the command line, the search,
// the measured-table reader and the simulator ask it, and each error is the rule's one line.
//
// The book is read in order: the framework rules (what a framework runs at all, from the flags
// alone), then the layout rules (the degrees against the model, the GPU count and, when set, the
// batches: what a search checks of every layout it builds), then the configuration rules (sizes,
// the device, the profile), then the rules of the configuration's framework (FrameworkDef::rules,
// each framework's own file). What a command line asks is checked first by the request rules,
// which see which flags were given (a value equal to its default is still given).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "model/layout.hpp"
#include "model/training.hpp"

namespace tpsim {

struct ModelConfig;
struct DeviceSpec;
struct CostParams;
struct FrameworkDef;

// How much of a configuration a rule reads: each scope includes the ones before it.
enum class RuleScope : uint8_t {
  kFramework,  // the framework and the layout's values alone (no model, no GPU count)
  kLayout,     // the model, the sequence, the GPU count, and the batches when they are set (not 0)
  kConfig,     // the whole configuration on its device and profile
};

struct RuleInput {
  const ModelConfig* model = nullptr;  // set from kLayout on
  const TrainConfig& cfg;
  const DeviceSpec* device = nullptr;  // set for kConfig
  const CostParams* params = nullptr;  // set for kConfig
};

struct Rule {
  std::string_view name;      // "tensor-divides-heads": what a test asserts, and docs/rules.md lists
  std::string_view concerns;  // the flags and table columns it constrains: "--tp, Tensor Parallel"
  RuleScope scope;
  // Empty when `in` keeps the rule, else why not: one line naming the value at fault.
  std::string (*broken)(const RuleInput& in);
  // It reads the micro-batch (a search that varies only the micro-batch checks these alone).
  bool reads_micro_batch = false;
  // The frameworks whose books hold it (a general rule; null: every framework's).
  bool (*applies)(const FrameworkDef& def) = nullptr;
};

struct BrokenRule {
  std::string_view rule;  // its name; empty: every rule kept
  std::string why;
  explicit operator bool() const { return !rule.empty(); }
};

// The first rule `in` breaks, in the book's order: scope by scope up to `upto`, at each scope the
// general rules and then those of the configuration's framework.
BrokenRule first_broken_rule(const RuleInput& in, RuleScope upto);
// Every rule (check_config says why).
BrokenRule first_broken_rule(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                             const TrainConfig& cfg);
// The rules of the layout, without the device (check_layout says why): what a search checks of
// each layout it builds, with a global batch and micro-batch of 0 checking the degrees alone.
BrokenRule first_broken_layout_rule(const ModelConfig& model, const TrainConfig& cfg);

// Whether `rule` (a BrokenRule's name) is one the global batch breaks, the layout's degrees being
// valid: the batch does not split over the GPUs or the data-parallel ranks as the framework needs.
bool splits_the_batch(std::string_view rule);

// The rules that read the micro-batch, in the book's order: for a configuration that keeps every
// rule at some other micro-batch, what first_broken_rule would say at this one (a search's bound).
BrokenRule first_broken_micro_batch_rule(const RuleInput& in);

// The general rules, in the book's order (a framework's own are FrameworkDef::rules).
std::span<const Rule* const> general_rules();

// What a command line asks of a layout, checked before any model is known: the rules that turn on
// which flags were given (a value equal to its default is still given), then the framework rules
// on the layout it asks (fixed_layout).
BrokenRule first_broken_request_rule(const LayoutRequest& r);

// Rules the table reader applies alone, and rules two frameworks share (their FrameworkDef::rules).
extern const Rule kTensorDividesHeads;  // the search's tensor degrees keep these two
extern const Rule kTensorDividesFfn;
extern const Rule kDegreesDivideGpus;            // tensor x pipeline x context divides the GPU count
extern const Rule kContextNeedsFusedAttention;   // ring attention runs on flash attention
extern const Rule kInterleavedMicroBatches;      // interleaved 1F1B: micro-batches a multiple of pp
extern const Rule kPipelineScheduleLimits;       // the schedule's own limits (stages, chunks, micro-batches)
extern const Rule kHybridLayersModelled;         // Mamba-2 and single-sublayer layers: not torchtitan, cp, LoRA
extern const Rule kChunkedAttentionNotModelled;  // chunked attention: a last short chunk, cp, unfused, torchtitan
extern const Rule kSlidingWindowNotModelled;     // sliding-window attention under model parallelism

}  // namespace tpsim
