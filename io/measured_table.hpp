// llm-foundry result tables (results.md and results.csv, as scripts/train/benchmarking/
// collect_results.py writes them): measured throughput of training configurations.
//
// Columns are found by their header names; columns the simulator does not use are kept (for
// echoing) but ignored. Throughput comes from `Throughput (T/s)`: `Throughput (S/s)` is rounded
// down to an integer by llm-foundry and can be 0. A row with one cell more than its header is
// repaired when the header lacks `Model TFLOP` (seed 001's A100 40GB table), with a warning; any
// other mismatch is an error naming the line. `Activation Checkpointing` is llm-foundry's boolean
// (True, False; also 1/0, yes/no) or tpsim's kind (none, selective, full), in any case.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "io/output.hpp"
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
  double tokens_per_s = 0;
  Precision precision = Precision::kAmpBf16;
  MpMode mp_mode = MpMode::kDefault;
  Sharding sharding = Sharding::kFullShard;
  Checkpointing checkpointing = Checkpointing::kNone;
  bool activation_cpu_offload = false;
  double mfu_percent = -1;    // < 0 when absent
  double hfu_percent = -1;
  double model_tflop = -1;    // the table's Model TFLOP cell as written
  int64_t num_params = -1;    // < 0 when absent
  std::vector<std::pair<std::string, std::string>> cells;  // (column, cell) as written, in table order

  std::string where() const { return origin + ":" + std::to_string(line); }

  // The configuration the row measured.
  TrainConfig config() const {
    return {.seq_len = seq_len, .global_batch = global_batch, .micro_batch = micro_batch, .n_gpus = n_gpus,
            .precision = precision, .mp_mode = mp_mode, .sharding = sharding,
            .checkpointing = checkpointing};
  }
};

struct MeasuredTable {
  std::string origin;
  std::vector<std::string> header;  // of the first table in the file, after any repair
  std::vector<MeasuredRow> rows;
  std::vector<std::string> warnings;
};

MeasuredTable parse_measured_table(const std::string& text, const std::string& origin);
MeasuredTable read_measured_table(const std::filesystem::path& path);

// The `Activation Checkpointing` cell of a row tpsim prints, and reads back: llm-foundry's boolean
// (True / False) for full and none, as its collect_results.py writes them, and `selective`, which
// llm-foundry cannot run and has no spelling for.
Cell checkpointing_cell(Checkpointing c);

}  // namespace tpsim
