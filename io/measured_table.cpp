#include "io/measured_table.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "io/error.hpp"
#include "io/files.hpp"
#include "io/text_format.hpp"
#include "model/framework.hpp"
#include "model/layout.hpp"
#include "model/model_parallel.hpp"
#include "model/rules.hpp"

namespace tpsim {
namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string cur;
  for (char c : text) {
    if (c == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

// "| a | b |" -> {"a", "b"}
std::vector<std::string> md_cells(const std::string& line) {
  std::string s = trim(line);
  if (!s.empty() && s.front() == '|') s.erase(0, 1);
  if (!s.empty() && s.back() == '|') s.pop_back();
  std::vector<std::string> cells;
  std::string cur;
  for (char c : s) {
    if (c == '|') {
      cells.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  cells.push_back(trim(cur));
  return cells;
}

bool is_md_separator(const std::vector<std::string>& cells) {
  if (cells.empty()) return false;
  for (const auto& c : cells) {
    if (c.empty()) return false;
    for (char ch : c)
      if (ch != '-' && ch != ':') return false;
  }
  return true;
}

// RFC 4180 fields of one CSV record (no embedded newlines: llm-foundry's values have none).
std::vector<std::string> csv_cells(const std::string& line, const std::string& where) {
  std::vector<std::string> cells;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.push_back(trim(cur));
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  if (quoted) throw Error(where + ": unterminated quoted field");
  cells.push_back(trim(cur));
  return cells;
}

// A header's columns by name, and the cells of a row read as values, each error naming the row's
// file:line and the column.
class Columns {
 public:
  Columns(const std::vector<std::string>& header, const std::string& origin, int header_line)
      : origin_(origin), header_(header), header_at_(origin + ":" + std::to_string(header_line)) {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i].empty()) continue;
      if (!index_.emplace(header[i], i).second)
        throw Error(header_at_ + ": column '" + header[i] + "' appears twice in the header");
    }
  }

  bool has(const std::string& col) const { return index_.count(col) > 0; }
  const std::string& origin() const { return origin_; }
  const std::string& header_at() const { return header_at_; }
  void require(const std::string& col, const std::string& or_else = "") const {
    if (!has(col)) throw Error(header_at_ + ": required column '" + col + "' is missing" + or_else);
  }

  // The row's (column, cell) pairs as written, and where it is.
  MeasuredRow start_row(const std::vector<std::string>& cells, int line) const {
    MeasuredRow r;
    r.origin = origin_;
    r.line = line;
    for (size_t i = 0; i < header_.size() && i < cells.size(); ++i) r.cells.emplace_back(header_[i], cells[i]);
    return r;
  }

  const std::string& cell(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    const size_t i = index_.at(col);
    if (i >= cells.size()) throw Error(at + ": no cell for column '" + col + "'");
    return cells[i];
  }

  // A cell given (the column present and the cell not empty).
  bool given(const std::vector<std::string>& cells, const std::string& col) const {
    const auto it = index_.find(col);
    return it != index_.end() && it->second < cells.size() && !cells[it->second].empty();
  }

  std::string text(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    const std::string& s = cell(cells, col, at);
    if (s.empty()) throw Error(at + ": column '" + col + "' is empty");
    return s;
  }

  double number(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    const std::string s = text(cells, col, at);
    const std::optional<double> v = parse_number(s);
    if (!v) throw Error(at + ": column '" + col + "' must be a number, got '" + s + "'");
    if (!std::isfinite(*v)) throw Error(at + ": column '" + col + "' must be finite, got '" + s + "'");
    if (*v < 0) throw Error(at + ": column '" + col + "' must not be negative, got '" + s + "'");
    return *v;
  }

  int64_t positive_int(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    const std::string s = text(cells, col, at);
    const std::optional<int64_t> v = parse_integer(s);
    if (!v) throw Error(at + ": column '" + col + "' must be a whole number, got '" + s + "'");
    if (*v <= 0) throw Error(at + ": column '" + col + "' must be positive, got '" + s + "'");
    return *v;
  }

  // A parallel degree, at most the largest GPU count (so that products of degrees stay exact).
  int64_t degree(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    const int64_t d = positive_int(cells, col, at);
    if (d > kMaxGpus) throw Error(at + ": column '" + col + "' must be at most " + std::to_string(kMaxGpus));
    return d;
  }
  // An optional degree: 1 when the column is absent.
  int64_t optional_degree(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    return has(col) ? degree(cells, col, at) : 1;
  }

  bool boolean(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    std::string s = text(cells, col, at);
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    if (s == "true" || s == "1" || s == "yes") return true;
    if (s == "false" || s == "0" || s == "no") return false;
    throw Error(at + ": column '" + col + "' must be True or False, got '" + cell(cells, col, at) + "'");
  }

  // llm-foundry writes a boolean (True: each block checkpointed whole); tpsim's own rows and the
  // Recompute column may say which kind.
  Checkpointing checkpointing(const std::vector<std::string>& cells, const std::string& col,
                              const std::string& at) const {
    std::string s = text(cells, col, at);
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    if (s == "true" || s == "1" || s == "yes") return Checkpointing::kFull;
    if (s == "false" || s == "0" || s == "no") return Checkpointing::kNone;
    if (const auto c = parse_checkpointing(s)) return *c;
    throw Error(at + ": column '" + col + "' must be True or False (or none, selective or full), got '" +
                cell(cells, col, at) + "'");
  }

 private:
  std::string origin_;
  std::vector<std::string> header_;
  std::string header_at_;
  std::map<std::string, size_t> index_;
};

const char* const kRequired[] = {"Model",
                                 "SeqLen (T)",
                                 "# GPUs",
                                 "GPU",
                                 "MicroBatchSize",
                                 "GlobalBatchSize",
                                 "Throughput (T/s)",
                                 "Precision",
                                 "MP Mode",
                                 "Sharding Strategy",
                                 "Activation Checkpointing"};

// The general form's own columns: llm-foundry's tables have none of them.
const char* const kGeneralColumns[] = {"Framework",
                                       "Tensor Parallel",
                                       "Pipeline Parallel",
                                       "Virtual Stages",
                                       "Context Parallel",
                                       "Expert Parallel",
                                       "Data Parallel",
                                       "Sequence Parallel",
                                       "Recompute",
                                       "Step Time (s)",
                                       "Distributed Optimizer",
                                       "Overlap Grad Reduce",
                                       "Attention",
                                       "TP Comm Overlap",
                                       "Account For Embedding",
                                       "Account For Loss",
                                       "Expert Tensor Parallel",
                                       "Grad Reduce In BF16",
                                       "FP8 Param Gather",
                                       "Pipeline Scatter Gather",
                                       "MoE A2A Overlap",
                                       "First Stage Layers",
                                       "Last Stage Layers",
                                       "LoRA Rank",
                                       "LoRA Targets",
                                       "Megatron FSDP",
                                       "Recompute Modules",
                                       "MTP Layers",
                                       "MTP Repeated Layer",
                                       "Pipeline Layout",
                                       "MoE Dispatcher",
                                       "CUDA Graphs",
                                       "Token Drop",
                                       "MoE Capacity Factor",
                                       "MoE Paged Stash",
                                       "BF16 Layers At Start",
                                       "BF16 Layers At End",
                                       "Optimizer",
                                       "Other Features"};

// The Optimizer column's name for Megatron-Core's precision-aware Adam with bf16 moments.
constexpr std::string_view kBf16MomentsOptimizer = "adam (bf16 moments)";

// llm-foundry's columns and the general form's (see the header).
class RowParser {
 public:
  RowParser(const std::vector<std::string>& header, const std::string& origin, int header_line,
            const MeasuredTableOptions& options)
      : cols_(header, origin, header_line), options_(options) {
    // llm-foundry's collect_results.py always writes GPU: only a table in the general form (with
    // one of its own columns) may leave it to --device.
    const bool general = std::any_of(std::begin(kGeneralColumns), std::end(kGeneralColumns),
                                     [&](const char* c) { return cols_.has(c); });
    // In llm-foundry's order, so that a table that is not one names its first column missing.
    for (const char* r : kRequired) {
      const std::string col = r;
      if (col == "GPU" && general && !options.device.empty()) continue;
      if (col == "Throughput (T/s)" && cols_.has("Step Time (s)")) continue;
      if (col == "Activation Checkpointing" && cols_.has("Recompute")) continue;
      // Of composer rows only, which a table without a Framework column has under --framework composer.
      if ((col == "MP Mode" || col == "Sharding Strategy") &&
          (cols_.has("Framework") || !framework_def(options.framework).sharding_strategies))
        continue;
      cols_.require(col, col == "GPU"                        ? " (a table in the general form may leave it to --device)"
                         : col == "Throughput (T/s)"         ? " (or give 'Step Time (s)')"
                         : col == "Activation Checkpointing" ? " (or give 'Recompute')"
                                                             : "");
    }
  }

  MeasuredRow parse(const std::vector<std::string>& cells, int line) const {
    MeasuredRow r = cols_.start_row(cells, line);
    const std::string at = r.where();
    r.model = cols_.text(cells, "Model", at);
    r.seq_len = cols_.positive_int(cells, "SeqLen (T)", at);
    r.n_gpus = cols_.positive_int(cells, "# GPUs", at);
    r.gpu = cols_.has("GPU") ? cols_.text(cells, "GPU", at) : options_.device;
    r.micro_batch = cols_.positive_int(cells, "MicroBatchSize", at);
    r.global_batch = cols_.positive_int(cells, "GlobalBatchSize", at);
    if (cols_.has("GradAccum")) r.grad_accum = cols_.positive_int(cells, "GradAccum", at);
    read_measured(cells, at, r);
    const std::string prec = cols_.text(cells, "Precision", at);
    const auto p = parse_precision(prec);
    if (!p) throw Error(at + ": unknown Precision '" + prec + "' (amp_bf16, amp_fp16, amp_fp8, bf16, fp32)");
    r.precision = *p;
    read_parallel(cells, at, r);
    read_sharding(cells, at, r);
    r.layout.checkpointing = read_checkpointing(cells, at);
    if (cols_.has("Recompute Modules")) {
      // Megatron-Core's names (';', ',' or spaces between); empty: its default, core_attn. The rules
      // (recompute-modules-apply) check them against the row's recompute and model.
      const std::string t = cols_.cell(cells, "Recompute Modules", at);
      if (!t.empty()) {
        std::string error;
        const std::optional<uint8_t> m = parse_recompute_modules(t, error);
        if (!m) throw Error(at + ": column 'Recompute Modules' '" + t + "': " + error);
        r.layout.recompute_modules = *m;
      }
    }
    if (cols_.has("Activation CPUOffload"))
      r.activation_cpu_offload = cols_.boolean(cells, "Activation CPUOffload", at);
    if (cols_.has("Attention")) r.unfused_attention = read_attention(cells, at);
    read_lora(cells, at, r);
    read_unmodelled(cells, at, r);
    if (cols_.given(cells, "MTP Layers")) {  // multi-token prediction's depths (Layout::mtp_layers)
      const std::string t = cols_.cell(cells, "MTP Layers", at);
      const std::optional<int64_t> n = parse_integer(t);
      if (!n || *n < 0 || *n > 64)
        throw Error(at + ": column 'MTP Layers' must be a whole number in 0..64, got '" + t + "'");
      r.layout.mtp_layers = *n;
    }
    if (cols_.given(cells, "Pipeline Layout")) {  // Megatron-Core's pipeline_model_parallel_layout
      const std::string t = cols_.cell(cells, "Pipeline Layout", at);
      std::string error;
      const std::optional<uint16_t> id = parse_pipeline_layout(t, error);
      if (!id) throw Error(at + ": column 'Pipeline Layout' '" + t + "': " + error);
      r.layout.pipeline_layout = *id;
    }
    if (cols_.given(cells, "MoE Dispatcher")) {  // Layout::moe_dispatcher; others are refused (read_unmodelled)
      std::string t = cols_.cell(cells, "MoE Dispatcher", at);
      std::transform(t.begin(), t.end(), t.begin(), ::tolower);
      if (const std::optional<MoeDispatcher> m = parse_moe_dispatcher(t)) r.layout.moe_dispatcher = *m;
    }
    if (cols_.given(cells, "MoE Capacity Factor")) {  // token dropping's (Layout::moe_capacity_factor)
      const double cf = cols_.number(cells, "MoE Capacity Factor", at);
      if (!(cf > 0) || cf > 64)
        throw Error(at + ": column 'MoE Capacity Factor' must be in (0, 64], got '" +
                    cols_.cell(cells, "MoE Capacity Factor", at) + "'");
      r.layout.moe_capacity_factor = cf;
    }
    if (cols_.given(cells, "MoE Paged Stash")) {  // the paged stash's buffer factor (Layout::moe_paged_stash)
      const double f = cols_.number(cells, "MoE Paged Stash", at);
      if (!(f >= 1.0) || f > 4.0)
        throw Error(at + ": column 'MoE Paged Stash' must be in [1, 4] (the buffer's factor), got '" +
                    cols_.cell(cells, "MoE Paged Stash", at) + "'");
      r.layout.moe_paged_stash = f;
    }
    // The first and last layers left out of an fp8 or fp4 recipe (Layout::bf16_layers_start, _end).
    for (const auto& [column, field] : {std::pair{"BF16 Layers At Start", &Layout::bf16_layers_start},
                                        std::pair{"BF16 Layers At End", &Layout::bf16_layers_end}}) {
      if (!cols_.given(cells, column)) continue;
      const std::string t = cols_.cell(cells, column, at);
      const std::optional<int64_t> n = parse_integer(t);
      if (!n || *n < 0 || *n > (1 << 16))
        throw Error(at + ": column '" + column + "' must be a whole number in 0..65536, got '" + t + "'");
      r.layout.*field = *n;
    }
    if (cols_.given(cells, "CUDA Graphs")) {  // Layout::cuda_graphs; a value it cannot read is refused
      std::string t = cols_.cell(cells, "CUDA Graphs", at), error;
      std::transform(t.begin(), t.end(), t.begin(), ::tolower);
      if (const std::optional<uint8_t> m = parse_cuda_graphs(t, error)) r.layout.cuda_graphs = *m;
    }
    if (cols_.given(cells, "Optimizer")) {  // Adam with bf16 moments: Layout::bf16_moments; others refused
      std::string t = cols_.cell(cells, "Optimizer", at);
      std::transform(t.begin(), t.end(), t.begin(), ::tolower);
      if (t == kBf16MomentsOptimizer) r.layout.bf16_moments = true;
    }
    if (cols_.given(cells, "MTP Repeated Layer"))
      r.layout.mtp_repeated_layer = cols_.boolean(cells, "MTP Repeated Layer", at);
    if (cols_.has("MFU")) r.mfu_percent = cols_.number(cells, "MFU", at);
    if (cols_.has("HFU")) r.hfu_percent = cols_.number(cells, "HFU", at);
    if (cols_.has("Model TFLOP")) r.model_tflop = cols_.number(cells, "Model TFLOP", at);
    if (cols_.has("NumParams")) r.num_params = cols_.positive_int(cells, "NumParams", at);
    return r;
  }

 private:
  // Throughput when given, else step time (tokens/s derived from it).
  void read_measured(const std::vector<std::string>& cells, const std::string& at, MeasuredRow& r) const {
    if (!cols_.has("Step Time (s)") || cols_.given(cells, "Throughput (T/s)")) {
      r.tokens_per_s = cols_.number(cells, "Throughput (T/s)", at);
      if (!(r.tokens_per_s > 0)) throw Error(at + ": 'Throughput (T/s)' must be positive");
      return;
    }
    if (!cols_.given(cells, "Step Time (s)"))
      throw Error(at + ": neither 'Throughput (T/s)' nor 'Step Time (s)' is given");
    r.measured_step_s = cols_.number(cells, "Step Time (s)", at);
    if (!(r.measured_step_s > 0)) throw Error(at + ": 'Step Time (s)' must be positive");
    r.tokens_per_s = static_cast<double>(r.global_batch) * static_cast<double>(r.seq_len) / r.measured_step_s;
  }

  void read_parallel(const std::vector<std::string>& cells, const std::string& at, MeasuredRow& r) const {
    Layout& par = r.layout;
    par.framework = options_.framework;
    if (cols_.has("Framework")) {
      std::string f = cols_.text(cells, "Framework", at);
      std::transform(f.begin(), f.end(), f.begin(), ::tolower);
      const auto fw = parse_framework(f);
      if (!fw)
        throw Error(at + ": unknown Framework '" + cols_.cell(cells, "Framework", at) +
                    "' (composer, megatron, torchtitan)");
      par.framework = *fw;
    }
    for (const DegreeAxis& a : kDegreeAxes)
      par.*a.value = cols_.optional_degree(cells, std::string(a.names.column), at);
    // Megatron-Core's expert_tensor_parallel_size; equal to tp, its default, it is the default.
    const std::string etp(kExpertTensorAxis.column);
    if (cols_.has(etp)) par.set_expert_tensor(cols_.degree(cells, etp, at));
    for (const auto& [axis, value] : {std::pair{kSequenceParallelAxis, &Layout::sequence_parallel},
                                      std::pair{kDistributedOptimizerAxis, &Layout::distributed_optimizer}})
      if (const std::string column(axis.column); cols_.has(column)) par.*value = cols_.boolean(cells, column, at);
    for (const SwitchAxis& a : kSwitchAxes)
      if (const std::string column(a.names.column); !column.empty() && cols_.has(column))
        par.*a.value = cols_.boolean(cells, column, at);
    // Megatron-FSDP's strategy (empty or off: none): the distributed optimizer and overlapped gradient
    // reduction as it sets them, unless the row's own columns say otherwise (megatron-fsdp-modelled).
    if (const std::string column(kMegatronFsdpAxis.column); cols_.has(column)) {
      const std::string t = cols_.cell(cells, column, at);
      const auto m = parse_megatron_fsdp(t.empty() ? "off" : t);
      if (!m)
        throw Error(at + ": column '" + column +
                    "' must be off, no_shard, optim, optim_grads or optim_grads_params, got '" + t + "'");
      const bool dist_opt = par.distributed_optimizer;
      set_megatron_fsdp(par, *m);
      if (cols_.has(std::string(kDistributedOptimizerAxis.column))) par.distributed_optimizer = dist_opt;
    }
    // Megatron-Core's fixed first and last stages; empty or 0: not fixed.
    for (const StageLayersAxis& a : kStageLayersAxes)
      if (const std::string column(a.names.column); cols_.has(column)) {
        const std::string& t = cols_.cell(cells, column, at);
        if (!t.empty() && t != "0") par.*a.value = cols_.degree(cells, column, at);
      }
    const int64_t model_parallel = par.model_parallel();
    TrainConfig row;  // the rule on the degrees alone: the model and batches are checked with the prediction
    row.n_gpus = r.n_gpus;
    row.layout = par;
    if (std::string why = kDegreesDivideGpus.broken({.cfg = row}); !why.empty()) throw Error(at + ": " + why);
    if (cols_.has("Data Parallel")) {
      const int64_t dp = cols_.positive_int(cells, "Data Parallel", at);
      if (dp != r.n_gpus / model_parallel)
        throw Error(at + ": column 'Data Parallel' is " + std::to_string(dp) + " but # GPUs " +
                    std::to_string(r.n_gpus) + " over tensor x context x pipeline parallel " +
                    std::to_string(model_parallel) + " is " + std::to_string(r.n_gpus / model_parallel));
    }
  }

  // composer rows: FSDP's strategy and mixed precision as written (required). Megatron's data
  // parallelism is DDP: every replica holds its whole shard (NO_SHARD), the distributed optimizer
  // aside; torchtitan's is FSDP2 (FULL_SHARD).
  void read_sharding(const std::vector<std::string>& cells, const std::string& at, MeasuredRow& r) const {
    const bool composer = framework_def(r.layout.framework).sharding_strategies;
    if (!composer && r.layout.megatron_fsdp == MegatronFsdp::kOff)
      r.layout.sharding = framework_sharding(r.layout.framework);
    for (const char* col : {"MP Mode", "Sharding Strategy"})
      if (composer && !cols_.has(col)) throw Error(at + ": a composer row needs the column '" + std::string(col) + "'");
    if (cols_.has("MP Mode")) {
      const std::string mp = cols_.text(cells, "MP Mode", at);
      const auto m = parse_mp_mode(mp);
      if (!m) throw Error(at + ": unknown MP Mode '" + mp + "' (DEFAULT, PURE, FULL)");
      r.mp_mode = *m;
    }
    if (cols_.has("Sharding Strategy")) {
      const std::string sh = cols_.text(cells, "Sharding Strategy", at);
      const auto s = parse_sharding(sh);
      if (!s)
        throw Error(at + ": unknown Sharding Strategy '" + sh +
                    "' (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD)");
      r.layout.sharding = *s;
    }
  }

  // LoRA Rank (empty or 0: none) and LoRA Targets (names separated by ';', required with a rank).
  // What a row ran that tpsim does not model yet, from the columns that say so (set: not empty, 0,
  // False, none or a dispatcher tpsim models): the row is refused with it
  // (MeasuredRow::unmodelled), never predicted as a run without it.
  void read_unmodelled(const std::vector<std::string>& cells, const std::string& at, MeasuredRow& r) const {
    const auto lower = [&](const char* col) {
      std::string s = cols_.given(cells, col) ? cols_.cell(cells, col, at) : std::string();
      std::transform(s.begin(), s.end(), s.begin(), ::tolower);
      return s;
    };
    std::string why;
    if (const std::string dispatcher = lower("MoE Dispatcher");
        !dispatcher.empty() && !parse_moe_dispatcher(dispatcher))
      why = "the MoE dispatcher '" + cols_.cell(cells, "MoE Dispatcher", at) +
            "' is not modelled (tpsim costs alltoall, flex:deepep and flex:hybridep)";
    if (std::string graphs = lower("CUDA Graphs"), error;
        why.empty() && !graphs.empty() && !parse_cuda_graphs(graphs, error))
      why = "CUDA graphs '" + cols_.cell(cells, "CUDA Graphs", at) + "': " + error;
    if (why.empty() && cols_.given(cells, "Token Drop") && cols_.boolean(cells, "Token Drop", at) &&
        !cols_.given(cells, "MoE Capacity Factor"))
      why = "token dropping (Token Drop True) without its capacity (MoE Capacity Factor)";
    if (const std::string opt = lower("Optimizer");
        why.empty() && !opt.empty() && opt != "adam" && opt != "adamw" && opt != kBf16MomentsOptimizer)
      why = "the optimizer '" + cols_.cell(cells, "Optimizer", at) +
            "' is not modelled yet (tpsim costs AdamW, and Adam with bf16 moments)";
    if (why.empty() && cols_.given(cells, "Other Features"))
      why = cols_.cell(cells, "Other Features", at) + " (Other Features): not modelled yet";
    r.unmodelled = why;
  }

  void read_lora(const std::vector<std::string>& cells, const std::string& at, MeasuredRow& r) const {
    if (cols_.has("LoRA Targets") && !cols_.has("LoRA Rank"))
      throw Error(at + ": column 'LoRA Targets' without 'LoRA Rank'");
    if (!cols_.has("LoRA Rank")) return;
    const std::string& rank = cols_.cell(cells, "LoRA Rank", at);
    if (rank.empty() || rank == "0") return;
    r.lora.rank = cols_.positive_int(cells, "LoRA Rank", at);
    if (r.lora.rank > kMaxLoraRank)
      throw Error(at + ": 'LoRA Rank' " + rank + " is beyond " + std::to_string(kMaxLoraRank));
    if (!cols_.has("LoRA Targets") || cols_.cell(cells, "LoRA Targets", at).empty())
      throw Error(at + ": 'LoRA Rank' " + rank + " without 'LoRA Targets'");
    std::string names = cols_.cell(cells, "LoRA Targets", at);
    std::replace(names.begin(), names.end(), ';', ',');
    if (const std::string why = parse_lora_targets(names, r.lora); !why.empty())
      throw Error(at + ": 'LoRA Targets': " + why);
  }

  // flash (the default) or unfused (Megatron's core attention).
  bool read_attention(const std::vector<std::string>& cells, const std::string& at) const {
    std::string a = cols_.text(cells, "Attention", at);
    std::transform(a.begin(), a.end(), a.begin(), ::tolower);
    if (a == "flash" || a == "unfused") return a == "unfused";
    throw Error(at + ": column 'Attention' must be flash or unfused, got '" + cols_.cell(cells, "Attention", at) + "'");
  }

  Checkpointing read_checkpointing(const std::vector<std::string>& cells, const std::string& at) const {
    const bool ac = cols_.has("Activation Checkpointing"), rc = cols_.has("Recompute");
    const Checkpointing c = cols_.checkpointing(cells, ac ? "Activation Checkpointing" : "Recompute", at);
    if (ac && rc) {
      const Checkpointing other = cols_.checkpointing(cells, "Recompute", at);
      if (other != c)
        throw Error(at + ": 'Recompute' " + std::string(to_string(other)) +
                    " disagrees with 'Activation Checkpointing' " + std::string(to_string(c)));
    }
    return c;
  }

  Columns cols_;
  MeasuredTableOptions options_;
};

// vTrain's tables, as VIA-Research/vTrain's data/ground_truth_single.csv and ground_truth_multi.csv
// have them (the multi-node one also states each model's size, 'Parameters (billion)').
const char* const kVtrainColumns[] = {"# GPUs",
                                      "global batch",
                                      "micro batch",
                                      "hidden size",
                                      "attention heads",
                                      "# layers",
                                      "sequence length",
                                      "tensor parallelism",
                                      "data parallelism",
                                      "pipeline parallelism",
                                      "iteration time (ms)"};

bool is_vtrain_header(const std::vector<std::string>& header) {
  return std::find(header.begin(), header.end(), "iteration time (ms)") != header.end();
}

// What vTrain's repository states of its runs (config/validation/single/*.json and src/ at
// f8dda84): Megatron-DeepSpeed's GPT with "use_checkpoint": true (full recompute of each block),
// "pipeline_scheduling": "1f1b", "use_gradient_bucket": false (no DDP bucketing: the gradient
// all-reduce waits for the backward), no sequence parallelism and no distributed optimizer (neither
// is an option of vTrain's config). Precision: fp16 with fp32 master weights (amp_fp16): vTrain
// profiles its layers in fp16 (src/predictor.py: torch.set_default_dtype(torch.float16), 2-byte
// parameters and activations), as Megatron-DeepSpeed's --fp16 runs them.
class VtrainParser {
 public:
  VtrainParser(const std::vector<std::string>& header, const std::string& origin, int header_line,
               const MeasuredTableOptions& options)
      : cols_(header, origin, header_line), device_(options.device) {
    for (const char* c : kVtrainColumns) cols_.require(c, " (of vTrain's table)");
    if (device_.empty())
      throw Error(cols_.header_at() +
                  ": vTrain's table has no GPU column: pass --device to name the GPU (its runs were on A100s)");
  }

  MeasuredRow parse(const std::vector<std::string>& cells, int line) const {
    MeasuredRow r = cols_.start_row(cells, line);
    const std::string at = r.where();
    const auto get = [&](const char* col) { return cols_.positive_int(cells, col, at); };
    r.n_gpus = get("# GPUs");
    r.global_batch = get("global batch");
    r.micro_batch = get("micro batch");
    r.seq_len = get("sequence length");
    r.architecture = vtrain_gpt_model(get("hidden size"), get("attention heads"), get("# layers"));
    r.model = r.architecture->name;
    if (cols_.has(kVtrainParameters)) check_parameters(cells, at, *r.architecture, r.seq_len);
    r.gpu = device_;
    Layout& par = r.layout;
    par.framework = Framework::kMegatron;
    par.tensor = cols_.degree(cells, "tensor parallelism", at);
    par.pipeline = cols_.degree(cells, "pipeline parallelism", at);
    const int64_t dp = cols_.degree(cells, "data parallelism", at);
    if (r.n_gpus != par.tensor * par.pipeline * dp)
      throw Error(at + ": '# GPUs' " + std::to_string(r.n_gpus) + " is not tensor x pipeline x data parallelism " +
                  std::to_string(par.tensor) + " x " + std::to_string(par.pipeline) + " x " + std::to_string(dp));
    r.measured_step_s = cols_.number(cells, "iteration time (ms)", at) * 1e-3;
    if (!(r.measured_step_s > 0)) throw Error(at + ": 'iteration time (ms)' must be positive");
    r.tokens_per_s = static_cast<double>(r.global_batch) * static_cast<double>(r.seq_len) / r.measured_step_s;
    r.precision = Precision::kAmpFp16;
    par.pipeline_scatter_gather = true;      // Megatron-DeepSpeed's default (and DeepSpeed's pipeline engine's)
    r.layout.sharding = Sharding::kNoShard;  // DDP without the distributed optimizer
    r.layout.checkpointing = Checkpointing::kFull;
    return r;
  }

 private:
  static constexpr const char* kVtrainParameters = "Parameters (billion)";

  // The stated size must be the row's GPT model's to the digits written (3.6 is 3.55 to 3.65
  // billion): another count means another architecture than the one tpsim would cost.
  void check_parameters(const std::vector<std::string>& cells, const std::string& at, const ModelConfig& m,
                        int64_t seq_len) const {
    const std::string& written = cols_.text(cells, kVtrainParameters, at);
    const double stated = cols_.number(cells, kVtrainParameters, at);
    const size_t dot = written.find('.');
    const int decimals = dot == std::string::npos ? 0 : static_cast<int>(written.size() - dot - 1);
    const double half_unit = 0.5 * std::pow(10.0, -decimals);
    const double counted = static_cast<double>(parameter_count(m, seq_len)) * 1e-9;
    if (std::abs(counted - stated) > half_unit * (1 + 1e-9)) {
      std::ostringstream msg;
      msg.precision(4);
      msg << at << ": '" << kVtrainParameters << "' is " << written << " but the GPT model of this row's hidden size, "
          << "heads and layers (vocabulary 50257, sequence " << seq_len << ") has " << counted << " billion";
      throw Error(msg.str());
    }
  }

  Columns cols_;
  std::string device_;
};

// One header and the rows under it.
struct Section {
  std::vector<std::string> header;
  int header_line = 0;
  std::vector<std::pair<int, std::vector<std::string>>> rows;
};

// Repairs rows with one cell too many when the header lacks Model TFLOP (inserted after HFU),
// else rejects the row.
void align(Section& sec, const std::string& origin, std::vector<std::string>& warnings) {
  const auto has = [&](const char* c) {
    return std::find(sec.header.begin(), sec.header.end(), c) != sec.header.end();
  };
  bool repaired = false;
  for (auto& [line, cells] : sec.rows) {
    if (cells.size() == sec.header.size()) continue;
    const std::string at = origin + ":" + std::to_string(line);
    if (cells.size() == sec.header.size() + 1 && !has("Model TFLOP") && has("HFU")) {
      if (!repaired) {
        const auto hfu = std::find(sec.header.begin(), sec.header.end(), "HFU");
        sec.header.insert(hfu + 1, "Model TFLOP");
        repaired = true;
        warnings.push_back(origin + ":" + std::to_string(sec.header_line) + ": header has " +
                           std::to_string(sec.header.size() - 1) + " columns but rows have " +
                           std::to_string(cells.size()) + "; reading the missing 'Model TFLOP' column after 'HFU'");
      }
      continue;
    }
    throw Error(at + ": row has " + std::to_string(cells.size()) + " cells but the header has " +
                std::to_string(sec.header.size()) + " columns");
  }
  if (repaired)
    for (auto& [line, cells] : sec.rows)
      if (cells.size() + 1 == sec.header.size())
        throw Error(origin + ":" + std::to_string(line) + ": row has " + std::to_string(cells.size()) +
                    " cells, other rows of this table have " + std::to_string(sec.header.size()));
}

}  // namespace

MeasuredTable parse_measured_table(const std::string& text, const std::string& origin,
                                   const MeasuredTableOptions& options) {
  if (text.find('\0') != std::string::npos) throw Error(origin + ": binary content, expected a table");
  const std::vector<std::string> lines = split_lines(text);
  std::vector<Section> sections;
  bool markdown = false;
  for (const auto& l : lines)
    if (!trim(l).empty()) {
      markdown = trim(l).front() == '|';
      break;
    }

  if (markdown) {
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string t = trim(lines[i]);
      if (t.empty() || t.front() != '|') continue;
      const auto cells = md_cells(t);
      if (is_md_separator(cells)) continue;
      const bool is_header = i + 1 < lines.size() && !trim(lines[i + 1]).empty() && trim(lines[i + 1]).front() == '|' &&
                             is_md_separator(md_cells(trim(lines[i + 1])));
      if (is_header) {
        sections.push_back({cells, static_cast<int>(i + 1), {}});
      } else {
        if (sections.empty()) throw Error(origin + ":" + std::to_string(i + 1) + ": table row before any header");
        sections.back().rows.push_back({static_cast<int>(i + 1), cells});
      }
    }
  } else {
    Section sec;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (trim(lines[i]).empty()) continue;
      const std::string at = origin + ":" + std::to_string(i + 1);
      auto cells = csv_cells(lines[i], at);
      if (sec.header.empty()) {
        sec.header = cells;
        sec.header_line = static_cast<int>(i + 1);
      } else {
        sec.rows.push_back({static_cast<int>(i + 1), cells});
      }
    }
    if (!sec.header.empty()) sections.push_back(sec);
  }
  if (sections.empty()) throw Error(origin + ": no table found (expected an llm-foundry results.md or results.csv)");

  MeasuredTable table;
  table.origin = origin;
  for (auto& sec : sections) {
    align(sec, origin, table.warnings);
    if (is_vtrain_header(sec.header)) {
      const VtrainParser parser(sec.header, origin, sec.header_line, options);
      for (const auto& [line, cells] : sec.rows) table.rows.push_back(parser.parse(cells, line));
    } else {
      const RowParser parser(sec.header, origin, sec.header_line, options);
      for (const auto& [line, cells] : sec.rows) table.rows.push_back(parser.parse(cells, line));
    }
    if (table.header.empty()) table.header = sec.header;
  }
  if (table.rows.empty()) throw Error(origin + ": the table has a header but no rows");
  return table;
}

MeasuredTable read_measured_table(const std::filesystem::path& path, const MeasuredTableOptions& options) {
  return parse_measured_table(read_text_file(path, "table"), path.string(), options);
}

Cell checkpointing_cell(Checkpointing c) {
  if (c == Checkpointing::kSelective) return Cell::str(std::string(to_string(c)));
  return Cell::flag(c == Checkpointing::kFull);
}

}  // namespace tpsim
