#include "io/profile_io.hpp"

#include <cmath>
#include <ctime>
#include <array>

#include "io/error.hpp"
#include "io/devices.hpp"
#include "io/files.hpp"
#include "io/text_format.hpp"

namespace tpsim {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr std::array kSourceKinds = {SourceKind::kDatasheet, SourceKind::kKernel,  SourceKind::kTableFit,
                                     SourceKind::kComm,      SourceKind::kAssumed, SourceKind::kDerived};
}

std::string_view to_string(SourceKind kind) {
  switch (kind) {
    case SourceKind::kDatasheet: return "datasheet";
    case SourceKind::kKernel: return "kernel";
    case SourceKind::kTableFit: return "table-fit";
    case SourceKind::kComm: return "comm";
    case SourceKind::kAssumed: return "assumed";
    case SourceKind::kDerived: return "derived";
  }
  return "?";
}

std::optional<SourceKind> parse_source_kind(std::string_view text) {
  for (SourceKind k : kSourceKinds)
    if (to_string(k) == text) return k;
  return std::nullopt;
}

namespace {
DeviceProfile parse_profile_json_unguarded(const std::string& text, const std::string& origin);

// A string field of an object: "" when absent, an Error when present but not a string.
std::string string_field(const json& o, const char* key, const std::string& where) {
  if (!o.contains(key)) return "";
  if (!o[key].is_string()) throw Error(where + ": \"" + key + "\" must be a string");
  return o[key].get<std::string>();
}
}  // namespace

DeviceProfile parse_profile_json(const std::string& text, const std::string& origin) {
  try {
    return parse_profile_json_unguarded(text, origin);
  } catch (const json::exception& e) {
    // A field of an unexpected type that a check above missed: still one line naming the file.
    throw Error(origin + ": unexpected JSON: " + e.what());
  }
}

