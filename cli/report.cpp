#include "cli/report.hpp"

#include <algorithm>

#include "io/measured_table.hpp"
#include "io/text_format.hpp"
#include "model/framework.hpp"
#include "model/layout.hpp"
#include "model/model_parallel.hpp"
#include "model/memory.hpp"
#include "model/plan.hpp"
#include "model/units.hpp"

namespace tpsim {

const std::vector<std::string>& foundry_columns() {
  static const std::vector<std::string> names = columns({"Model",
                                                         "SeqLen (T)",
                                                         "# GPUs",
                                                         "GPU",
                                                         "MFU",
                                                         "HFU",
                                                         "Model TFLOP",
                                                         "MicroBatchSize",
                                                         "GradAccum",
                                                         "GlobalBatchSize",
                                                         "Throughput (S/s)",
                                                         "Throughput (T/s)",
                                                         "Throughput (T/s/GPU)",
                                                         "GlobalBatchSize (T)",
                                                         "Precision",
                                                         "MP Mode",
                                                         "Sharding Strategy",
                                                         "Activation Checkpointing",
                                                         "Activation CPUOffload",
                                                         "NumParams"});
  return names;
}

const std::vector<std::string>& extra_columns() {
  static const std::vector<std::string> names =
      columns({"Fits", "Throughput Low (T/s)", "Throughput High (T/s)", "Memory (GiB)", "Capacity (GiB)",
               "Step Time (s)", "GEMM (s)", "Attention (s)", "Other Compute (s)", "Exposed Comm (s)", "Optimizer (s)",
               "Overhead (s)", "Pipeline Bubble (s)", "Allocator (s)"});
  return names;
}

std::vector<std::string> prediction_columns() {
  std::vector<std::string> c = foundry_columns();
  c.insert(c.end(), extra_columns().begin(), extra_columns().end());
  return c;
}

std::vector<std::string> prediction_columns(bool with_layout) {
  std::vector<std::string> c = prediction_columns();
  if (with_layout) c.insert(c.end(), layout_columns().begin(), layout_columns().end());
  return c;
}

const std::vector<std::string>& layout_columns() {
  static const std::vector<std::string> c = [] {
    std::vector<std::string> out;
    for (const DegreeAxis& a : kDegreeAxes) out.emplace_back(a.names.column);
    out.emplace_back(kDataParallelAxis.column);
    out.emplace_back(kExpertTensorAxis.column);
    // The pipeline split: even unless one of these says otherwise.
    for (const StageLayersAxis& a : kStageLayersAxes) out.emplace_back(a.names.column);
    for (const SwitchAxis& a : kSwitchAxes)
      if (a.owner == FrameworkOption::kUnevenPipeline) out.emplace_back(a.names.column);
    return out;
  }();
  return c;
}

namespace {
// A layout axis's column as the terminal shows it: its header and label from the registry.
TerminalColumn layout_entry(const AxisNames& a, int keep) {
  return {std::string(a.column), std::string(a.label), keep, ""};
}
}  // namespace

const TerminalLayout& terminal_layout() {
  static const TerminalLayout layout = [] {
    TerminalLayout l;
    // header, label, keep (higher: dropped later when the terminal is narrow), unless
    l.first = {{"Rank", "#", 95, ""},
               {"Model", "Model", 100, ""},
               {"SeqLen (T)", "Seq", 72, ""},
               {"# GPUs", "GPUs", 92, ""},
               {"GPU", "GPU", 74, ""},
               {"Sharding Strategy", "Sharding", 56, ""},
               layout_entry(kDegreeAxes[0].names, 62),
               layout_entry(kDegreeAxes[1].names, 61),
               layout_entry(kDegreeAxes[2].names, 42),
               layout_entry(kDegreeAxes[3].names, 60),
               layout_entry(kDegreeAxes[4].names, 59),
               layout_entry(kDataParallelAxis, 44),
               layout_entry(kExpertTensorAxis, 43),
               {"MicroBatchSize", "MB", 66, ""},
               {"Activation Checkpointing", "Ckpt", 52, ""},
               {"Throughput (T/s/GPU)", "Tok/s/GPU", 88, ""},
               {"Throughput (T/s)", "Tok/s", 87, "Throughput (T/s/GPU)"},
               {"Predicted Throughput (T/s)", "Predicted", 86, ""},  // validate: beside the measured
               {"MFU", "MFU %", 84, ""},
               {"Memory (GiB)", "Mem GiB", 64, ""},
               {"Fits", "Fits", 80, ""},
               {"Time to Train (days)", "Days", 86, ""},
               {"Cost ($)", "Cost $", 85, ""},
               {"Error (%)", "Error %", 90, ""}};
    l.details = {"HFU",
                 "Model TFLOP",
                 "GradAccum",
                 "GlobalBatchSize",
                 "Throughput (S/s)",
                 "GlobalBatchSize (T)",
                 "Precision",
                 "MP Mode",
                 "Activation CPUOffload",
                 "NumParams",
                 "Throughput Low (T/s)",
                 "Throughput High (T/s)",
                 "Capacity (GiB)",
                 "Headroom (GiB)",
                 "Time Low (days)",
                 "Time High (days)",
                 "GPU-hours",
                 "Cost Low ($)",
                 "Cost High ($)",
                 "Predicted HFU",
                 "Predicted Throughput Low (T/s)",
                 "Predicted Throughput High (T/s)",
                 "Predicted Memory (GiB)"};
    l.total = "Step Time (s)";
    l.parts = {"GEMM (s)",      "Attention (s)", "Other Compute (s)",   "Exposed Comm (s)",
               "Optimizer (s)", "Overhead (s)",  "Pipeline Bubble (s)", "Allocator (s)"};
    l.details.push_back(l.total);
    l.details.insert(l.details.end(), l.parts.begin(), l.parts.end());
    // llm-foundry's headers without their units (metrics.hpp: MFU and HFU in percent, Model TFLOP
    // the model FLOP/s each GPU achieves, in TFLOP/s).
    l.units = {{"MFU", "MFU (%)"}, {"HFU", "HFU (%)"}, {"Model TFLOP", "Model TFLOP/s per GPU"}};
    return l;
  }();
  return layout;
}

void add_layout_cells(const TrainConfig& cfg, std::vector<Cell>& row) {
  const Layout& p = cfg.layout;
  for (int64_t degree :
       {p.tensor, p.pipeline, p.virtual_stages, p.context, p.expert, cfg.data_parallel(), p.expert_tensor_degree()})
    row.push_back(Cell::integer_value(degree));
  for (const StageLayersAxis& a : kStageLayersAxes) row.push_back(Cell::integer_value(p.*a.value));
  for (const SwitchAxis& a : kSwitchAxes)
    if (a.owner == FrameworkOption::kUnevenPipeline) row.push_back(Cell::flag(p.*a.value));
}

bool owns_megatron_fsdp(Framework f) { return framework_def(f).owns(FrameworkOption::kMegatronFsdp); }

void add_optional_columns(const OptionalColumns& o, std::vector<std::string>& columns) {
  if (o.megatron_fsdp) columns.emplace_back(kMegatronFsdpAxis.column);
  if (o.lora) columns.insert(columns.end(), {"LoRA Rank", "LoRA Targets"});
  if (o.recompute_modules) columns.emplace_back("Recompute Modules");
  if (o.mtp) columns.insert(columns.end(), {"MTP Layers", "MTP Repeated Layer"});
  if (o.moe_dispatcher) columns.emplace_back("MoE Dispatcher");
  if (o.cuda_graphs) columns.emplace_back("CUDA Graphs");
  if (o.bf16_layers) columns.insert(columns.end(), {"BF16 Layers At Start", "BF16 Layers At End"});
}

void add_optional_cells(const OptionalColumns& o, const TrainConfig& cfg, std::vector<Cell>& row) {
  if (o.megatron_fsdp) row.push_back(Cell::str(std::string(to_string(cfg.layout.megatron_fsdp))));
  if (o.lora) {
    std::string targets = lora_targets_name(cfg.lora);
    std::replace(targets.begin(), targets.end(), ',', ';');
    row.push_back(Cell::integer_value(cfg.lora.rank));
    row.push_back(Cell::str(targets));
  }
  if (o.recompute_modules)
    row.push_back(Cell::str(cfg.layout.checkpointing == Checkpointing::kSelective
                                ? recompute_modules_text(cfg.layout.recompute_modules)
                                : std::string()));
  if (o.mtp) {
    row.push_back(Cell::integer_value(cfg.layout.mtp_layers));
    row.push_back(Cell::flag(cfg.layout.mtp_repeated_layer));
  }
  if (o.moe_dispatcher) row.push_back(Cell::str(std::string(to_string(cfg.layout.moe_dispatcher))));
  if (o.cuda_graphs) row.push_back(Cell::str(cuda_graphs_text(cfg.layout.cuda_graphs)));
  if (o.bf16_layers) {
    row.push_back(Cell::integer_value(cfg.layout.bf16_layers_start));
    row.push_back(Cell::integer_value(cfg.layout.bf16_layers_end));
  }
}

std::string sharding_text(const Layout& p) {
  std::string s(to_string(p.sharding));
  if (p.shard_degree > 0 && p.replicate_degree > 0)
    s += " (shard " + std::to_string(p.shard_degree) + " x replicate " + std::to_string(p.replicate_degree) + ")";
  return s;
}

std::string layout_phrase(const Layout& p) {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  const auto label = [](const AxisNames& a) { return to_lower(std::string(a.label)); };
  for (const DegreeAxis& a : kDegreeAxes)
    if (p.*a.value > 1) add(label(a.names) + " " + std::to_string(p.*a.value));
  if (p.expert_tensor > 0) add(label(kExpertTensorAxis) + " " + std::to_string(p.expert_tensor));
  for (const StageLayersAxis& a : kStageLayersAxes)
    if (p.*a.value > 0) add(std::string(a.names.label) + " " + std::to_string(p.*a.value));
  if (p.sequence_parallel) add(std::string(kSequenceParallelAxis.label));
  if (p.distributed_optimizer) add(std::string(kDistributedOptimizerAxis.label));
  if (p.megatron_fsdp != MegatronFsdp::kOff)
    add(std::string(kMegatronFsdpAxis.label) + " " + std::string(to_string(p.megatron_fsdp)));
  if (p.pipeline_layout != 0) add("layout " + pipeline_layout(p.pipeline_layout).text);
  if (p.mtp_layers > 0)
    add("mtp " + std::to_string(p.mtp_layers) + (p.mtp_repeated_layer && p.mtp_layers > 1 ? " (one layer)" : ""));
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll) add(std::string(to_string(p.moe_dispatcher)));
  if (p.cuda_graphs != 0) add("cuda graphs " + cuda_graphs_text(p.cuda_graphs, ","));
  if (p.moe_capacity_factor > 0) add("capacity factor " + general(p.moe_capacity_factor));
  if (p.moe_paged_stash > 0) add("paged stash x" + general(p.moe_paged_stash));
  if (p.bf16_layers_start > 0) add("first " + std::to_string(p.bf16_layers_start) + " layers bf16");
  if (p.bf16_layers_end > 0) add("last " + std::to_string(p.bf16_layers_end) + " layers bf16");
  for (const SwitchAxis& a : kSwitchAxes)
    if (p.*a.value && !a.names.label.empty()) add(std::string(a.names.label));
  return out;
}

