// tpsim: predicts how fast an MPT-style model trains under llm-foundry/Composer FSDP.
// Each subcommand lives in its own file; errors reach here as tpsim::Error and leave as one line.
#include <CLI/CLI.hpp>
#include <array>
#include <cstring>
#include <iostream>

#include "io/error.hpp"
#include "cli/commands.hpp"

namespace {

// A repeatable flag takes one value per occurrence: CLI11 lets a vector option swallow every word after
// it, so `validate --profile p.json table.csv` read the table as a second profile and then asked for a
// table. `--profile a.json --profile b.json` repeats the flag; a stray word is an error, not a value.
void one_value_per_flag(CLI::App* app) {
  for (CLI::Option* opt : app->get_options()) {
    if (opt->nonpositional() && opt->get_items_expected_max() > 1) opt->allow_extra_args(false);
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) one_value_per_flag(sub);
}

struct Command {
  const char* name;
  void (*add)(CLI::App&);
};
constexpr std::array<Command, 8> kCommands = {{{"predict", tpsim::register_predict},
                                               {"sweep", tpsim::register_sweep},
                                               {"plan", tpsim::register_plan},
                                               {"validate", tpsim::register_validate},
                                               {"calibrate", tpsim::register_calibrate},
                                               {"replay", tpsim::register_replay},
                                               {"bench", tpsim::register_bench},
                                               {"scale", tpsim::register_scale}}};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tpsim: LLM training throughput simulator (llm-foundry/Composer, Megatron-Core, torchtitan)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tpsim 0.1.0");
  // Only the command asked for is built (all of them for anything else: --help, a misspelt command):
  // a command registers dozens of options and CLI11 checks each new option's names against every
  // one before it, which for all eight was 4.7M instructions, an eighth of a sweep's.
  const Command* asked = nullptr;
  for (const Command& c : kCommands)
    if (argc > 1 && std::strcmp(argv[1], c.name) == 0) asked = &c;
  for (const Command& c : kCommands)
    if (asked == nullptr || asked == &c) c.add(app);
  one_value_per_flag(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "tpsim: error: " << e.what() << "\n";
    return 2;
  } catch (const tpsim::ReportedError&) {
    return 2;
  } catch (const tpsim::Error& e) {
    std::cerr << "tpsim: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tpsim: internal error: " << e.what() << "\n";
    return 70;
  }
  return 0;
}
