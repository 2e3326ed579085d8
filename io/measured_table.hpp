// llm-foundry result tables (results.md and results.csv, as scripts/train/benchmarking/
// collect_results.py writes them): measured throughput of training configurations.
//
// Columns are found by their header names; columns the simulator does not use are kept (for
// echoing) but ignored. Throughput comes from `Throughput (T/s)`: `Throughput (S/s)` is rounded
// down to an integer by llm-foundry and can be 0. A row with one cell more than its header is
// repaired when the header lacks `Model TFLOP` (seed 001's A100 40GB table), with a warning; any
// other mismatch is an error naming the line. `Activation Checkpointing` is llm-foundry's boolean
// (True, False; also 1/0, yes/no) or tpsim's kind (none, selective, full), in any case.
//
// The general form adds the columns of runs beyond data parallelism (each optional; absent: 1,
// False or the default): `Framework` (composer, megatron, torchtitan; absent: the command's
// --framework), `Tensor Parallel`, `Pipeline Parallel`, `Virtual Stages`, `Context Parallel`,
// `Expert Parallel`, `Expert Tensor Parallel` (absent: the tensor-parallel degree, Megatron-Core's
// default), `Data Parallel` (checked against # GPUs over the model-parallel degrees),
// `First Stage Layers` and `Last Stage Layers` (--decoder-first/last-pipeline-num-layers; empty or 0: not fixed),
// `Megatron FSDP` (Megatron-FSDP's strategy, --megatron-fsdp; empty or off: none),
// `LoRA Rank` and `LoRA Targets` (a fine-tuning run: --lora-rank and --lora-targets, the names separated by ';';
// rank empty or 0: every weight trained),
// `Sequence Parallel`, `Distributed Optimizer`, `Overlap Grad Reduce`, `Grad Reduce In BF16`
// (Megatron-LM's --grad-reduce-in-bf16), `FP8 Param Gather` (--fp8-param-gather), `Pipeline Scatter Gather` (legacy
// Megatron-LM's
// --scatter-gather-tensors-in-pipeline), `TP Comm Overlap` (Megatron-Core's --tp-comm-overlap), `MoE A2A Overlap`
// (its --overlap-moe-expert-parallel-comm, Megatron-Bridge's moe_a2a_overlap), `Account For Embedding` and `Account For
// Loss` (its
// --account-for-embedding/loss-in-pipeline-split: an uneven pipeline split) (True/False), `Attention` (flash, or
// unfused: Megatron-LM's core attention, run without --use-flash-attn as every Megatron run before
// 2023 was; see use_megatron_core_attention), `Recompute`
// (none/selective/full: the same as `Activation Checkpointing`, one of which is required; both
// present and disagreeing is an error), `Recompute Modules` (Megatron-Core's recompute modules of a
// selective row, separated by ';'; empty: core_attn, its default), `MTP Layers` and `MTP Repeated
// Layer` (multi-token prediction: --mtp-layers, --mtp-repeated-layer), `Pipeline Layout`
// (--pipeline-layout), `MoE Dispatcher` (--moe-dispatcher: alltoall, flex:deepep, flex:hybridep), and
// `Optimizer` (adam, adamw, or "adam (bf16 moments)": --bf16-adam-moments, as the `BF16 Adam Moments`
// column), `CUDA Graphs` (--cuda-graphs: transformer_engine:attn,moe_router, local:layer,
// full_iteration, ...), `MoE Capacity Factor` (--moe-capacity-factor: token dropping; `Token Drop`
// True needs it), `BF16 Layers At Start` and `BF16 Layers At End` (--bf16-layers-at-start, -end:
// layers left out of an fp8 or fp4 recipe), `MoE Paged Stash` (--moe-paged-stash: the stash
// buffer's factor), and `Token Drop` and `Other Features` (what the run had that
// tpsim does not model yet: a row with one of them set, or with an optimizer, dispatcher or CUDA
// graph value other than these, is refused, MeasuredRow::unmodelled),
// and `Step Time (s)`, the measured quantity of a row whose
// `Throughput (T/s)` is absent or empty. A table with one of these columns may leave out `GPU`
// when the command names the device (--device); llm-foundry's tables always have it. `MP Mode` and `Sharding Strategy`
// are required of composer rows only: megatron rows are DDP (NO_SHARD, with or without the distributed optimizer),
// torchtitan rows FSDP2 (FULL_SHARD).
//
// vTrain's CSVs (VIA-Research/vTrain, data/ground_truth_single.csv and ground_truth_multi.csv) are
// recognised by their column `iteration time (ms)` and read as they are: each row defines its own
// GPT model (vtrain_gpt_model); the multi-node table's `Parameters (billion)` must be that model's
// count to the digits written, else the row is an error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/output.hpp"
#include "model/architecture.hpp"
#include "model/training.hpp"