std::optional<IntervalModel> interval_model_for(const ModelConfig& model, const DeviceProfile& profile,
                                                Framework framework) {
  if (!model.is_mpt_default() || !framework_def(framework).profile_intervals) return std::nullopt;
  const std::optional<PredictionInterval> i = prediction_interval(profile);
  if (!i) return std::nullopt;
  return interval_model(*i);
}

std::optional<RelativeInterval> interval_for(const ModelConfig& model, const DeviceProfile& profile,
                                             const TrainConfig& cfg) {
  const std::optional<IntervalModel> m = interval_model_for(model, profile, cfg.layout.framework);
  if (!m) return std::nullopt;
  return interval_at(*m, domain_point(model, cfg));
}

std::string no_interval_note(const ModelConfig& model, Framework framework) {
  if (!framework_def(framework).profile_intervals)
    return "tpsim: note: no Throughput Low/High under " + std::string(to_string(framework)) +
           ": the profiles' held-out errors are of Composer FSDP runs; docs/accuracy.md gives the held-out " +
           "error on measured Megatron runs\n";
  if (model.is_mpt_default()) return "";
  if (model.unfused_attention)
    return "tpsim: note: " + model.name + ": no Throughput Low/High: its attention runs unfused (the scores " +
           "materialised), and the profiles' held-out errors are of flash-attention runs\n";
  return "tpsim: note: " + model.name + ": no Throughput Low/High: the profiles' held-out errors are of MPT models; " +
         "docs/accuracy.md says how far published runs of other architectures are from tpsim\n";
}

