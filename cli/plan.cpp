// tpsim plan: what to rent and how to run it. For each device and GPU count asked, the search
// (model/search.hpp) predicts every micro-batch, activation checkpointing choice and sharding
// strategy; model/plan.hpp ranks those that fit by time to train (or cost). Here: the flags, their
// check, and the tables, with the prediction interval carried through to time and cost. --explain
// says why the others were rejected.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/report.hpp"
#include "cli/run_settings.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/measured_table.hpp"
#include "io/plots.hpp"
#include "io/progress.hpp"
#include "io/text_format.hpp"
#include "model/framework.hpp"
#include "model/plan.hpp"
#include "model/units.hpp"

namespace tpsim {
namespace {

struct PlanOptions {
  CommonOptions common;
  RunFlags run;
  LayoutRequest layout;  // megatron: the axes given are fixed, the others searched
  NetworkFlags network;
  std::string devices = "h100_80gb", gpus, tokens, price, objective = "time", plot, min_headroom;
  std::optional<std::string> batch_tokens;  // --global-batch-tokens; unset: not given
  int top = 5;
  bool explain = false;
};

// The plan asked for, checked: what plan_runs needs, and what the tables add to it.
struct PlanRequest {
  PlanQuery query;
  std::vector<std::string> device_ids;
  double train_tokens = 0;               // 0: no time to train
  std::map<std::string, double> prices;  // dollars per GPU-hour by device id; empty: no cost
  bool priced() const { return !prices.empty(); }
  double price(const DeviceSpec* d) const { return prices.at(d->id); }
  std::string asked_from;       // where the global batch asked comes from
  bool layout_columns = false;  // --framework given
  std::string yaml_note;        // what the --config YAML fixed and what plan searched ("": no YAML)
  OptionalColumns optional() const {
    return {.megatron_fsdp = owns_megatron_fsdp(query.space.asked.framework),
            .lora = query.lora.active(),
            .recompute_modules = query.space.asked.recompute_modules.has_value(),
            .mtp = query.space.asked.mtp_layers.has_value(),
            .moe_dispatcher = query.space.asked.moe_dispatcher.has_value(),
            .cuda_graphs = query.space.asked.cuda_graphs.has_value(),
            .bf16_layers = query.space.asked.bf16_layers_start || query.space.asked.bf16_layers_end};
  }
};

// --price-per-gpu-hour: one price for every device ("2.5"), or one per device
// ("h100_80gb=2.5,b200=4.9"), naming each device planned and no other.
std::map<std::string, double> parse_prices(const std::string& text, const std::vector<std::string>& devices) {
  std::map<std::string, double> out;
  if (text.empty()) return out;
  const auto dollars = [&](const std::string& value) {
    const std::optional<double> price = parse_number(value);
    if (!price || !std::isfinite(*price) || *price <= 0 || *price > 1e6)
      throw Error("--price-per-gpu-hour '" + text + "': expected a positive number of dollars" +
                  (value == text ? "" : ", got '" + value + "'") + " (one price, or DEVICE=PRICE,...)");
    return *price;
  };
  if (text.find('=') == std::string::npos) {
    const double price = dollars(text);
    for (const std::string& d : devices) out[d] = price;
    return out;
  }
  for (const std::string& item : parse_name_list("--price-per-gpu-hour", text)) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("--price-per-gpu-hour '" + text + "': '" + item + "' is not DEVICE=PRICE");
    std::string id = item.substr(0, eq);
    std::transform(id.begin(), id.end(), id.begin(), ::tolower);
    if (std::find(devices.begin(), devices.end(), id) == devices.end())
      throw Error("--price-per-gpu-hour '" + text + "': " + id + " is not a --device of this plan");
    if (!out.emplace(id, dollars(item.substr(eq + 1))).second)
      throw Error("--price-per-gpu-hour '" + text + "': " + id + " is priced twice");
  }
  for (const std::string& d : devices)
    if (!out.count(d)) throw Error("--price-per-gpu-hour '" + text + "': no price for --device " + d);
  return out;
}

Objective parse_objective(const std::string& text) {
  if (text == "time") return Objective::kTime;
  if (text == "cost") return Objective::kCost;
  throw Error("--objective '" + text + "': expected time or cost");
}

// The global batch, in sequences, and where it comes from: --global-batch, --global-batch-tokens
// (whole sequences: a count of tokens between two is rounded, with a note), the --config's
// global_train_batch_size, else 4Mi tokens. The plan never changes it: a GPU count or layout that
// cannot run it is rejected (--explain says why).
void set_asked_batch(const PlanOptions& o, RunSettings& run, PlanRequest& r) {
  const int64_t seq = *run.seq_len;
  if (!o.run.global_batch.empty() && o.batch_tokens)
    throw Error("--global-batch and --global-batch-tokens: give one of them");
  if (!o.run.global_batch.empty()) {
    r.query.global_batch = parse_count("--global-batch", o.run.global_batch, kMaxBatch);
    r.asked_from = "--global-batch " + o.run.global_batch;
    return;
  }
  if (run.global_batch && !o.batch_tokens) {
    r.query.global_batch = *run.global_batch;
    r.asked_from = "global_train_batch_size " + std::to_string(*run.global_batch) + " in " + run.config_origin;
    return;
  }
  const std::string flag =
      o.batch_tokens ? "--global-batch-tokens " + *o.batch_tokens : "the default of 4Mi tokens per step";
  const double tokens = o.batch_tokens ? parse_tokens("--global-batch-tokens", *o.batch_tokens) : 4.0 * 1024 * 1024;
  const double sequences = tokens / static_cast<double>(seq);
  r.query.global_batch = whole_sequences(flag, tokens, seq);
  r.asked_from = flag;
  if (std::fabs(sequences - static_cast<double>(r.query.global_batch)) > 1e-9)
    run.notes.push_back(flag + " is " + fixed(sequences, 2) + " sequences of " + std::to_string(seq) +
                        " tokens: planned with a global batch of " + std::to_string(r.query.global_batch) +
                        " (--global-batch sets it in sequences)");
}

// What the search covers. The flags restrict an axis: --sharding, --ckpt KIND/--no-ckpt (--ckpt any
// widens it to selective too), --micro-batch N. So does a --config YAML that writes the axis
// (fsdp_config's sharding_strategy, or none for DDP; activation_checkpointing;
// device_train_microbatch_size), unless a flag says otherwise: --sharding any, --ckpt any and
// --micro-batch auto search the axis whatever the YAML says. `sharding_any`: --sharding any given.
SearchSpace plan_space(const RunSettings& run, bool sharding_any, bool composer) {
  SearchSpace space;
  // Where plan chooses the sharding, HSDP meshes too (model/search.hpp); a sharding fixed by the
  // YAML or --sharding keeps Composer's own groups, as that run would.
  space.hsdp_meshes = composer && (!run.sharding || sharding_any);
  if (composer && run.sharding && !sharding_any) space.shardings = {*run.sharding};
  if (!run.ckpt_asked.empty()) space.checkpointing = run.ckpt_asked;
  else if (run.checkpointing) space.checkpointing = {*run.checkpointing};
  if (run.micro_batch && !run.micro_batch_auto) space.micro_batches = {*run.micro_batch};
  return space;
}

// The note a --config run gets: what the YAML fixed, what plan searched.
std::string yaml_note(const RunSettings& run, const SearchSpace& space, bool composer) {
  if (run.config_origin.empty()) return "";
  std::string kept, searched;
  const auto add = [](std::string& list, const std::string& item) { list += (list.empty() ? "" : ", ") + item; };
  if (composer && space.shardings.size() == 1) add(kept, "sharding " + std::string(to_string(space.shardings[0])));
  if (composer && space.shardings.size() > 1) add(searched, "sharding");
  if (space.checkpointing.size() == 1) add(kept, "checkpointing " + std::string(to_string(space.checkpointing[0])));
  else add(searched, "checkpointing");
  if (space.micro_batches.size() == 1) add(kept, "micro-batch " + std::to_string(space.micro_batches[0]));
  else add(searched, "micro-batch");
  return run.config_origin + ": plan keeps " + (kept.empty() ? "none of its choices" : kept) + "; searches " +
         (searched.empty() ? "none of them" : searched) +
         " (--sharding any, --ckpt any and --micro-batch auto search what the YAML or a flag fixes)";
}

double parse_min_headroom(const std::string& text) {
  if (text.empty()) return -1;
  const std::optional<double> gib = parse_number(text);
  if (!gib || !std::isfinite(*gib) || *gib < 0 || *gib > 1024)
    throw Error("--min-headroom '" + text + "': expected GiB from 0 to 1024");
  return *gib * kGiB;
}

PlanRequest check_plan(const PlanOptions& o, Context& ctx, RunSettings& run, bool sharding_any) {
  PlanRequest r;
  r.device_ids = parse_name_list("--device", o.devices);
  for (const auto& d : r.device_ids) ctx.device(d);  // unknown device: Error, before any work
  ctx.check_profiles_used(r.device_ids);
  if (o.gpus.empty()) throw Error("--gpus: give the GPU counts to consider, as in 32,64,128");
  r.query.gpu_counts = parse_count_list("--gpus", o.gpus, kMaxGpus);
  r.query.objective = parse_objective(o.objective);
  if (o.top < 1 || o.top > 1000) throw Error("--top " + std::to_string(o.top) + ": expected 1 to 1000");
  r.train_tokens = o.tokens.empty() ? 0.0 : parse_tokens("--tokens", o.tokens);
  r.prices = parse_prices(o.price, r.device_ids);
  if (r.query.objective == Objective::kCost && !r.priced()) throw Error("--objective cost needs --price-per-gpu-hour");
  if (const double m = parse_min_headroom(o.min_headroom); m >= 0) r.query.min_headroom_bytes = m;
  set_asked_batch(o, run, r);
  LayoutRequest asked = o.layout;
  check_layout_request(asked, run);
  std::string attention_note;
  run.model = attention_as_asked(*run.model, asked, &attention_note);
  if (!attention_note.empty()) run.notes.push_back(attention_note);
  r.query.model = &*run.model;
  r.query.seq_len = *run.seq_len;
  r.query.precision = run.precision;
  r.query.mp_mode = run.mp_mode;
  r.query.lora = run.lora;
  check_no_sharding_flag(asked, "--sharding", !o.run.sharding.empty());
  const bool composer = framework_def(asked.framework).sharding_strategies;
  r.query.space = plan_space(run, sharding_any, composer);
  r.yaml_note = yaml_note(run, r.query.space, composer);
  r.query.space.asked = asked;
  // llm-foundry lowers a micro-batch larger than the per-device batch to it (the search does too).
  if (composer && r.query.space.micro_batches.size() == 1) {
    const int64_t mb = r.query.space.micro_batches.front();
    std::string lowered;
    for (int64_t n : r.query.gpu_counts)
      if (r.query.global_batch % n == 0 && r.query.global_batch / n < mb)
        lowered += (lowered.empty() ? "" : ", ") + std::to_string(r.query.global_batch / n) + " on " +
                   std::to_string(n) + " GPUs";
    if (!lowered.empty())
      run.notes.push_back("micro-batch " + std::to_string(mb) +
                          " is more than the per-device batch at some GPU counts: lowered to it (" + lowered +
                          "), as llm-foundry does");
  }
  r.layout_columns = asked.framework_given;
  for (const auto& d : r.device_ids) {
    r.query.devices.push_back({&ctx.device(d), &ctx.profile(d).params,
                               interval_model_for(*run.model, ctx.profile(d), asked.framework),
                               r.priced() ? r.prices.at(d) : 1.0});
  }
  return r;
}

// A layout in words: FSDP's sharding strategy, or the model-parallel degrees; then checkpointing.
std::string choice_name(const Layout& l) {
  if (framework_def(l.framework).sharding_strategies) return sharding_text(l) + ", " + checkpointing_phrase(l);
  const std::string layout = layout_phrase(l);
  return (layout.empty() ? "data parallel" : layout) + ", " + checkpointing_phrase(l);
}

std::string rejection_reason(const PlanRequest& r, const PlanRejection& p) {
  const Rejection& why = p.rejection;
  char text[200];
  if (!p.all_reason.empty()) return p.all_reason + " (the global batch, " + r.asked_from + ")";
  switch (why.kind) {
    case RejectionKind::kInvalid: return why.reason;
    case RejectionKind::kMicroBatchTooLarge:
      return "--micro-batch " + std::to_string(why.micro_batch) + " is more than the " +
             std::to_string(why.per_device_batch) + " sequences per GPU of the global batch";
    case RejectionKind::kOutOfMemory:
      std::snprintf(text, sizeof text, "out of memory: a micro-batch of %lld needs %.1f GiB of %.1f GiB",
                    static_cast<long long>(why.micro_batch), why.peak_bytes / kGiB, p.device->memory_bytes / kGiB);
      return text;
    case RejectionKind::kOutOfMemoryAbove:
      return "out of memory for micro-batches above " + std::to_string(why.micro_batch);
    case RejectionKind::kEquivalent: return "predicts as " + choice_name(why.same_as);
    case RejectionKind::kNoLayout: return why.reason;
  }
  return {};
}

std::string headroom_reason(const PlanRequest& r, const HeadroomDrop& d) {
  char reason[200];
  std::snprintf(reason, sizeof reason, "headroom under %.1f GiB (--min-headroom%s): the most among them is %.1f GiB",
                d.margin_bytes / kGiB, r.query.min_headroom_bytes ? "" : "'s default, 5% of the device's memory",
                d.best_headroom_bytes / kGiB);
  return reason;
}

// The rejections, then the configurations dropped for headroom, of each device and GPU count in
// the order they were searched.
OutputTable rejected_table(const PlanRequest& r, const PlanResult& plan) {
  OutputTable why;
  why.title = "rejected";
  why.columns = {"GPU", "# GPUs", "Choice", "Reason"};
  const auto point = [&](const DeviceSpec* d, int64_t gpus) {
    const auto dev = std::find(r.device_ids.begin(), r.device_ids.end(), d->id) - r.device_ids.begin();
    const auto n = std::find(r.query.gpu_counts.begin(), r.query.gpu_counts.end(), gpus) - r.query.gpu_counts.begin();
    return dev * static_cast<std::ptrdiff_t>(r.query.gpu_counts.size()) + n;
  };
  std::vector<std::pair<std::ptrdiff_t, std::vector<Cell>>> rows;
  for (const PlanRejection& p : plan.rejected)
    rows.push_back({point(p.device, p.gpus),
                    {Cell::str(p.device->id), Cell::integer_value(p.gpus),
                     Cell::str(!p.all_reason.empty()   ? "all"
                               : p.rejection.count > 1 ? choice_name(p.rejection.layout) + " and " +
                                                             std::to_string(p.rejection.count - 1) + " more layouts"
                                                       : choice_name(p.rejection.layout)),
                     Cell::str(rejection_reason(r, p))}});
  for (const HeadroomDrop& d : plan.dropped)
    rows.push_back({point(d.device, d.gpus),
                    {Cell::str(d.device->id), Cell::integer_value(d.gpus),
                     Cell::str(std::to_string(d.count) + (d.count == 1 ? " configuration" : " configurations")),
                     Cell::str(headroom_reason(r, d))}});
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& row : rows) why.add_row(std::move(row.second));
  return why;
}

