// What every command loads: the model catalogue (plus --models), device datasheets and profiles
// (the shipped ones, or --profile files for their own devices), and the output options.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "io/catalog.hpp"
#include "io/devices.hpp"
#include "io/output.hpp"
#include "io/profile_io.hpp"
#include "io/terminal.hpp"
#include "model/device.hpp"

namespace tpsim {

struct CommonOptions {
  std::string models_file;
  std::vector<std::string> profile_files;
  std::string format;  // "": not given (md, or the terminal's compact table)
  std::string output;
  std::string columns;  // --columns NAME,NAME
};

// --models, --profile (repeatable), --format, -o, --columns.
void add_common_options(CLI::App* cmd, CommonOptions& o);
// --format, -o and --columns alone (sweep, which has its own --models and --profile).
void add_output_options(CLI::App* cmd, CommonOptions& o);

// The values of a repeatable --models option (sweep, calibrate kernels): one that ends in .yaml or
// .yml is a models file, which becomes `common.models_file` (one per run; an Error for a second);
// the others are names, lists or ranges, returned in order.
std::vector<std::string> take_models_file(const std::vector<std::string>& values, CommonOptions& common);

class Context {
 public:
  explicit Context(const CommonOptions& o);

  const ModelCatalog& catalog() const { return catalog_; }
  // A model that a table's row defines (vTrain's rows): kept for the run, one per name (the name
  // says every field such rows vary), at an address that stays valid.
  const ModelConfig& row_model(const ModelConfig& m);
  // The models `specs` name (take_models_file's names, lists, ranges), in order; with no specs and
  // a --models file, every model of that file; with neither, `fallback` (a name, list or range).
  std::vector<std::string> select_models(const std::vector<std::string>& specs, const std::string& fallback) const;
  const DeviceSpec& device(const std::string& id);
  const DeviceProfile& profile(const std::string& device_id);  // a --profile for it, else the shipped one
  // What fits start from: a --profile for the device, else its reasoned default (never the shipped
  // profile, which has seen the seed tables).
  const DeviceProfile& base_profile(const std::string& device_id);
  // What held-out fits (validate --cv) start from: base_profile's, except that a --profile fitted to
  // measured rows (its "fit" record: calibrate table) gives way to the profile it was fitted from
  // (the record's base_profile; the shipped defaults wherever the repository stood), with a note:
  // a fold must never start from parameters fitted on the rows it holds out. Error when that base
  // cannot be read.
  const DeviceProfile& held_out_base_profile(const std::string& device_id);
  bool has_user_profile(const std::string& device_id) const { return user_profiles_.count(device_id) > 0; }
  // A --profile applies to its own device: when the command uses none of the profiles' devices,
  // an Error naming the files; a profile whose device is not used, among others that are, a warning.
  // `used_by` says where the devices used come from ("--device", "the tables' rows of").
  void check_profiles_used(const std::vector<std::string>& device_ids, const std::string& used_by = "--device") const;
  Format format() const { return out_.format; }
  // The tables as the reader gets them (io/terminal.hpp): --columns, then --format, or on a
  // terminal with neither --format nor -o, the compact table fitted to its width.
  std::string render(const std::vector<OutputTable>& tables) const { return tpsim::render(tables, out_); }
  // In `format`, whatever the terminal (--columns still applies).
  std::string render(const std::vector<OutputTable>& tables, Format format) const;
  const OutputOptions& output_options() const { return out_; }
  std::optional<std::string> output() const { return output_; }
  void print_warnings() const;  // to stderr, once
  // The cluster network every device of the run is on (--gpus-per-node, --inter-node-gbps): applied
  // to the devices loaded and to those loaded later. A profile fitted on another network is noted
  // once (print_notes).
  void set_network(const ClusterNetwork& network);
  // The notes collected while the command ran (a profile fitted on another network), to stderr:
  // each command calls it as its last step, so that a run that ends in an error prints its one
  // line alone.
  void print_notes();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  ModelCatalog catalog_;
  std::map<std::string, ModelConfig> row_models_;
  std::string models_file_;
  std::vector<std::string> warnings_;
  std::map<std::string, DeviceSpec> devices_;
  std::map<std::string, DeviceProfile> profiles_;
  std::map<std::string, DeviceProfile> defaults_;
  std::map<std::string, DeviceProfile> fit_bases_;    // held_out_base_profile's bases read from files
  std::map<std::string, std::string> user_profiles_;  // device -> the --profile file
  OutputOptions out_;
  std::optional<std::string> output_;
  ClusterNetwork network_;
  std::set<std::string> network_noted_;
  std::vector<std::string> notes_;  // print_notes()
};

}  // namespace tpsim