std::string unaligned_gemm_note(const ModelConfig& model, Framework framework) {
  const auto widths = unaligned_gemm_widths(model, framework_def(framework).conventions.padded_vocab);
  if (widths.empty()) return "";
  std::string named;
  for (const auto& [what, width] : widths) named += (named.empty() ? "" : ", ") + what + " " + std::to_string(width);
  return "tpsim: note: " + model.name + ": GEMM width" + (widths.size() > 1 ? "s" : "") + " not a multiple of 8 (" +
         named + "): cuBLAS runs such GEMMs on slower kernels, which tpsim does not cost (docs/model.md " +
         "\"Known simplifications\"), so the step will take longer than predicted\n";
}

namespace {
std::string near_full_evidence() {
  return "the caching allocator's retries near full memory, a term fitted to seven measured runs of two models "
         "(docs/model.md)";
}
}  // namespace

std::string near_full_note(const Prediction& p) {
  const double share = p.time.allocator_s / (p.step_s - p.time.allocator_s);
  const double free_bytes = p.capacity_bytes - p.memory.peak_bytes;
  return fixed(free_bytes / kGiB, 1) + " GiB free at the predicted peak with full checkpointing: the step is " +
         fixed(100.0 * share, 1) + "% longer for " + near_full_evidence() +
         (free_bytes < kAllocatorEvidenceLeastFreeBytes
              ? ", which had " + fixed(kAllocatorEvidenceLeastFreeBytes / kGiB, 1) + " GiB free at the least"
              : "");
}

