#include "cli/validation.hpp"

#include <algorithm>
#include <cmath>

#include "io/error.hpp"
#include "model/interval.hpp"
#include "model/framework.hpp"
#include "model/metrics.hpp"

namespace tpsim {

std::vector<ResolvedRow> load_rows(Context& ctx, const std::vector<std::string>& tables,
                                   std::vector<std::string>& warnings, const MeasuredTableOptions& options,
                                   std::vector<std::string>* refused) {
  if (tables.empty()) throw Error("--table: give at least one measured table");
  std::vector<ResolvedRow> rows;
  for (const auto& path : tables) {
    MeasuredTable t = read_measured_table(path, options);
    warnings.insert(warnings.end(), t.warnings.begin(), t.warnings.end());
    for (auto& m : t.rows) {
      ResolvedRow r;
      r.model = m.architecture ? &ctx.row_model(*m.architecture) : ctx.catalog().find(m.model);
      if (!r.model) throw Error(m.where() + ": unknown model '" + m.model + "' (not in the catalogue or --models)");
      if (m.unfused_attention && !r.model->unfused_attention) {  // the row's Attention column
        ModelConfig unfused = *r.model;
        unfused.name += " (unfused attention)";
        use_megatron_core_attention(unfused);
        r.model = &ctx.row_model(unfused);
      }
      try {
        r.device = &ctx.device(m.gpu);
      } catch (const Error& e) {
        throw Error(m.where() + ": " + e.what());
      }
      const auto refuse = [&](const std::string& why) {
        if (!refused) throw Error(m.where() + ": " + why);
        refused->push_back(m.where() + ": " + why);
      };
      if (m.activation_cpu_offload) {
        refuse("activation CPU offload is not modelled yet");
        continue;
      }
      if (!m.unmodelled.empty()) {
        refuse(m.unmodelled);
        continue;
      }
      r.cfg = m.config();
      const CostParams& params = ctx.profile(m.gpu).params;
      if (const std::string why = check_config(*r.model, *r.device, params, r.cfg); !why.empty()) {
        refuse(why);
        continue;
      }
      if (const std::string why = check_measured_throughput(*r.model, *r.device, r.cfg, m.tokens_per_s); !why.empty())
        throw Error(m.where() + ": " + why);
      if (m.grad_accum > 0 && m.grad_accum != r.cfg.grad_accum())
        warnings.push_back(m.where() + ": GradAccum " + std::to_string(m.grad_accum) + " disagrees with ceil(" +
                           std::to_string(m.global_batch) + " / " + std::to_string(r.cfg.data_parallel()) + " / " +
                           std::to_string(m.micro_batch) + ") = " + std::to_string(r.cfg.grad_accum()));
      r.row = std::move(m);
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

std::vector<FitRow> fit_rows(Context& ctx, const std::vector<ResolvedRow>& rows, bool held_out) {
  std::vector<FitRow> out;
  for (const auto& r : rows) {
    FitRow f;
    f.model = r.model;
    f.device = r.device;
    f.base = held_out ? &ctx.held_out_base_profile(r.row.gpu).params : &ctx.base_profile(r.row.gpu).params;
    f.cfg = r.cfg;
    f.measured_tokens_per_s = r.row.tokens_per_s;
    f.where = r.row.where();
    out.push_back(f);
  }
  return out;
}

std::vector<const ParamInfo*> table_fit_parameters(Context& ctx, const std::vector<ResolvedRow>& rows) {
  std::vector<const ParamInfo*> params = default_table_fit_parameters();
  // Each framework's rows inform what FrameworkDef::fit_adds names beyond the default set (Megatron's:
  // the host's kernel-issue time that bounds their small passes, the per-step latency of a ring
  // inside a node that each tensor-parallel collective waits for); a default parameter is left out
  // when every framework among the rows lists it in fit_uninformed (Composer's recompute share and
  // overlap slowdown do not enter Megatron's rows, so those rows alone cannot tell them).
  std::vector<const FrameworkDef*> present;
  for (const ResolvedRow& r : rows)
    if (const FrameworkDef* def = &framework_def(r.cfg.layout.framework);
        std::find(present.begin(), present.end(), def) == present.end())
      present.push_back(def);
  std::erase_if(params, [&](const ParamInfo* p) {
    return !present.empty() && std::all_of(present.begin(), present.end(), [&](const FrameworkDef* def) {
      return std::find(def->fit_uninformed.begin(), def->fit_uninformed.end(), p->member) != def->fit_uninformed.end();
    });
  });
  for (Framework f : kAllFrameworks)  // in the enum's order, whatever the rows' order
    if (std::find(present.begin(), present.end(), &framework_def(f)) != present.end())
      for (double CostParams::*member : framework_def(f).fit_adds) params.push_back(&param_of(member));
  const ParamInfo& fp8_rate = gemm_rate_param(DType::kFp8);
  for (const auto& r : rows) {
    if (r.cfg.precision != Precision::kAmpFp8) continue;
    const auto& sources = ctx.base_profile(r.row.gpu).sources;
    const auto it = sources.find(std::string(fp8_rate.name));
    if (it == sources.end() || it->second.kind != SourceKind::kKernel) params.push_back(&fp8_rate);
    break;
  }
  return params;
}

std::vector<const ParamInfo*> parse_parameter_list(const std::string& flag, const std::string& text) {
  std::vector<const ParamInfo*> params;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const ParamInfo* param = find_param(name);
    if (!param) throw Error(flag + ": unknown parameter '" + name + "'");
    params.push_back(param);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return params;
}

RowResult predict_row(const ResolvedRow& r, const CostParams& params) {
  RowResult out;
  out.row = &r;
  out.prediction = predict(*r.model, *r.device, params, r.cfg);
  out.error = r.row.step_time_measured() ? out.prediction.step_s / r.row.measured_step_s - 1.0
                                         : (out.prediction.tokens_per_s - r.row.tokens_per_s) / r.row.tokens_per_s;
  return out;
}

ErrorSummary summarize_errors(const std::vector<double>& errors) {
  ErrorSummary s;
  s.rows = static_cast<int64_t>(errors.size());
  if (errors.empty()) return s;
  std::vector<double> abs;
  for (double e : errors) {
    abs.push_back(std::fabs(e));
    if (std::fabs(e) > 0.15) ++s.over_15;
  }
  double sum = 0;
  for (double a : abs) sum += a;
  s.mape = sum / static_cast<double>(abs.size());
  s.median_abs = quantile(abs, 0.5);
  s.max_abs = *std::max_element(abs.begin(), abs.end());
  s.p10 = quantile(errors, 0.1);
  s.p90 = quantile(errors, 0.9);
  return s;
}

}  // namespace tpsim
