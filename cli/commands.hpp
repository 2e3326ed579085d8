// Each tpsim subcommand registers itself on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace tpsim {

void register_predict(CLI::App& app);
void register_sweep(CLI::App& app);
void register_plan(CLI::App& app);
void register_bench(CLI::App& app);
void register_validate(CLI::App& app);
void register_calibrate(CLI::App& app);
void register_replay(CLI::App& app);
void register_scale(CLI::App& app);

// Subcommands of `calibrate`.
void register_calibrate_table(CLI::App& calibrate);
void register_calibrate_kernels(CLI::App& calibrate);
void register_calibrate_comm(CLI::App& calibrate);
void register_calibrate_transfer(CLI::App& calibrate);

}  // namespace tpsim