// With --tokens, the time to train (and with a price, its cost) and their intervals.
void add_time_and_cost_columns(const PlanRequest& r, std::vector<std::string>& c) {
  if (r.train_tokens <= 0) return;
  for (const char* name : {"Time to Train (days)", "Time Low (days)", "Time High (days)", "GPU-hours"})
    c.emplace_back(name);
  if (r.priced())
    for (const char* name : {"Cost ($)", "Cost Low ($)", "Cost High ($)"}) c.emplace_back(name);
}

std::vector<std::string> ranked_columns(const PlanRequest& r) {
  std::vector<std::string> c =
      columns({"Rank", "GPU", "# GPUs", "MicroBatchSize", "GradAccum", "GlobalBatchSize", "GlobalBatchSize (T)",
               "Activation Checkpointing", "Sharding Strategy", "Throughput (T/s)", "Throughput Low (T/s)",
               "Throughput High (T/s)", "MFU", "HFU", "Memory (GiB)", "Headroom (GiB)"});
  add_time_and_cost_columns(r, c);
  if (r.layout_columns) c.insert(c.end(), layout_columns().begin(), layout_columns().end());
  add_optional_columns(r.optional(), c);
  return c;
}

// Time to train, GPU-hours and cost, each with its interval.
void add_time_and_cost(const PlanRequest& r, const PlannedConfig& c, const std::optional<RelativeInterval>& interval,
                       std::vector<Cell>& row) {
  const double t = c.prediction.tokens_per_s;
  const double lo = interval ? interval_low(t, *interval) : t, hi = interval ? interval_high(t, *interval) : t;
  const double days = r.train_tokens / t / 86400.0;
  const double gpu_hours = days * 24.0 * static_cast<double>(c.cfg.n_gpus);
  row.push_back(Cell::num(days, 2));
  row.push_back(interval ? Cell::num(r.train_tokens / hi / 86400.0, 2) : Cell::empty());
  row.push_back(interval ? Cell::num(r.train_tokens / lo / 86400.0, 2) : Cell::empty());
  row.push_back(Cell::num(gpu_hours, 0));
  if (!r.priced()) return;
  const double price = r.price(c.device);
  row.push_back(Cell::num(gpu_hours * price, 0));
  row.push_back(interval ? Cell::num(gpu_hours * price * t / hi, 0) : Cell::empty());
  row.push_back(interval ? Cell::num(gpu_hours * price * t / lo, 0) : Cell::empty());
}

