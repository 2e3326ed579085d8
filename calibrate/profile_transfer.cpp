#include "calibrate/profile_transfer.hpp"

#include <cmath>
#include <sstream>

#include "io/error.hpp"

namespace tpsim {
namespace {

std::string fmt(double x, int digits = 3) {
  std::ostringstream s;
  s.precision(digits);
  s << x;
  return s.str();
}

double log_ratio(double a, double b) { return a > 0 && b > 0 ? std::abs(std::log(a / b)) : 0.0; }

double nic_per_gpu(const DeviceSpec& d) { return d.gpus_per_node > 0 ? d.inter_node_bytes_per_s / d.gpus_per_node : 0; }

// The format whose achieved fraction stands in for `t` when the sibling has no rate of `t`.
DType stand_in(DType t, const CostParams& p) {
  if (t == DType::kFp4 && p.gemm_flops_per_s(DType::kFp8) > 0) return DType::kFp8;
  if (p.gemm_flops_per_s(DType::kBf16) > 0) return DType::kBf16;
  return DType::kFp16;
}

// Which datasheet figure a kept fraction multiplies, for the provenance.
std::string scaled_figure(const ParamInfo& info, const DeviceSpec& to, const DeviceSpec& from) {
  const std::string name(info.name);
  if (name == "membound_efficiency" || name == "xent_efficiency")
    return "a fraction of HBM bandwidth: the rate scales by the HBM ratio " +
           fmt(to.hbm_bytes_per_s / from.hbm_bytes_per_s);
  if (name == "intra_node_link_efficiency")
    return "a fraction of the scale-up link: the rate scales by its ratio " +
           fmt(to.intra_node_bytes_per_s / from.intra_node_bytes_per_s);
  if (name == "inter_node_link_efficiency")
    return "a fraction of the network: the rate per GPU scales by its ratio " +
           fmt(nic_per_gpu(to) / nic_per_gpu(from));
  if (name == "attn_fwd_efficiency" || name == "attn_bwd_efficiency" || name == "attn_native_fwd_efficiency" ||
      name == "attn_native_bwd_efficiency")
    return "a fraction of the bf16 GEMM rate: the rate scales with it";
  return "no datasheet figure changes it";
}

void transfer_gemm_rate(const TransferInput& in, const ParamInfo& info, DeviceProfile& out) {
  const DType t = info.dtype;
  const std::string name(info.name), tn(to_string(t)), from = in.sibling->id;
  double& rate = out.params.gemm_flops_per_s(t);
  if (!in.target->supports(t)) {
    rate = 0;
    out.sources[name] = {SourceKind::kDatasheet, in.target->id + " has no " + tn + " tensor-core peak", -1};
    return;
  }
  const CostParams& sp = in.sibling_profile->params;
  DType base = t;
  if (!(sp.gemm_flops_per_s(t) > 0 && in.sibling->supports(t))) base = stand_in(t, sp);
  const double fraction = sp.gemm_flops_per_s(base) / in.sibling->peak(base);
  if (!(fraction > 0) || !std::isfinite(fraction))
    throw Error("transfer from " + from + ": it has no achieved " + std::string(to_string(base)) +
                " GEMM rate to scale");
  rate = fraction * in.target->peak(t);
  const auto src = in.sibling_profile->sources.find(std::string(gemm_rate_param(base).name));
  const std::string how = src == in.sibling_profile->sources.end() ? "?" : std::string(to_string(src->second.kind));
  std::string detail = "transfer from " + from + ": its achieved fraction " + fmt(fraction) + " of its " +
                       std::string(to_string(base)) + " peak (" + how + ") x " + in.target->id + "'s datasheet " + tn +
                       " peak " + fmt(in.target->peak(t) / 1e12, 5) + " TFLOP/s";
  if (base != t)
    detail += " (" + from + " has no " + tn + " rate: the " + std::string(to_string(base)) + " fraction stands in)";
  else detail += " (peak ratio " + fmt(in.target->peak(t) / in.sibling->peak(t)) + ")";
  const double sd = src == in.sibling_profile->sources.end() ? -1 : src->second.stddev;
  out.sources[name] = {SourceKind::kDerived, detail, sd > 0 ? sd * rate / sp.gemm_flops_per_s(base) : -1};
}

}  // namespace

int sibling_tier(const DeviceSpec& target, const DeviceSpec& sibling) {
  if (target.vendor.empty() || target.vendor != sibling.vendor) return 2;
  return !target.architecture.empty() && target.architecture == sibling.architecture ? 0 : 1;
}

double datasheet_distance(const DeviceSpec& a, const DeviceSpec& b) {
  return log_ratio(a.peak(DType::kBf16), b.peak(DType::kBf16)) + log_ratio(a.hbm_bytes_per_s, b.hbm_bytes_per_s) +
         log_ratio(a.memory_bytes, b.memory_bytes) + log_ratio(a.intra_node_bytes_per_s, b.intra_node_bytes_per_s) +
         log_ratio(nic_per_gpu(a), nic_per_gpu(b));
}

double interval_widening(int tier, double distance) { return kTierWidening[tier] + kDistanceWidening * distance; }

bool measured_on_own_tables(const DeviceProfile& p) {
  if (!p.extra.contains("fit") || p.extra.contains("transfer")) return false;
  const auto& fit = p.extra["fit"];
  if (!fit.contains("fitted_devices") || !fit["fitted_devices"].is_array() || fit["fitted_devices"].size() != 1)
    return false;
  if (fit.contains("command") && fit["command"].is_string() &&
      fit["command"].get<std::string>().find("--transfer") != std::string::npos)
    return false;
  return fit["fitted_devices"][0] == p.device;
}

SiblingChoice nearest_sibling(const DeviceSpec& target, const std::vector<DeviceSpec>& candidates) {
  if (candidates.empty()) throw Error("transfer to " + target.id + ": no measured profile to start from");
  SiblingChoice best;
  bool any = false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const SiblingChoice c{i, sibling_tier(target, candidates[i]), datasheet_distance(target, candidates[i])};
    const auto key = [&](const SiblingChoice& s) {
      return std::make_tuple(s.tier, s.distance, candidates[s.index].id);
    };
    if (!any || key(c) < key(best)) best = c;
    any = true;
  }
  return best;
}

