#include "cli/context.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <iostream>

#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/hf_config.hpp"
#include "cli/report.hpp"

namespace tpsim {

void add_common_options(CLI::App* cmd, CommonOptions& o) {
  cmd->add_option(
      "--models", o.models_file,
      "more models: a YAML file (name -> llm-foundry model keys) or a Hugging Face config.json (or its folder)");
  cmd->add_option("--profile", o.profile_files, "device profile JSON (repeatable); applies to its own device");
  add_output_options(cmd, o);
}

void add_output_options(CLI::App* cmd, CommonOptions& o) {
  cmd->add_option("--format", o.format,
                  "output format: md, csv or json, with every column (default: md; on a terminal, without -o, "
                  "a compact table that fits its width)");
  cmd->add_option("-o,--output", o.output, "write the output to FILE (atomically) instead of stdout");
  cmd->add_option("--columns", o.columns,
                  "the columns to print, by header (any case), comma-separated: --columns Model,MFU,\"Memory (GiB)\"");
}

std::vector<std::string> take_models_file(const std::vector<std::string>& values, CommonOptions& common) {
  const auto ends = [](const std::string& v, const std::string& suffix) {
    return v.size() > suffix.size() && v.compare(v.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::vector<std::string> specs;
  for (const auto& v : values) {
    if (ends(v, ".yaml") || ends(v, ".yml") || is_hf_config_path(v)) {
      if (!common.models_file.empty()) throw Error("--models " + v + ": one models file per run");
      common.models_file = v;
    } else {
      specs.push_back(v);
    }
  }
  return specs;
}

Context::Context(const CommonOptions& o) : catalog_(ModelCatalog::load_default()) {
  out_.format = parse_format(o.format.empty() ? "md" : o.format);
  if (!o.columns.empty()) out_.columns = parse_column_list(o.columns);
  out_.layout = terminal_layout();
  if (terminal_view(stdout_is_terminal(), !o.format.empty(), !o.output.empty())) out_.width = terminal_width();
  if (!o.output.empty()) output_ = o.output;
  models_file_ = o.models_file;
  if (!o.models_file.empty()) catalog_.add_file(o.models_file, warnings_);
  for (const auto& path : o.profile_files) {
    DeviceProfile p = load_profile(path);
    if (p.device_spec) devices_.emplace(p.device, *p.device_spec);
    try {
      device(p.device);  // the profile's device must exist
    } catch (const Error& e) {
      throw Error("--profile " + path + ": " + e.what());
    }
    if (profiles_.count(p.device))
      throw Error("--profile " + path + ": a second profile for device " + p.device + " (one per device)");
    user_profiles_[p.device] = path;
    profiles_.emplace(p.device, std::move(p));
  }
  print_warnings();
}

std::string Context::render(const std::vector<OutputTable>& tables, Format format) const {
  OutputOptions o = out_;
  o.format = format;
  o.width = 0;
  return tpsim::render(tables, o);
}

const ModelConfig& Context::row_model(const ModelConfig& m) { return row_models_.try_emplace(m.name, m).first->second; }

const DeviceSpec& Context::device(const std::string& id) {
  auto it = devices_.find(id);
  if (it == devices_.end()) {
    it = devices_.emplace(id, load_device(id)).first;
    apply_network(it->second, network_);
  }
  return it->second;
}

void Context::print_notes() {
  for (const std::string& note : notes_) std::cerr << "tpsim: note: " << note << "\n";
  notes_.clear();
}

void Context::set_network(const ClusterNetwork& network) {
  network_ = network;
  for (auto& [id, d] : devices_) apply_network(d, network_);
}

const DeviceProfile& Context::profile(const std::string& device_id) {
  auto it = profiles_.find(device_id);
  if (it == profiles_.end()) it = profiles_.emplace(device_id, load_shipped_profile(device_id)).first;
  if (profile_network(it->second) && network_noted_.insert(device_id).second) {
    const std::string note = network_mismatch_note(it->second, device(device_id));
    if (!note.empty()) notes_.push_back(note);
  }
  return it->second;
}

const DeviceProfile& Context::base_profile(const std::string& device_id) {
  if (has_user_profile(device_id)) return profile(device_id);
  auto it = defaults_.find(device_id);
  if (it == defaults_.end()) it = defaults_.emplace(device_id, load_default_profile(device_id)).first;
  return it->second;
}

const DeviceProfile& Context::held_out_base_profile(const std::string& device_id) {
  if (!has_user_profile(device_id)) return base_profile(device_id);
  const DeviceProfile& fitted = profile(device_id);
  const auto fit = fitted.extra.find("fit");
  if (fit == fitted.extra.end() || !fit->is_object()) return fitted;
  const auto text = [&](const char* key, const std::string& otherwise) {
    const auto v = fit->find(key);
    return v != fit->end() && v->is_string() ? v->get<std::string>() : otherwise;
  };
  const std::string path = text("base_profile", "");
  const std::string& file = user_profiles_.at(device_id);
  const std::string defaults = "profiles/defaults/" + device_id + ".json";
  const DeviceProfile* base = nullptr;
  if (path.size() >= defaults.size() && path.compare(path.size() - defaults.size(), defaults.size(), defaults) == 0) {
    auto it = defaults_.find(device_id);
    if (it == defaults_.end()) it = defaults_.emplace(device_id, load_default_profile(device_id)).first;
    base = &it->second;
  } else if (!path.empty() && std::filesystem::is_regular_file(path)) {
    auto it = fit_bases_.find(device_id);
    if (it == fit_bases_.end()) it = fit_bases_.emplace(device_id, load_profile(path)).first;
    base = &it->second;
  } else {
    throw Error("--profile " + file + " was fitted to measured rows (" + text("command", "calibrate table") +
                ") from " + (path.empty() ? "a base profile it does not name" : path + ", which is not readable") +
                ": held-out folds must not start from parameters fitted on the rows they hold out; give the profile "
                "it was fitted from as --profile");
  }
  const std::string note = "--profile " + file + " was fitted to measured rows: the held-out folds start from " +
                           base->origin + ", the profile it was fitted from";
  if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
  return *base;
}

void Context::check_profiles_used(const std::vector<std::string>& device_ids, const std::string& used_by) const {
  std::vector<std::string> unused;
  for (const auto& [device_id, path] : user_profiles_)
    if (std::find(device_ids.begin(), device_ids.end(), device_id) == device_ids.end())
      unused.push_back("--profile " + path + " is for device " + device_id);
  if (unused.empty()) return;
  std::string used = used_by + " ";
  for (size_t i = 0; i < device_ids.size(); ++i) used += (i ? ", " : "") + device_ids[i];
  if (unused.size() == user_profiles_.size()) {
    std::string what;
    for (const auto& u : unused) what += (what.empty() ? "" : "; ") + u;
    throw Error(what + ", which this run does not use (" + used + "); a profile applies to its own device");
  }
  for (const auto& u : unused)
    std::cerr << "tpsim: warning: " << u << ", which this run does not use (" << used << ")\n";
}

void Context::print_warnings() const {
  for (const auto& w : warnings_) std::cerr << "tpsim: warning: " << w << "\n";
}

std::vector<std::string> Context::select_models(const std::vector<std::string>& specs,
                                                const std::string& fallback) const {
  std::vector<std::string> names;
  if (specs.empty() && !models_file_.empty()) {
    std::vector<std::string> warnings;  // already reported when the catalogue read the file
    ModelCatalog file;
    file.add_file(models_file_, warnings);
    for (const auto& m : file.models()) names.push_back(m.name);
    return names;
  }
  for (const auto& spec : specs)
    for (auto& name : catalog_.expand(spec, "--models")) names.push_back(name);
  if (names.empty() && !fallback.empty()) names = catalog_.expand(fallback, "--models");
  return names;
}

}  // namespace tpsim