std::vector<Cell> ranked_row(const PlanRequest& r, const PlannedConfig& c,
                             const std::optional<RelativeInterval>& interval, int rank) {
  const Prediction& p = c.prediction;
  const double t = p.tokens_per_s;
  const double lo = interval ? interval_low(t, *interval) : t, hi = interval ? interval_high(t, *interval) : t;
  std::vector<Cell> row = {Cell::integer_value(rank),
                           Cell::str(c.device->id),
                           Cell::integer_value(c.cfg.n_gpus),
                           Cell::integer_value(c.cfg.micro_batch),
                           Cell::integer_value(c.cfg.grad_accum()),
                           Cell::integer_value(c.cfg.global_batch),
                           Cell::integer_value(c.cfg.global_batch * c.cfg.seq_len),
                           checkpointing_cell(c.cfg.layout.checkpointing),
                           Cell::str(sharding_text(c.cfg.layout)),
                           Cell::integer_value(static_cast<int64_t>(t)),
                           interval ? Cell::integer_value(static_cast<int64_t>(lo)) : Cell::empty(),
                           interval ? Cell::integer_value(static_cast<int64_t>(hi)) : Cell::empty(),
                           Cell::num(100 * p.mfu, 2),
                           Cell::num(100 * p.hfu, 2),
                           Cell::num(p.memory.peak_bytes / kGiB, 1),
                           Cell::num((p.capacity_bytes - p.memory.peak_bytes) / kGiB, 1)};
  if (r.train_tokens > 0) add_time_and_cost(r, c, interval, row);
  if (r.layout_columns) add_layout_cells(c.cfg, row);
  add_optional_cells(r.optional(), c.cfg, row);
  return row;
}