namespace tpsim {

struct MeasuredRow {
  std::string origin;  // file
  int line = 0;        // 1-based line in that file
  std::string model;
  int64_t seq_len = 0;
  int64_t n_gpus = 0;
  std::string gpu;
  int64_t micro_batch = 0;
  int64_t grad_accum = 0;  // 0 when the table has no GradAccum column
  int64_t global_batch = 0;
  double tokens_per_s = 0;     // measured; or global batch x sequence / measured_step_s when step time was measured
  double measured_step_s = 0;  // > 0: the row measured step time (Step Time (s), vTrain's iteration time)
  Precision precision = Precision::kAmpBf16;
  MpMode mp_mode = MpMode::kDefault;
  bool activation_cpu_offload = false;
  // What the row ran that tpsim does not model yet (its `MoE
  // Dispatcher`, `CUDA Graphs`, `Token Drop`, `Optimizer` or `Other Features` set): validate refuses
  // it with this; empty: nothing.
  std::string unmodelled;
  bool unfused_attention = false;  // Attention 'unfused': the row's model costed with use_megatron_core_attention
  Layout layout;  // framework, sharding, checkpointing, degrees (all 1 under composer for llm-foundry's tables)
  Lora lora;      // LoRA Rank, LoRA Targets: rank 0 when absent
  // The row's own architecture (vTrain's rows), named `model`; empty: `model` names a model of the
  // catalogue or --models.
  std::optional<ModelConfig> architecture;
  double mfu_percent = -1;  // < 0 when absent
  double hfu_percent = -1;
  double model_tflop = -1;                                 // the table's Model TFLOP cell as written
  int64_t num_params = -1;                                 // < 0 when absent
  std::vector<std::pair<std::string, std::string>> cells;  // (column, cell) as written, in table order

  std::string where() const { return origin + ":" + std::to_string(line); }
  bool step_time_measured() const { return measured_step_s > 0; }

  // The configuration the row measured.
  TrainConfig config() const {
    return {.seq_len = seq_len,
            .global_batch = global_batch,
            .micro_batch = micro_batch,
            .n_gpus = n_gpus,
            .precision = precision,
            .mp_mode = mp_mode,
            .layout = layout,
            .lora = lora};
  }
};

struct MeasuredTable {
  std::string origin;
  std::vector<std::string> header;  // of the first table in the file, after any repair
  std::vector<MeasuredRow> rows;
  std::vector<std::string> warnings;
};

// What the command says of rows whose table leaves it out.
struct MeasuredTableOptions {
  Framework framework = kDefaultFramework;  // rows of a table without a Framework column (--framework)
  std::string device;  // the GPU of rows of a table without a GPU column (--device); empty: such a table is an Error
};

MeasuredTable parse_measured_table(const std::string& text, const std::string& origin,
                                   const MeasuredTableOptions& options = {});
MeasuredTable read_measured_table(const std::filesystem::path& path, const MeasuredTableOptions& options = {});

// The `Activation Checkpointing` cell of a row tpsim prints, and reads back: llm-foundry's boolean
// (True / False) for full and none, as its collect_results.py writes them, and `selective`, which
// llm-foundry cannot run and has no spelling for.
Cell checkpointing_cell(Checkpointing c);

}  // namespace tpsim