std::string near_full_rows_note(const std::vector<std::string>& rows) {
  std::string named;
  for (size_t i = 0; i < rows.size() && i < 3; ++i) named += (i ? ", " : "") + rows[i];
  if (rows.size() > 3) named += ", ...";
  return std::to_string(rows.size()) + " of these run full checkpointing close to full memory (" + named +
         "): their steps include " + near_full_evidence() + "; plan leaves a margin";
}

double interval_low(double predicted, const RelativeInterval& i) { return predicted / (1.0 + i.p90); }
double interval_high(double predicted, const RelativeInterval& i) { return predicted / (1.0 + i.p10); }

std::vector<Cell> prediction_row(const std::string& model, const std::string& device, const TrainConfig& cfg,
                                 const Prediction& p, const std::optional<RelativeInterval>& interval) {
  const bool ok = p.fits();
  const auto when_fits = [&](Cell c) { return ok ? c : Cell::empty(); };
  std::vector<Cell> row = {
      Cell::str(model),
      Cell::integer_value(cfg.seq_len),
      Cell::integer_value(cfg.n_gpus),
      Cell::str(device),
      when_fits(Cell::num(p.mfu * 100.0, 2)),
      when_fits(Cell::num(p.hfu * 100.0, 2)),
      when_fits(Cell::num(p.model_flops_per_s_per_gpu / 1e12, 2)),
      Cell::integer_value(cfg.micro_batch),
      Cell::integer_value(cfg.grad_accum()),
      Cell::integer_value(cfg.global_batch),
      when_fits(Cell::num(p.seq_per_s, 2)),
      when_fits(Cell::integer_value(static_cast<int64_t>(p.tokens_per_s))),
      when_fits(Cell::integer_value(static_cast<int64_t>(p.tokens_per_s_per_gpu))),
      Cell::integer_value(cfg.global_batch * cfg.seq_len),
      Cell::str(std::string(to_string(cfg.precision))),
      Cell::str(std::string(to_string(cfg.mp_mode))),
      Cell::str(sharding_text(cfg.layout)),
      checkpointing_cell(cfg.layout.checkpointing),  // True / False as llm-foundry writes them; selective
      Cell::flag(false),
      Cell::integer_value(p.n_params),
      // tpsim's columns
      Cell::str(ok ? "yes" : "no"),
      ok && interval ? Cell::integer_value(static_cast<int64_t>(interval_low(p.tokens_per_s, *interval)))
                     : Cell::empty(),
      ok && interval ? Cell::integer_value(static_cast<int64_t>(interval_high(p.tokens_per_s, *interval)))
                     : Cell::empty(),
      Cell::num(p.memory.peak_bytes / kGiB, 1),
      Cell::num(p.capacity_bytes / kGiB, 1),
      when_fits(Cell::num(p.step_s, 4)),
      when_fits(Cell::num(p.time.gemm_s, 4)),
      when_fits(Cell::num(p.time.attention_s, 4)),
      when_fits(Cell::num(p.time.other_compute_s, 4)),
      when_fits(Cell::num(p.time.exposed_comm_s, 4)),
      when_fits(Cell::num(p.time.optimizer_s, 4)),
      when_fits(Cell::num(p.time.overhead_s, 4)),
      when_fits(Cell::num(p.time.pipeline_bubble_s, 4)),
      when_fits(Cell::num(p.time.allocator_s, 4)),
  };
  return row;
}

}  // namespace tpsim