void add_bar(StackedBars& bars, const PlannedConfig& c, int rank) {
  static const char* kShort[] = {"full", "grad-op", "no-shard", "hybrid"};
  static const char* kCkpt[] = {"", " selective ckpt", " ckpt"};  // none, selective, full
  const StepBreakdown& t = c.prediction.time;
  const std::string layout = framework_def(c.cfg.layout.framework).sharding_strategies
                                 ? kShort[static_cast<int>(c.cfg.layout.sharding)]
                                 : layout_phrase(c.cfg.layout);
  bars.bars.push_back("#" + std::to_string(rank) + " " + c.device->id + " x" + std::to_string(c.cfg.n_gpus) + " mb" +
                      std::to_string(c.cfg.micro_batch) + " " + layout +
                      kCkpt[static_cast<int>(c.cfg.layout.checkpointing)]);
  bars.values.push_back({t.gemm_s, t.attention_s, t.other_compute_s, t.exposed_comm_s, t.optimizer_s, t.overhead_s,
                         t.pipeline_bubble_s, t.allocator_s});
}

// A configuration in a few words: "128 x h100_80gb, micro-batch 5, FULL_SHARD, checkpointing".
std::string config_phrase(const PlannedConfig& c) {
  return std::to_string(c.cfg.n_gpus) + " x " + c.device->id + ", micro-batch " + std::to_string(c.cfg.micro_batch) +
         ", " + choice_name(c.cfg.layout);
}