namespace {

// The header a profile must have: a JSON object of format "tpsim-profile", this version, a device
// id and a parameters object.
void check_profile_header(const json& j, const std::string& origin) {
  if (!j.is_object()) throw Error(origin + ": a profile must be a JSON object");
  if (string_field(j, "format", origin) != "tpsim-profile")
    throw Error(origin + ": not a tpsim profile (\"format\" is not \"tpsim-profile\")");
  if (!j.contains("version") || !j["version"].is_number_integer())
    throw Error(origin + ": missing integer \"version\"");
  if (j["version"].get<int64_t>() != kProfileVersion)
    throw Error(origin + ": profile version " + j["version"].dump() + " is not supported (this tpsim reads version " +
                std::to_string(kProfileVersion) + ")");
  if (!j.contains("device")) throw Error(origin + ": missing \"device\"");
  if (!j["device"].is_string())
    throw Error(origin + ": \"device\" must be a string (a device id), not a " + std::string(j["device"].type_name()));
  if (!j.contains("parameters") || !j["parameters"].is_object())
    throw Error(origin + ": missing \"parameters\" object");
}

// A parameter added after some profiles were written: absent from such a profile, its value and
// source are set here (true); false for every other parameter, which a profile must carry.
bool absent_parameter_default(const ParamInfo& info, const std::string& name, DeviceProfile& p) {
  if (info.member == &CostParams::host_kernel_issue_s) {
    // Added with the Megatron path (Composer's predictions do not use it): a profile written before
    // it existed keeps its reasoned default and says so.
    p.sources[name] = {
        SourceKind::kAssumed,
        "eager PyTorch's host time per op, ~10-30 us (not in this profile: written before the parameter existed)", -1};
    return true;
  }
  if (!info.member && info.dtype == DType::kFp4) {
    // Added with the fp4 formats: a profile written before it has no fp4 rate (no device it
    // described had fp4 tensor cores), which is 0, unsupported.
    p.params.gemm_flops_per_s(DType::kFp4) = 0;
    p.sources[name] = {SourceKind::kDatasheet,
                       "no fp4 rate (not in this profile: written before the parameter existed)", -1};
    return true;
  }
  if ((info.member == &CostParams::attn_native_fwd_efficiency ||
       info.member == &CostParams::attn_native_bwd_efficiency)) {
    // Added with the native attention kernels (Megatron-Core's TransformerEngine): a profile written
    // before them knows none, 0, and the fitted kernel's rate stands in.
    info.value(p.params) = 0;
    p.sources[name] = {SourceKind::kAssumed,
                       "none known (not in this profile: written before the parameter existed); the fitted kernel's "
                       "rate stands in",
                       -1};
    return true;
  }
  if ((info.member == &CostParams::allocator_headroom_bytes || info.member == &CostParams::allocator_retry_slowdown)) {
    // Added with the allocator's retries near full memory: a profile written before keeps the
    // values fitted to the seed tables' runs (CostParams) and says so.
    p.sources[name] = {SourceKind::kTableFit,
                       "the seed tables' value (not in this profile: written before the parameter existed)", -1};
    return true;
  }
  return false;
}

// The entry `e` of parameter `name` into `p`: its value within the registry's bounds and its source.
void read_parameter(const json& e, const ParamInfo& info, const std::string& name, const std::string& origin,
                    DeviceProfile& p) {
  if (!e.is_object() || !e.contains("value") || !e["value"].is_number())
    throw Error(origin + ": parameter \"" + name + "\" needs a numeric \"value\"");
  const double v = e["value"].get<double>();
  if (!std::isfinite(v) || v < info.lower || v > info.upper)
    throw Error(origin + ": parameter \"" + name + "\" = " + e["value"].dump() + " is outside its physical range [" +
                json(info.lower).dump() + ", " + json(info.upper).dump() + "] " + std::string(to_string(info.unit)));
  info.value(p.params) = v;
  ParamSource src;
  const std::string kind = string_field(e, "source", origin + ": parameter \"" + name + "\"");
  const std::optional<SourceKind> parsed = parse_source_kind(kind);
  if (!parsed)
    throw Error(origin + ": parameter \"" + name + "\" has source \"" + kind +
                "\"; expected datasheet, kernel, table-fit, comm, assumed or derived");
  src.kind = *parsed;
  src.detail = string_field(e, "detail", origin + ": parameter \"" + name + "\"");
  if (e.contains("stddev") && e["stddev"].is_number()) src.stddev = e["stddev"].get<double>();
  p.sources[name] = src;
}

DeviceProfile parse_profile_json_unguarded(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(origin + ": not valid JSON (byte " + std::to_string(e.byte) + ")");
  }
  check_profile_header(j, origin);
  DeviceProfile p;
  p.origin = origin;
  p.device = j["device"].get<std::string>();
  const json& params = j["parameters"];
  for (const auto& [key, _] : params.items())
    if (!find_param(key)) throw Error(origin + ": unknown parameter \"" + key + "\"");
  for (const ParamInfo& info : cost_param_registry()) {
    const std::string name(info.name);
    if (!params.contains(name) && absent_parameter_default(info, name, p)) continue;
    if (!params.contains(name)) throw Error(origin + ": missing parameter \"" + name + "\"");
    read_parameter(params[name], info, name, origin, p);
  }
  if (j.contains("device_spec")) {
    p.device_spec = parse_device_json(j["device_spec"], origin + " (device_spec)");
    if (p.device_spec->id != p.device)
      throw Error(origin + ": device_spec describes '" + p.device_spec->id + "', the profile is for '" + p.device +
                  "'");
  }
  for (const auto& [key, value] : j.items())
    if (key != "format" && key != "version" && key != "device" && key != "parameters" && key != "device_spec")
      p.extra[key] = value;
  prediction_interval(p);  // a malformed interval is an error here, not at first use
  profile_network(p);      // and a malformed network
  return p;
}
}  // namespace

