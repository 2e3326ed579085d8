// tpsim: predicts how fast an MPT-style model trains under llm-foundry/Composer FSDP.
// Each subcommand lives in its own file; errors reach here as tpsim::Error and leave as one line.
#include <CLI/CLI.hpp>
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tpsim: LLM training throughput simulator (llm-foundry/Composer, Megatron-Core, torchtitan)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tpsim 0.1.0");
  tpsim::register_predict(app);
  tpsim::register_sweep(app);
  tpsim::register_plan(app);
  tpsim::register_validate(app);
  tpsim::register_calibrate(app);
  tpsim::register_replay(app);
  tpsim::register_bench(app);
  tpsim::register_scale(app);
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