// Which rule chose a pick (model/plan.hpp), in words: "fastest", or what the fastest lost on.
std::string pick_reason(const Pick& p, Objective objective) {
  if (p.rule == PickRule::kFastest) return objective == Objective::kCost ? "cheapest" : "fastest";
  char text[300];
  const PlannedConfig &c = p.chosen, &f = p.fastest;
  std::string chose;
  switch (p.rule) {
    case PickRule::kHeadroom:
      std::snprintf(text, sizeof text, "%.1f GiB headroom over %.1f", c.headroom_bytes / kGiB, f.headroom_bytes / kGiB);
      chose = text;
      break;
    case PickRule::kPowerOfTwoMicroBatch:
      chose = "micro-batch " + std::to_string(c.cfg.micro_batch) + ", a power of two";
      break;
    case PickRule::kLessCheckpointing: chose = checkpointing_phrase(c.cfg.layout); break;
    case PickRule::kFewerDegrees: chose = "fewer parallel degrees to set"; break;
    case PickRule::kFastest: break;
  }
  std::snprintf(text, sizeof text, "%s (%s) is %s by %.1f%%, within the interval: chose %s",
                objective == Objective::kCost ? "the cheapest" : "the fastest", config_phrase(f).c_str(),
                objective == Objective::kCost ? "cheaper" : "faster", 100.0 * (c.score / f.score - 1.0), chose.c_str());
  return text;
}

// The columns of the best of each GPU count: what a buyer compares.
std::vector<std::string> per_gpu_count_columns(const PlanRequest& r) {
  std::vector<std::string> c =
      columns({"GPU", "# GPUs", "MicroBatchSize", "GradAccum", "Activation Checkpointing", "Sharding Strategy",
               "Throughput (T/s)", "Throughput Low (T/s)", "Throughput High (T/s)", "MFU", "Headroom (GiB)"});
  add_time_and_cost_columns(r, c);
  if (r.layout_columns) c.insert(c.end(), layout_columns().begin(), layout_columns().end());
  c.emplace_back("Chosen by");
  return c;
}