std::optional<PredictionInterval> prediction_interval(const DeviceProfile& profile) {
  if (!profile.extra.contains("prediction_interval")) return std::nullopt;
  const json& j = profile.extra["prediction_interval"];
  const std::string where = profile.origin.empty() ? "profile" : profile.origin;
  if (!j.is_object() || !j.contains("p10") || !j.contains("p90") || !j["p10"].is_number() || !j["p90"].is_number())
    throw Error(where + ": \"prediction_interval\" needs numeric \"p10\" and \"p90\"");
  PredictionInterval i;
  i.p10 = j["p10"].get<double>();
  i.p90 = j["p90"].get<double>();
  if (!std::isfinite(i.p10) || !std::isfinite(i.p90) || i.p10 > i.p90 || i.p10 <= -1.0)
    throw Error(where + ": \"prediction_interval\" must have -1 < p10 <= p90");
  i.rows = j.contains("rows") && j["rows"].is_number_integer() ? j["rows"].get<int64_t>() : 0;
  i.method = j.contains("method") && j["method"].is_string() ? j["method"].get<std::string>() : "";
  if (!j.contains("domain") && !j.contains("widening")) return i;
  if (!j.contains("domain") || !j.contains("widening"))
    throw Error(where + ": \"prediction_interval\" needs both \"domain\" and \"widening\", or neither");
  const json& d = j["domain"];
  FitDomain domain;
  const std::pair<const char*, double DomainPoint::*> axes[] = {{"parameters", &DomainPoint::parameters},
                                                                {"seq_len", &DomainPoint::seq_len},
                                                                {"gpus", &DomainPoint::gpus},
                                                                {"micro_batch", &DomainPoint::micro_batch}};
  for (const auto& [name, member] : axes) {
    if (!d.is_object() || !d.contains(name) || !d[name].is_array() || d[name].size() != 2 || !d[name][0].is_number() ||
        !d[name][1].is_number())
      throw Error(where + ": \"prediction_interval.domain\" needs \"" + name + "\": [lowest, highest]");
    const double lo = d[name][0].get<double>(), hi = d[name][1].get<double>();
    if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo > 0) || lo > hi)
      throw Error(where + ": \"prediction_interval.domain." + name + "\" must have 0 < lowest <= highest");
    domain.lo.*member = lo;
    domain.hi.*member = hi;
  }
  const json& w = j["widening"];
  if (!w.is_object() || !w.contains("per_doubling") || !w["per_doubling"].is_number())
    throw Error(where + ": \"prediction_interval.widening\" needs a numeric \"per_doubling\"");
  i.widening_per_doubling = w["per_doubling"].get<double>();
  if (!std::isfinite(i.widening_per_doubling) || i.widening_per_doubling < 0 || i.widening_per_doubling > 10)
    throw Error(where + ": \"prediction_interval.widening.per_doubling\" must be in [0, 10]");
  i.widening_method = w.contains("method") && w["method"].is_string() ? w["method"].get<std::string>() : "";
  i.domain = domain;
  return i;
}

IntervalModel interval_model(const PredictionInterval& i) {
  return {{i.p10, i.p90}, i.domain, i.widening_per_doubling};
}

std::optional<ProfileNetwork> profile_network(const DeviceProfile& profile) {
  if (!profile.extra.contains("network")) return std::nullopt;
  const json& j = profile.extra["network"];
  const std::string where = profile.origin.empty() ? "profile" : profile.origin;
  if (!j.is_object() || !j.contains("inter_node_gbps") || !j.contains("gpus_per_node") ||
      !j["inter_node_gbps"].is_number() || !j["gpus_per_node"].is_number_integer())
    throw Error(where + ": \"network\" needs a numeric \"inter_node_gbps\" and a whole \"gpus_per_node\"");
  ProfileNetwork n;
  n.inter_node_gbps = j["inter_node_gbps"].get<double>();
  n.gpus_per_node = j["gpus_per_node"].get<int64_t>();
  if (!std::isfinite(n.inter_node_gbps) || !(n.inter_node_gbps > 0) || n.gpus_per_node < 1)
    throw Error(where + ": \"network\" must have a positive inter_node_gbps and gpus_per_node");
  return n;
}

void set_profile_network(DeviceProfile& profile, const DeviceSpec& d) {
  profile.extra["network"] = {
      {"inter_node_gbps", d.inter_node_bytes_per_s * 8.0 / 1e9},
      {"gpus_per_node", d.gpus_per_node},
      {"meaning", "the cluster network the parameters were fitted on (per node, per direction)"}};
}

