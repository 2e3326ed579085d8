// tpsim calibrate transfer: a profile for a device no table has measured, from its nearest
// measured sibling, changing only what the datasheets change (calibrate/profile_transfer.hpp).
//
// The command: the shipped profiles fitted to their own tables are the candidates -> the nearest
// (or --from) -> transfer_profile -> the profile, written atomically, and one line on stderr.
#include <filesystem>
#include <iostream>
#include <memory>

#include "calibrate/profile_transfer.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/profile_io.hpp"

namespace tpsim {
namespace {

struct CalibrateTransferFlags {
  CommonOptions common;
  std::string device;
  std::string from;  // empty: the nearest measured sibling
  std::string out;
};

void run_calibrate_transfer(const CalibrateTransferFlags& f, const std::string& command_line) {
  Context ctx(f.common);
  const DeviceSpec& target = ctx.device(f.device);
  std::vector<DeviceSpec> candidates;
  const auto shipped = [](const std::string& id) {
    return std::filesystem::exists(data_dir() / "profiles" / (id + ".json"));
  };
  for (const auto& id : known_devices())
    if (id != f.device && (f.from.empty() || id == f.from) && shipped(id) && measured_on_own_tables(ctx.profile(id)))
      candidates.push_back(ctx.device(id));
  if (candidates.empty())
    throw Error(f.from.empty() ? "--device " + f.device + ": no shipped profile is fitted to its own tables"
                               : "--from " + f.from + ": not a device whose profile is fitted to its own tables");
  TransferInput in;
  in.target = &target;
  in.choice = nearest_sibling(target, candidates);
  in.sibling = &candidates[in.choice.index];
  in.sibling_profile = &ctx.profile(in.sibling->id);
  const bool has_default = std::filesystem::exists(data_dir() / "profiles" / "defaults" / (f.device + ".json"));
  if (has_default) in.target_base = &ctx.base_profile(f.device);
  DeviceProfile p = transfer_profile(in);
  p.extra["transfer"]["command"] = command_line;
  p.extra["transfer"]["date"] = utc_timestamp();
  save_profile(f.out, p);
  const auto iv = prediction_interval(p);
  std::cerr << "tpsim calibrate transfer: " << f.device << " from " << in.sibling->id << " ("
            << p.extra["transfer"]["tier_meaning"].get<std::string>() << ", datasheet distance " << in.choice.distance
            << "), interval [" << 100 * iv->p10 << "%, " << 100 * iv->p90 << "%]\n  wrote " << f.out << "\n";
  ctx.print_notes();
}

}  // namespace

void register_calibrate_transfer(CLI::App& calibrate) {
  auto o = std::make_shared<CalibrateTransferFlags>();
  auto* cmd = calibrate.add_subcommand(
      "transfer", "a profile for an unmeasured device from its nearest measured sibling, scaled by the datasheets");
  cmd->add_option("--device", o->device, "the device the profile is for")->required()->transform(lower_case_ids());
  cmd->add_option("--from", o->from, "the measured sibling to start from (default: the nearest)");
  cmd->add_option("--out", o->out, "profile to write (atomically)")->required();
  cmd->callback([o] {
    std::string cmdline = "tpsim calibrate transfer --device " + o->device;
    if (!o->from.empty()) cmdline += " --from " + o->from;
    run_calibrate_transfer(*o, cmdline + " --out " + o->out);
  });
}

}  // namespace tpsim
