// The row every command prints for a predicted configuration: llm-foundry's result columns, in
// its order and spelling, then tpsim's own (memory, step-time breakdown).
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "io/output.hpp"
#include "io/profile_io.hpp"
#include "io/terminal.hpp"
#include "model/simulator.hpp"

namespace tpsim {

// Column names as a list (one helper, so that each command's list reads as one line of names).
inline std::vector<std::string> columns(std::initializer_list<const char*> names) {
  return {names.begin(), names.end()};
}

// Model, SeqLen (T), # GPUs, GPU, MFU, HFU, Model TFLOP, MicroBatchSize, GradAccum,
// GlobalBatchSize, Throughput (S/s), Throughput (T/s), Throughput (T/s/GPU), GlobalBatchSize (T),
// Precision, MP Mode, Sharding Strategy, Activation Checkpointing, Activation CPUOffload, NumParams.
const std::vector<std::string>& foundry_columns();
// Fits, Throughput Low (T/s), Throughput High (T/s), Memory (GiB), Capacity (GiB), Step Time (s),
// GEMM (s), Attention (s), Other Compute (s), Exposed Comm (s), Optimizer (s), Overhead (s).
// Low and High: the range the measured throughput is expected in, from the profile's held-out
// errors (10th to 90th percentile).
const std::vector<std::string>& extra_columns();
std::vector<std::string> prediction_columns();  // both
// With `with_layout`, the layout columns after them all.
std::vector<std::string> prediction_columns(bool with_layout);

// What a terminal shows of the tables the commands print (io/terminal.hpp). The columns a person
// reads first, in this order: Rank (plan), Model, SeqLen (T), # GPUs, GPU, the layout (Sharding
// Strategy and the parallel degrees), MicroBatchSize, Activation Checkpointing, Throughput
// (T/s/GPU) (plan: Throughput (T/s)), MFU, Memory (GiB), Fits, then plan's time and cost and
// validate's error. Left out unless asked: the other prediction columns (HFU, Model TFLOP, batch
// sizes, precision, the interval, the step-time breakdown), which a single predict lists.
const TerminalLayout& terminal_layout();

// Tensor Parallel, Pipeline Parallel, Virtual Stages, Context Parallel, Expert Parallel, Data
// Parallel, Expert Tensor Parallel and the pipeline split (First/Last Stage Layers, Account For
// Embedding/Loss): the layout of a configuration. Shown when --framework is given (a composer run without
// it prints as before issue 15: its degrees are all 1), after every other column, so that the
// columns of llm-foundry and tpsim keep their places.
const std::vector<std::string>& layout_columns();
void add_layout_cells(const TrainConfig& cfg, std::vector<Cell>& row);
// The columns that follow every other where they apply (the measured-table reader reads them back):
// `Megatron FSDP` (the strategy) under a framework that has it, searched by sweep and plan and so
// shown whether or not it was asked; `LoRA Rank` and `LoRA Targets` (Megatron-Core's names when
// fused, else PEFT's, separated by ';') when adapters are trained; `Recompute Modules` (Megatron-Core's
// names separated by ';', empty without selective recompute) when --recompute-modules is given;
// `MTP Layers` and `MTP Repeated Layer` when --mtp-layers is; `BF16 Layers At Start` and `BF16
// Layers At End` when either count is given.
bool owns_megatron_fsdp(Framework f);
struct OptionalColumns {
  bool megatron_fsdp = false, lora = false, recompute_modules = false, mtp = false, moe_dispatcher = false,
       cuda_graphs = false, bf16_layers = false;
};
void add_optional_columns(const OptionalColumns& o, std::vector<std::string>& columns);
void add_optional_cells(const OptionalColumns& o, const TrainConfig& cfg, std::vector<Cell>& row);
// The layout in a few words, for notes and labels: "tp 2, pp 4, vp 2, sp, dist-opt" (the degrees
// above 1 and the switches on); "" for data parallelism alone.
std::string layout_phrase(const Layout& p);
// FSDP's strategy, with its HSDP mesh when it has one: "HYBRID_SHARD (shard 32 x replicate 16)"
// (the Sharding Strategy cell of predict, sweep and plan).
std::string sharding_text(const Layout& p);

// A configuration that does not fit gets its memory columns and empty throughput columns.
std::vector<Cell> prediction_row(const std::string& model, const std::string& device, const TrainConfig& cfg,
                                 const Prediction& p, const std::optional<RelativeInterval>& interval);

// The profile's interval for `model` trained under `cfg`: its held-out errors, widened by how far
// the configuration lies beyond the rows the profile was fitted to (model/interval.hpp). Those errors
// were measured on MPT models (the measured tables), so a model of another architecture gets none
// (empty Low and High) rather than a borrowed one; docs/accuracy.md quotes how far published runs
// of those architectures are from tpsim. Nor does a run of another framework than Composer's, whose
// errors the profiles have not measured.
std::optional<RelativeInterval> interval_for(const ModelConfig& model, const DeviceProfile& profile,
                                             const TrainConfig& cfg);
// The profile's interval model for `model` under `framework` (none as for interval_for).
std::optional<IntervalModel> interval_model_for(const ModelConfig& model, const DeviceProfile& profile,
                                                Framework framework);
// The one-line note saying so, printed once per such model ("" for an MPT model under Composer).
std::string no_interval_note(const ModelConfig& model, Framework framework);
// The one-line note naming the model's GEMM widths that are not a multiple of 8 (unaligned_gemm_widths,
// model/architecture.hpp: slower kernels than tpsim costs), "" when there are none; Megatron pads the
// vocabulary, the other frameworks keep the model's.
std::string unaligned_gemm_note(const ModelConfig& model, Framework framework);
// The note (without "tpsim: note: ") for a fitting configuration with full checkpointing and little
// memory free (checkpointed_near_full, model/plan.hpp): the share of its step the allocator's retries
// take, and what that rests on.
std::string near_full_note(const Prediction& p);
// The same for several (a sweep's rows, named as "13b at 4096 on 8 x h100_80gb"): how many, the first three.
std::string near_full_rows_note(const std::vector<std::string>& rows);

// The measured value expected for a prediction: [predicted / (1 + p90), predicted / (1 + p10)].
double interval_low(double predicted, const RelativeInterval& i);
double interval_high(double predicted, const RelativeInterval& i);

}  // namespace tpsim
