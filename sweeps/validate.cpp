// tpsim validate: predict every row of measured tables at the row's own configuration and report
// the errors, per row and summarised (all rows, per GPU type, per model).
#include <iostream>
#include <map>
#include <memory>

#include "io/error.hpp"
#include "sweeps/commands.hpp"
#include "sweeps/context.hpp"
#include "sweeps/validation.hpp"

namespace tpsim {
namespace {

struct ValidateOptions {
  CommonOptions common;
  std::vector<std::string> tables;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

OutputTable summary_table(const std::vector<RowResult>& results) {
  OutputTable t;
  t.title = "summary";
  t.columns = {"Scope", "Rows", "MAPE (%)", "Median |Error| (%)", "Max |Error| (%)", "Rows > 15%",
               "P10 Error (%)", "P90 Error (%)"};
  std::vector<std::pair<std::string, std::vector<double>>> scopes = {{"all", {}}};
  std::map<std::string, size_t> index;
  const auto add = [&](const std::string& scope, double e) {
    auto it = index.find(scope);
    if (it == index.end()) {
      it = index.emplace(scope, scopes.size()).first;
      scopes.push_back({scope, {}});
    }
    scopes[it->second].second.push_back(e);
  };
  for (const auto& r : results) {
    scopes[0].second.push_back(r.error);
    add("GPU " + r.row->row.gpu, r.error);
  }
  for (const auto& r : results) add("model " + r.row->row.model, r.error);
  for (const auto& [scope, errors] : scopes) {
    const ErrorSummary s = summarize(errors);
    t.add_row({Cell::str(scope), Cell::integer_value(s.rows), Cell::num(100 * s.mape, 2),
               Cell::num(100 * s.median_abs, 2), Cell::num(100 * s.max_abs, 2), Cell::integer_value(s.over_15),
               Cell::num(100 * s.p10, 2), Cell::num(100 * s.p90, 2)});
  }
  return t;
}

void run_validate(const ValidateOptions& o) {
  Context ctx(o.common);
  std::vector<std::string> warnings;
  const std::vector<ResolvedRow> rows = load_rows(ctx, o.tables, warnings);
  for (const auto& w : warnings) std::cerr << "tpsim: warning: " << w << "\n";

  std::vector<RowResult> results;
  for (const auto& r : rows) results.push_back(predict_row(r, ctx.profile(r.row.gpu).params));

  OutputTable summary = summary_table(results);
  if (ctx.format() == Format::kCsv) {
    // The input's columns (of the first table), then the predictions.
    OutputTable t;
    t.title = "validate";
    for (const auto& [col, _] : rows.front().row.cells) t.columns.push_back(col);
    for (const char* c : {"Predicted Throughput (T/s)", "Predicted MFU", "Predicted HFU", "Predicted Memory (GiB)",
                          "Error (%)"})
      t.columns.emplace_back(c);
    const size_t n_in = t.columns.size() - 5;
    for (const auto& r : results) {
      std::vector<Cell> row(n_in);
      for (const auto& [col, cell] : r.row->row.cells)
        for (size_t i = 0; i < n_in; ++i)
          if (t.columns[i] == col) row[i] = Cell::str(cell);
      const Prediction& p = r.prediction;
      row.push_back(Cell::num(p.tokens_per_s, 0));
      row.push_back(Cell::num(100 * p.mfu, 2));
      row.push_back(Cell::num(100 * p.hfu, 2));
      row.push_back(Cell::num(p.memory.peak_bytes / kGiB, 1));
      row.push_back(Cell::num(100 * r.error, 2));
      t.add_row(std::move(row));
    }
    emit(render({t}, Format::kCsv), ctx.output());
    std::cerr << render({summary}, Format::kMarkdown);
    return;
  }

  OutputTable t;
  t.title = "rows";
  t.columns = {"Source", "Model", "SeqLen (T)", "# GPUs", "GPU", "MicroBatchSize", "GradAccum", "GlobalBatchSize",
               "Precision", "MP Mode", "Sharding Strategy", "Activation Checkpointing", "Throughput (T/s)",
               "Predicted Throughput (T/s)", "Error (%)", "MFU", "Predicted MFU", "HFU", "Predicted HFU",
               "Predicted Memory (GiB)", "Fits"};
  for (const auto& r : results) {
    const MeasuredRow& m = r.row->row;
    const Prediction& p = r.prediction;
    const auto measured = [](double v) { return v >= 0 ? Cell::num(v, 2) : Cell::empty(); };
    t.add_row({Cell::str(m.where()), Cell::str(m.model), Cell::integer_value(m.seq_len), Cell::integer_value(m.n_gpus),
               Cell::str(m.gpu), Cell::integer_value(m.micro_batch), Cell::integer_value(r.row->cfg.grad_accum()),
               Cell::integer_value(m.global_batch), Cell::str(std::string(to_string(m.precision))),
               Cell::str(std::string(to_string(m.mp_mode))), Cell::str(std::string(to_string(m.sharding))),
               Cell::flag(m.activation_checkpointing), Cell::num(m.tokens_per_s, 0), Cell::num(p.tokens_per_s, 0),
               Cell::num(100 * r.error, 2), measured(m.mfu_percent), Cell::num(100 * p.mfu, 2),
               measured(m.hfu_percent), Cell::num(100 * p.hfu, 2), Cell::num(p.memory.peak_bytes / kGiB, 1),
               Cell::str(p.fits() ? "yes" : "no")});
  }
  emit(render({t, summary}, ctx.format()), ctx.output());
}

}  // namespace

void register_validate(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  CLI::App* cmd = app.add_subcommand("validate", "predict measured llm-foundry tables row by row and report the errors");
  cmd->add_option("--table", o->tables, "llm-foundry results table, markdown or CSV (repeatable)")->required();
  add_common_options(cmd, o->common);
  cmd->callback([o] { run_validate(*o); });
}

}  // namespace tpsim