DeviceProfile transfer_profile(const TransferInput& in) {
  const DeviceSpec& to = *in.target;
  const DeviceSpec& from = *in.sibling;
  DeviceProfile out;
  out.device = to.id;
  out.params = in.sibling_profile->params;
  for (const ParamInfo& info : cost_param_registry()) {
    const std::string name(info.name);
    if (in.target_base) {
      const auto own = in.target_base->sources.find(name);
      if (own != in.target_base->sources.end() && own->second.kind == SourceKind::kKernel) {
        info.value(out.params) = info.value(in.target_base->params);
        out.sources[name] = own->second;  // measured on the target itself
        continue;
      }
    }
    if (!info.member) {
      transfer_gemm_rate(in, info, out);
      continue;
    }
    const auto src = in.sibling_profile->sources.find(name);
    const ParamSource s = src == in.sibling_profile->sources.end() ? ParamSource{} : src->second;
    out.sources[name] = {SourceKind::kDerived,
                         "transfer from " + from.id + ": kept (" + std::string(to_string(s.kind)) + " there; " +
                             scaled_figure(info, to, from) + ")",
                         s.stddev};
  }
  const double widen = interval_widening(in.choice.tier, in.choice.distance);
  const std::optional<PredictionInterval> sib = prediction_interval(*in.sibling_profile);
  if (!sib) throw Error("transfer from " + from.id + ": its profile has no prediction interval to widen");
  const char* tiers[] = {"same vendor and architecture", "same vendor, another architecture", "another vendor"};
  PredictionInterval interval = *sib;  // the sibling's domain and widening beyond it carry over
  interval.p10 = sib->p10 - widen;
  interval.p90 = sib->p90 + widen;
  interval.method = from.id + "'s held-out interval widened by " + fmt(widen) + " on each side (" +
                    tiers[in.choice.tier] + ", datasheet distance " + fmt(in.choice.distance) + "): not measured on " +
                    to.id;
  if (interval.domain) interval.widening_method = from.id + "'s: " + sib->widening_method;
  set_prediction_interval(out, interval);
  out.extra["transfer"] = {
      {"from", from.id},
      {"tier", in.choice.tier},
      {"tier_meaning", tiers[in.choice.tier]},
      {"datasheet_distance", in.choice.distance},
      {"interval_widening", widen},
      {"rule",
       "GEMM rates: the sibling's achieved fraction of its peak x this device's peak; "
       "fractions of datasheet figures and everything else kept (calibrate/profile_transfer.hpp)"}};
  out.extra["notes"] =
      "Transferred from " + from.id + " (fitted to its own tables); no table has measured " + to.id + ".";
  set_profile_network(out, to);
  return out;
}

}  // namespace tpsim