// Why nothing of a device and GPU count (every count when p.gpus is 0) is listed, in the summary
// itself: the one reason when every choice was refused for it (v100_32gb: "no bf16 matmuls"), the
// smallest need when all ran out of memory, else how many reasons --explain lists.
std::string nothing_reason(const PlanRequest& r, const PlanResult& plan, const PointPick& p) {
  for (const HeadroomDrop& d : plan.dropped)
    if (d.device == p.device && (p.gpus == 0 || d.gpus == p.gpus)) return "nothing fits with the --min-headroom margin";
  std::vector<std::string> reasons;
  double least_peak = 0;
  bool all_out_of_memory = true;
  for (const PlanRejection& j : plan.rejected) {
    if (j.device != p.device || (p.gpus != 0 && j.gpus != p.gpus) || j.rejection.kind == RejectionKind::kEquivalent)
      continue;
    const std::string why = rejection_reason(r, j);
    if (std::find(reasons.begin(), reasons.end(), why) == reasons.end()) reasons.push_back(why);
    const bool oom = j.all_reason.empty() && j.rejection.kind == RejectionKind::kOutOfMemory;
    all_out_of_memory = all_out_of_memory && oom;
    if (oom && (least_peak == 0 || j.rejection.peak_bytes < least_peak)) least_peak = j.rejection.peak_bytes;
  }
  if (reasons.size() == 1) return "nothing fits: " + reasons.front();
  if (reasons.empty()) return "nothing fits";
  char text[160];
  if (all_out_of_memory) {
    std::snprintf(text, sizeof text,
                  "nothing fits: out of memory, the least a micro-batch of 1 needs is %.1f GiB of %.1f GiB",
                  least_peak / kGiB, p.device->memory_bytes / kGiB);
    return text;
  }
  return "nothing fits: " + std::to_string(reasons.size()) + " reasons (--explain lists them)";
}

OutputTable per_gpu_count_table(const PlanRequest& r, const PlanResult& plan, Context& ctx) {
  OutputTable t;
  t.title = "best per GPU count";
  t.columns = per_gpu_count_columns(r);
  for (const PointPick& p : plan.per_gpu_count) {
    std::vector<Cell> row(t.columns.size());
    row[0] = Cell::str(p.device->id);
    row[1] = Cell::integer_value(p.gpus);
    if (!p.pick) {
      row.back() = Cell::str(nothing_reason(r, plan, p));
      t.add_row(std::move(row));
      continue;
    }
    const PlannedConfig& c = p.pick->chosen;
    const std::optional<RelativeInterval> interval = interval_for(*r.query.model, ctx.profile(c.device->id), c.cfg);
    const double tps = c.prediction.tokens_per_s;
    row.resize(2);
    for (Cell cell :
         {Cell::integer_value(c.cfg.micro_batch), Cell::integer_value(c.cfg.grad_accum()),
          checkpointing_cell(c.cfg.layout.checkpointing), Cell::str(sharding_text(c.cfg.layout)),
          Cell::integer_value(static_cast<int64_t>(tps)),
          interval ? Cell::integer_value(static_cast<int64_t>(interval_low(tps, *interval))) : Cell::empty(),
          interval ? Cell::integer_value(static_cast<int64_t>(interval_high(tps, *interval))) : Cell::empty(),
          Cell::num(100 * c.prediction.mfu, 2), Cell::num(c.headroom_bytes / kGiB, 1)})
      row.push_back(cell);
    if (r.train_tokens > 0) add_time_and_cost(r, c, interval, row);
    if (r.layout_columns) add_layout_cells(c.cfg, row);
    row.push_back(Cell::str(pick_reason(*p.pick, r.query.objective)));
    t.add_row(std::move(row));
  }
  return t;
}

