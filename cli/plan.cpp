// tpsim plan: what to rent and how to run it. For each device and GPU count asked, every
// micro-batch, activation checkpointing choice and sharding strategy is predicted; those that fit
// are ranked by time to train (or cost), with the prediction interval carried through to time and
// cost. --explain says why the others were rejected.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>

#include "io/error.hpp"
#include "io/files.hpp"
#include "io/plots.hpp"
#include "io/progress.hpp"
#include "model/simulator.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/report.hpp"
#include "cli/run_settings.hpp"

namespace tpsim {
namespace {

struct PlanOptions {
  CommonOptions common;
  RunFlags run;
  std::string devices = "h100_80gb", gpus, tokens, batch_tokens, price, objective = "time", plot;
  int top = 5;
  bool explain = false;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Candidate {
  std::string device;
  TrainConfig cfg;
  Prediction p;
  std::optional<PredictionInterval> interval;
  std::string batch_note;  // how the global batch was reached
  double score = 0;        // lower is better: seconds per token, or dollars (GPU-hours) per token
};

struct Rejection {
  std::string device;
  int64_t gpus = 0;
  std::string choice;  // "FULL_SHARD, checkpointing" ...
  std::string reason;
};

std::string choice_name(Sharding s, bool ckpt) {
  return std::string(to_string(s)) + (ckpt ? ", checkpointing" : ", no checkpointing");
}

void run_plan(const PlanOptions& o) {
  Context ctx(o.common);
  const RunSettings run = resolve_run(ctx, o.run);
  const ModelConfig& model = *run.model;
  const int64_t seq = *run.seq_len;
  const std::vector<std::string> devices = parse_name_list("--device", o.devices);
  for (const auto& d : devices) ctx.device(d);  // unknown device: Error, before any work
  ctx.check_profiles_used(devices);
  if (o.gpus.empty()) throw Error("--gpus: give the GPU counts to consider, as in 32,64,128");
  const std::vector<int64_t> gpu_counts = parse_count_list("--gpus", o.gpus, kMaxGpus);
  if (o.objective != "time" && o.objective != "cost") throw Error("--objective '" + o.objective + "': expected time or cost");
  if (o.top < 1 || o.top > 1000) throw Error("--top " + std::to_string(o.top) + ": expected 1 to 1000");
  const double train_tokens = o.tokens.empty() ? 0.0 : parse_tokens("--tokens", o.tokens);
  double price = 0;
  if (!o.price.empty()) {
    size_t used = 0;
    try {
      price = std::stod(o.price, &used);
    } catch (...) {
      used = 0;
    }
    if (used != o.price.size() || !std::isfinite(price) || price <= 0 || price > 1e6)
      throw Error("--price-per-gpu-hour '" + o.price + "': expected a positive number of dollars");
  }
  if (o.objective == "cost" && price == 0) throw Error("--objective cost needs --price-per-gpu-hour");

  // The global batch asked, in sequences.
  double asked_sequences = 0;
  std::string asked_from;
  if (!o.batch_tokens.empty()) {
    asked_sequences = parse_tokens("--global-batch-tokens", o.batch_tokens) / static_cast<double>(seq);
    asked_from = "--global-batch-tokens " + o.batch_tokens;
  } else if (run.global_batch) {
    asked_sequences = static_cast<double>(*run.global_batch);
    asked_from = "global_train_batch_size " + std::to_string(*run.global_batch) + " in " + run.config_origin;
  } else {
    asked_sequences = 4.0 * 1024 * 1024 / static_cast<double>(seq);
    asked_from = "the default of 4Mi tokens per step";
  }

  std::vector<Sharding> shardings(kAllShardings.begin(), kAllShardings.end());
  if (run.sharding && !o.run.sharding.empty()) shardings = {*run.sharding};
  std::vector<bool> ckpts = {false, true};
  if (o.run.ckpt) ckpts = {*o.run.ckpt};
  // --micro-batch N on the command line plans that micro-batch only; auto (or none) scans them all.
  std::optional<int64_t> fixed_micro_batch;
  if (!o.run.micro_batch.empty() && !run.micro_batch_auto) fixed_micro_batch = run.micro_batch;

  std::vector<Candidate> fits;
  std::vector<Rejection> rejected;
  Progress progress("plan", static_cast<int64_t>(devices.size() * gpu_counts.size()));
  int64_t step = 0;
  for (const auto& device_id : devices) {
    const DeviceSpec& device = ctx.device(device_id);
    const DeviceProfile& profile = ctx.profile(device_id);
    const auto interval = prediction_interval(profile);
    for (int64_t n : gpu_counts) {
      progress.update(step++);
      // Whole sequences per GPU, as close to the asked batch as that allows.
      const double per_gpu = std::round(asked_sequences / static_cast<double>(n));
      if (per_gpu < 1) {
        char why[200];
        std::snprintf(why, sizeof why, "global batch not reachable: %.0f sequences (%s) is fewer than one per GPU",
                      asked_sequences, asked_from.c_str());
        rejected.push_back({device_id, n, "all", why});
        continue;
      }
      TrainConfig base;
      base.seq_len = seq;
      base.n_gpus = n;
      base.global_batch = static_cast<int64_t>(per_gpu) * n;
      base.precision = run.precision;
      base.mp_mode = run.mp_mode;
      const double got = static_cast<double>(base.global_batch);
      std::string note = std::fabs(got - asked_sequences) < 0.5
                             ? "as asked"
                             : "asked " + std::to_string(static_cast<int64_t>(std::llround(asked_sequences))) +
                                   " sequences; " + std::to_string(base.global_batch) + " is the nearest multiple of " +
                                   std::to_string(n) + " GPUs";
      for (Sharding sh : shardings) {
        for (bool ckpt : ckpts) {
          TrainConfig cfg = base;
          cfg.sharding = sh;
          cfg.activation_checkpointing = ckpt;
          cfg.micro_batch = 1;
          if (const std::string why = check_config(model, device, profile.params, cfg); !why.empty()) {
            rejected.push_back({device_id, n, choice_name(sh, ckpt), why});
            continue;
          }
          const int64_t first = fixed_micro_batch.value_or(1);
          if (first > cfg.per_device_batch()) {
            rejected.push_back({device_id, n, choice_name(sh, ckpt),
                                "--micro-batch " + std::to_string(first) + " is more than the " +
                                    std::to_string(cfg.per_device_batch()) + " sequences per GPU of the global batch"});
            continue;
          }
          const int64_t last = fixed_micro_batch ? first : cfg.per_device_batch();
          int64_t largest_fit = 0;
          double smallest_peak = 0;
          // Up to the first micro-batch that does not fit: memory grows with the micro-batch.
          for (int64_t mb = first; mb <= last; ++mb) {
            cfg.micro_batch = mb;
            const Prediction p = predict(model, device, profile.params, cfg);
            if (mb == first) smallest_peak = p.memory.peak_bytes;
            if (!p.fits()) break;
            largest_fit = mb;
            const double seconds_per_token = 1.0 / p.tokens_per_s;
            const double score = o.objective == "cost" ? seconds_per_token * static_cast<double>(n) : seconds_per_token;
            fits.push_back({device_id, cfg, p, interval, note, score});
          }
          if (largest_fit == 0) {
            char why[160];
            std::snprintf(why, sizeof why, "out of memory: a micro-batch of %lld needs %.1f GiB of %.1f GiB",
                          static_cast<long long>(first), smallest_peak / kGiB, device.memory_bytes / kGiB);
            rejected.push_back({device_id, n, choice_name(sh, ckpt), why});
          } else if (!fixed_micro_batch && largest_fit < cfg.per_device_batch()) {
            rejected.push_back({device_id, n, choice_name(sh, ckpt),
                                "out of memory for micro-batches above " + std::to_string(largest_fit)});
          }
        }
      }
    }
  }
  progress.finish();
  std::stable_sort(fits.begin(), fits.end(), [](const Candidate& a, const Candidate& b) { return a.score < b.score; });

  // The ranked table.
  OutputTable ranked;
  ranked.title = "plan";
  ranked.columns = {"Rank", "GPU", "# GPUs", "MicroBatchSize", "GradAccum", "GlobalBatchSize", "GlobalBatchSize (T)",
                    "Activation Checkpointing", "Sharding Strategy", "Throughput (T/s)", "Throughput Low (T/s)",
                    "Throughput High (T/s)", "MFU", "HFU", "Memory (GiB)", "Headroom (GiB)"};
  if (train_tokens > 0) {
    for (const char* c : {"Time to Train (days)", "Time Low (days)", "Time High (days)", "GPU-hours"}) ranked.columns.emplace_back(c);
    if (price > 0)
      for (const char* c : {"Cost ($)", "Cost Low ($)", "Cost High ($)"}) ranked.columns.emplace_back(c);
  }
  ranked.columns.emplace_back("Global Batch");
  StackedBars bars;
  bars.title = "Step time of the ranked configurations";
  bars.y_label = "seconds per optimizer step";
  bars.series = {"GEMM", "attention", "other compute", "exposed communication", "optimizer", "overhead"};
  const auto emit_row = [&](const Candidate& c, int rank) {
    const Prediction& p = c.p;
    const double t = p.tokens_per_s;
    const double lo = c.interval ? interval_low(t, *c.interval) : t, hi = c.interval ? interval_high(t, *c.interval) : t;
    std::vector<Cell> row = {Cell::integer_value(rank), Cell::str(c.device), Cell::integer_value(c.cfg.n_gpus),
                             Cell::integer_value(c.cfg.micro_batch), Cell::integer_value(c.cfg.grad_accum()),
                             Cell::integer_value(c.cfg.global_batch), Cell::integer_value(c.cfg.global_batch * c.cfg.seq_len),
                             Cell::flag(c.cfg.activation_checkpointing), Cell::str(std::string(to_string(c.cfg.sharding))),
                             Cell::integer_value(static_cast<int64_t>(t)),
                             c.interval ? Cell::integer_value(static_cast<int64_t>(lo)) : Cell::empty(),
                             c.interval ? Cell::integer_value(static_cast<int64_t>(hi)) : Cell::empty(),
                             Cell::num(100 * p.mfu, 2), Cell::num(100 * p.hfu, 2), Cell::num(p.memory.peak_bytes / kGiB, 1),
                             Cell::num((p.capacity_bytes - p.memory.peak_bytes) / kGiB, 1)};
    if (train_tokens > 0) {
      const double days = train_tokens / t / 86400.0;
      const double gpu_hours = days * 24.0 * static_cast<double>(c.cfg.n_gpus);
      row.push_back(Cell::num(days, 2));
      row.push_back(c.interval ? Cell::num(train_tokens / hi / 86400.0, 2) : Cell::empty());
      row.push_back(c.interval ? Cell::num(train_tokens / lo / 86400.0, 2) : Cell::empty());
      row.push_back(Cell::num(gpu_hours, 0));
      if (price > 0) {
        row.push_back(Cell::num(gpu_hours * price, 0));
        row.push_back(c.interval ? Cell::num(gpu_hours * price * t / hi, 0) : Cell::empty());
        row.push_back(c.interval ? Cell::num(gpu_hours * price * t / lo, 0) : Cell::empty());
      }
    }
    row.push_back(Cell::str(c.batch_note));
    ranked.add_row(std::move(row));
    static const char* kShort[] = {"full", "grad-op", "no-shard", "hybrid"};
    bars.bars.push_back("#" + std::to_string(rank) + " " + c.device + " x" + std::to_string(c.cfg.n_gpus) + " mb" +
                        std::to_string(c.cfg.micro_batch) + " " + kShort[static_cast<int>(c.cfg.sharding)] +
                        (c.cfg.activation_checkpointing ? " ckpt" : ""));
    bars.values.push_back({p.time.gemm_s, p.time.attention_s, p.time.other_compute_s, p.time.exposed_comm_s,
                           p.time.optimizer_s, p.time.overhead_s});
  };
  for (size_t i = 0; i < fits.size() && static_cast<int>(i) < o.top; ++i) emit_row(fits[i], static_cast<int>(i) + 1);
  std::vector<OutputTable> out = {ranked};

  // Side by side: the best of each device.
  if (devices.size() > 1) {
    OutputTable best;
    best.title = "best per device";
    best.columns = {"GPU", "# GPUs", "MicroBatchSize", "Activation Checkpointing", "Sharding Strategy", "Throughput (T/s)", "MFU"};
    if (train_tokens > 0) best.columns.emplace_back("Time to Train (days)");
    if (train_tokens > 0 && price > 0) best.columns.emplace_back("Cost ($)");
    for (const auto& d : devices) {
      const auto it = std::find_if(fits.begin(), fits.end(), [&](const Candidate& c) { return c.device == d; });
      if (it == fits.end()) {
        std::vector<Cell> row(best.columns.size());
        row[0] = Cell::str(d);
        row[1] = Cell::str("nothing fits");
        best.add_row(std::move(row));
        continue;
      }
      std::vector<Cell> row = {Cell::str(d), Cell::integer_value(it->cfg.n_gpus), Cell::integer_value(it->cfg.micro_batch),
                               Cell::flag(it->cfg.activation_checkpointing), Cell::str(std::string(to_string(it->cfg.sharding))),
                               Cell::integer_value(static_cast<int64_t>(it->p.tokens_per_s)), Cell::num(100 * it->p.mfu, 2)};
      const double days = train_tokens / it->p.tokens_per_s / 86400.0;
      if (train_tokens > 0) row.push_back(Cell::num(days, 2));
      if (train_tokens > 0 && price > 0) row.push_back(Cell::num(days * 24.0 * static_cast<double>(it->cfg.n_gpus) * price, 0));
      best.add_row(std::move(row));
    }
    out.push_back(best);
  }
  if (o.explain) {
    OutputTable why;
    why.title = "rejected";
    why.columns = {"GPU", "# GPUs", "Choice", "Reason"};
    for (const auto& r : rejected)
      why.add_row({Cell::str(r.device), Cell::integer_value(r.gpus), Cell::str(r.choice), Cell::str(r.reason)});
    out.push_back(why);
  }
  print_notes(run);
  if (!o.plot.empty()) write_file_atomic(o.plot, stacked_bars_svg(bars));
  emit(render(out, ctx.format()), ctx.output());
  if (fits.empty()) {
    std::cerr << "tpsim: nothing fits: no configuration of " << model.name << " at sequence length " << seq
              << " fits on the devices and GPU counts given" << (o.explain ? "" : " (--explain says why)") << "\n";
  }
}

}  // namespace

void register_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "rank the configurations that fit by time to train or cost");
  add_run_flags(cmd, o->run, /*with_sharding_and_ckpt=*/true);
  cmd->add_option("--device", o->devices, "device id(s), comma-separated, compared side by side")->default_val("h100_80gb");
  cmd->add_option("--gpus", o->gpus, "GPU counts to consider: list (32,64,128) or range by powers of two (8..512)");
  cmd->add_option("--tokens", o->tokens, "tokens to train (1T = 1e12): adds time to train, GPU-hours and cost");
  cmd->add_option("--global-batch-tokens", o->batch_tokens, "tokens per optimizer step (4M = 4e6, 4Mi = 2^22)");
  cmd->add_option("--price-per-gpu-hour", o->price, "dollars per GPU-hour: adds cost");
  cmd->add_option("--objective", o->objective, "rank by time (fastest) or cost (fewest GPU-hours)")->default_val("time");
  cmd->add_option("--top", o->top, "how many configurations to list")->default_val(5);
  cmd->add_flag("--explain", o->explain, "also list the configurations rejected and why");
  cmd->add_option("--plot", o->plot, "also write an SVG of the ranked configurations' step-time breakdown");
  add_common_options(cmd, o->common);
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace tpsim
