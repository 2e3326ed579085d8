// tpsim calibrate: fitting device profiles. Each way of measuring is a subcommand in its own file:
//   table    measured training throughput (calibrate_table.cpp)
//   kernels  kernels timed on a measurement backend (calibrate_kernels.cpp)
//   comm     collectives timed across the ranks of an MPI job (calibrate_comm.cpp)
//   transfer an unmeasured device from its nearest measured sibling (calibrate_transfer.cpp)
#include "cli/commands.hpp"

namespace tpsim {

void register_calibrate(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("calibrate", "fit a device profile to measured tables or kernel runs");
  cmd->require_subcommand(1);
  register_calibrate_table(*cmd);
  register_calibrate_kernels(*cmd);
  register_calibrate_comm(*cmd);
  register_calibrate_transfer(*cmd);
}

}  // namespace tpsim