// Side by side: the pick of each device, over all its GPU counts.
OutputTable best_per_device(const PlanRequest& r, const PlanResult& plan) {
  OutputTable best;
  best.title = "best per device";
  best.columns = {
      "GPU", "# GPUs", "MicroBatchSize", "Activation Checkpointing", "Sharding Strategy", "Throughput (T/s)", "MFU"};
  if (r.train_tokens > 0) best.columns.emplace_back("Time to Train (days)");
  if (r.train_tokens > 0 && r.priced()) best.columns.emplace_back("Cost ($)");
  if (r.layout_columns) best.columns.insert(best.columns.end(), layout_columns().begin(), layout_columns().end());
  for (const PointPick& pp : plan.per_device) {
    if (!pp.pick) {
      std::vector<Cell> row(best.columns.size());
      row[0] = Cell::str(pp.device->id);
      row[1] = Cell::str(nothing_reason(r, plan, pp));
      best.add_row(std::move(row));
      continue;
    }
    const PlannedConfig& c = pp.pick->chosen;
    const Prediction& p = c.prediction;
    std::vector<Cell> row = {Cell::str(c.device->id),
                             Cell::integer_value(c.cfg.n_gpus),
                             Cell::integer_value(c.cfg.micro_batch),
                             checkpointing_cell(c.cfg.layout.checkpointing),
                             Cell::str(sharding_text(c.cfg.layout)),
                             Cell::integer_value(static_cast<int64_t>(p.tokens_per_s)),
                             Cell::num(100 * p.mfu, 2)};
    const double days = r.train_tokens / p.tokens_per_s / 86400.0;
    if (r.train_tokens > 0) row.push_back(Cell::num(days, 2));
    if (r.train_tokens > 0 && r.priced())
      row.push_back(Cell::num(days * 24.0 * static_cast<double>(c.cfg.n_gpus) * r.price(c.device), 0));
    if (r.layout_columns) add_layout_cells(c.cfg, row);
    best.add_row(std::move(row));
  }
  return best;
}

OutputTable ranked_table(const PlanRequest& r, const PlanResult& plan, Context& ctx, int top, StackedBars& bars) {
  OutputTable ranked;
  ranked.title = "plan";
  ranked.columns = ranked_columns(r);
  bars.title = "Step time of the ranked configurations";
  bars.y_label = "seconds per optimizer step";
  bars.series = {"GEMM",      "attention", "other compute",   "exposed communication",
                 "optimizer", "overhead",  "pipeline bubble", "allocator retries"};
  for (size_t i = 0; i < plan.ranked.size() && static_cast<int>(i) < top; ++i) {
    const PlannedConfig& c = plan.ranked[i];
    ranked.add_row(
        ranked_row(r, c, interval_for(*r.query.model, ctx.profile(c.device->id), c.cfg), static_cast<int>(i) + 1));
    add_bar(bars, c, static_cast<int>(i) + 1);
  }
  return ranked;
}

// The notes on stderr: the YAML's, what the YAML fixed, the interval, why rank 1 is not the fastest,
// and whether it runs with full checkpointing close to full memory.
void print_plan_notes(const PlanRequest& r, const RunSettings& run, const PlanResult& plan) {
  print_notes(run);
  if (!r.yaml_note.empty()) std::cerr << "tpsim: note: " << r.yaml_note << "\n";
  std::cerr << no_interval_note(*run.model, r.query.space.asked.framework)
            << unaligned_gemm_note(*run.model, r.query.space.asked.framework);
  if (!plan.ranked.empty() && plan.top.rule != PickRule::kFastest)
    std::cerr << "tpsim: note: rank 1: " << pick_reason(plan.top, r.query.objective) << "\n";
  if (!plan.ranked.empty() && checkpointed_near_full(plan.top.chosen.prediction))
    std::cerr << "tpsim: note: rank 1: " << near_full_note(plan.top.chosen.prediction) << "\n";
}

void run_plan(const PlanOptions& o) {
  Context ctx(o.common);
  apply_network_flags(ctx, o.network);
  RunFlags flags = o.run;
  const bool sharding_any = flags.sharding == "any";
  if (sharding_any) flags.sharding.clear();
  RunSettings run = resolve_run(ctx, flags);
  const PlanRequest r = check_plan(o, ctx, run, sharding_any);
  Progress progress("plan", static_cast<int64_t>(r.query.devices.size() * r.query.gpu_counts.size()));
  const PlanResult plan = plan_runs(r.query, [&](int64_t i) { progress.update(i); });
  progress.finish();
  StackedBars bars;
  std::vector<OutputTable> out = {ranked_table(r, plan, ctx, o.top, bars), per_gpu_count_table(r, plan, ctx)};
  if (r.device_ids.size() > 1) out.push_back(best_per_device(r, plan));
  if (o.explain) out.push_back(rejected_table(r, plan));
  print_plan_notes(r, run, plan);
  if (!o.plot.empty()) write_file_atomic(o.plot, stacked_bars_svg(bars));
  if (ctx.format() == Format::kCsv) out = {stacked_table(out, "Table")};
  emit(ctx.render(out), ctx.output());
  if (plan.ranked.empty())
    std::cerr << "tpsim: nothing fits: no configuration of " << run.model->name << " at sequence length "
              << *run.seq_len << " fits on the devices and GPU counts given"
              << (plan.dropped.empty() ? "" : " with the --min-headroom margin")
              << (o.explain ? "" : " (--explain says why)") << "\n";
  ctx.print_notes();
}