std::string network_mismatch_note(const DeviceProfile& profile, const DeviceSpec& d) {
  const std::optional<ProfileNetwork> n = profile_network(profile);
  if (!n) return "";
  const double gbps = d.inter_node_bytes_per_s * 8.0 / 1e9;
  if (std::fabs(gbps - n->inter_node_gbps) <= 1e-9 * n->inter_node_gbps && d.gpus_per_node == n->gpus_per_node)
    return "";
  const auto text = [](double g, int64_t per_node) {
    return general(g, 6) + " Gbit/s per node of " + std::to_string(per_node) + " GPUs";
  };
  return "the " + d.id + " profile " + (profile.origin.empty() ? "" : profile.origin + " ") + "was fitted on " +
         text(n->inter_node_gbps, n->gpus_per_node) + "; this run's network is " + text(gbps, d.gpus_per_node);
}

void set_prediction_interval(DeviceProfile& profile, const PredictionInterval& interval) {
  json j = {{"p10", interval.p10},
            {"p90", interval.p90},
            {"rows", interval.rows},
            {"method", interval.method},
            {"meaning", "10th and 90th percentiles of held-out predicted/measured - 1"}};
  if (interval.domain) {
    const FitDomain& d = *interval.domain;
    j["domain"] = {{"parameters", {d.lo.parameters, d.hi.parameters}},
                   {"seq_len", {d.lo.seq_len, d.hi.seq_len}},
                   {"gpus", {d.lo.gpus, d.hi.gpus}},
                   {"micro_batch", {d.lo.micro_batch, d.hi.micro_batch}},
                   {"meaning", "the span of the fitted rows; the interval holds within it"}};
    j["widening"] = {{"per_doubling", interval.widening_per_doubling},
                     {"method", interval.widening_method},
                     {"meaning",
                      "added to each side of log(1 + error) per doubling outside the domain, summed over "
                      "its axes (model/interval.hpp)"}};
  }
  profile.extra["prediction_interval"] = std::move(j);
}

DeviceProfile load_profile(const fs::path& path) {
  return parse_profile_json(read_text_file(path, "profile"), path.string());
}

namespace {
DeviceProfile load_device_profile(const fs::path& path, const std::string& device_id) {
  if (!fs::exists(path)) throw Error("no profile for device " + device_id + " (" + path.string() + ")");
  DeviceProfile p = load_profile(path);
  if (p.device != device_id) throw Error(path.string() + ": profile is for device " + p.device + ", not " + device_id);
  return p;
}
}  // namespace

DeviceProfile load_shipped_profile(const std::string& device_id) {
  const fs::path fitted = data_dir() / "profiles" / (device_id + ".json");
  if (fs::exists(fitted)) return load_device_profile(fitted, device_id);
  return load_default_profile(device_id);
}

DeviceProfile load_default_profile(const std::string& device_id) {
  return load_device_profile(data_dir() / "profiles" / "defaults" / (device_id + ".json"), device_id);
}

std::string profile_to_json(const DeviceProfile& p) {
  // Written in reading order: what the profile is, its parameters, then how it was made.
  nlohmann::ordered_json j;
  j["format"] = "tpsim-profile";
  j["version"] = kProfileVersion;
  j["device"] = p.device;
  if (p.device_spec) j["device_spec"] = device_spec_to_json(*p.device_spec);
  nlohmann::ordered_json params = nlohmann::ordered_json::object();
  for (const ParamInfo& info : cost_param_registry()) {
    const std::string name(info.name);
    const auto it = p.sources.find(name);
    nlohmann::ordered_json e;
    e["value"] = info.value(p.params);
    e["unit"] = std::string(to_string(info.unit));
    e["source"] = std::string(to_string(it != p.sources.end() ? it->second.kind : SourceKind::kAssumed));
    e["detail"] = it != p.sources.end() ? it->second.detail : "";
    if (it != p.sources.end() && it->second.stddev >= 0) e["stddev"] = it->second.stddev;
    else e["stddev"] = nullptr;
    params[name] = e;
  }
  j["parameters"] = params;
  for (const char* key : {"network", "prediction_interval", "notes", "fit", "measurements"})
    if (p.extra.contains(key)) j[key] = p.extra[key];
  for (const auto& [key, value] : p.extra.items())
    if (!j.contains(key)) j[key] = value;
  return j.dump(2) + "\n";
}

void save_profile(const fs::path& path, const DeviceProfile& profile) {
  write_file_atomic(path, profile_to_json(profile));
}

std::string utc_timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

}  // namespace tpsim