// plan's texts of the shared run flags: what plan does with each (it searches; the flags restrict).
void describe_plan_run_flags(CLI::App* cmd) {
  cmd->get_option("--config")
      ->description(
          "llm-foundry training YAML: model, max_seq_len, global batch, precision; its sharding_strategy (no "
          "fsdp_config: DDP), activation_checkpointing and device_train_microbatch_size restrict the search as the "
          "flags do; flags override it");
  cmd->get_option("--sharding")
      ->description(
          "search only this sharding strategy: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD; any: all four. Not "
          "given: the --config's, else all four");
  cmd->get_option("--ckpt")->description(
      "search only this activation checkpointing: none, selective, full (a bare --ckpt); any: all three. Not given: "
      "the --config's, else none and full");
  cmd->get_option("--no-ckpt")->description("search only runs without activation checkpointing (--ckpt none)");
  cmd->get_option("--micro-batch")
      ->description(
          "search only this micro-batch per GPU; auto: every micro-batch that fits. Not given: the --config's, else "
          "every one that fits");
}

constexpr const char* kRankingFooter =
    "Ranking: configurations with less headroom than --min-headroom are dropped. The rest are scored (seconds, or "
    "dollars at each device's --price-per-gpu-hour, per token). Those whose interval (the profile's held-out p10/p90 error) overlaps the best's go "
    "first, ordered by: headroom (at least twice the margin before less; under it, more before less), a "
    "power-of-two micro-batch, less checkpointing (none, selective, full), fewer parallel degrees to set "
    "(model-parallel, an HSDP mesh), then the "
    "score; the rest follow by score. Without an interval (a non-MPT model, megatron, torchtitan) the order is the "
    "score's. The same rule picks each row of 'best per GPU count' and 'best per device'. docs/plan.md";

}  // namespace

void register_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "rank the configurations that fit by time to train or cost (robustly within the prediction interval), "
      "with the best of each GPU count");
  add_run_flags(cmd, o->run, /*with_sharding_and_ckpt=*/true, /*ckpt_any=*/true);
  describe_plan_run_flags(cmd);
  add_layout_flags(cmd, o->layout);
  add_network_flags(cmd, o->network);
  cmd->add_option("--device", o->devices, "device id(s), comma-separated, compared side by side")
      ->default_val("h100_80gb")
      ->transform(lower_case_ids());
  cmd->add_option("--gpus", o->gpus, "GPU counts to consider: list (32,64,128) or range by powers of two (8..512)");
  cmd->add_option("--tokens", o->tokens, "tokens to train (1T = 1e12): adds time to train, GPU-hours and cost");
  cmd->add_option("--global-batch", o->run.global_batch,
                  "sequences per optimizer step, kept at every GPU count: a layout that cannot run it is rejected "
                  "(--explain); default: the --config's global batch, else 4Mi tokens");
  cmd->add_option("--global-batch-tokens", o->batch_tokens,
                  "tokens per optimizer step (4M = 4e6, 4Mi = 2^22), in whole sequences; instead of --global-batch");
  cmd->add_option("--price-per-gpu-hour", o->price,
                  "dollars per GPU-hour, one for every device (2.5) or one per device (h100_80gb=2.5,b200=4.9): "
                  "adds cost, and --objective cost ranks by dollars per token");
  cmd->add_option("--objective", o->objective, "rank by time (fastest) or cost (fewest GPU-hours); see Ranking below")
      ->default_val("time");
  cmd->add_option("--min-headroom", o->min_headroom,
                  "GiB of GPU memory a configuration must leave free, or it is dropped (--explain counts them); "
                  "default: 5% of the device's memory")
      ->type_name("GiB");
  cmd->add_option("--top", o->top, "how many configurations the ranked table lists")->default_val(5);
  cmd->add_flag("--explain", o->explain, "also list the configurations rejected or dropped and why");
  cmd->add_option("--plot", o->plot, "also write an SVG of the ranked configurations' step-time breakdown");
  add_common_options(cmd, o->common);
  cmd->get_option("--format")
      ->description(
          "output format: md (one section per table), csv (one table: a first column Table names the table of each row: "
          "plan, best per GPU count, best per device, rejected) or json (an object with one array per table)");
  cmd->footer(kRankingFooter);
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace tpsim
