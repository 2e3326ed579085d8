// --models files: a map from model names to llm-foundry model blocks.
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tpsim::fuzz::read_one(data, size, [](const std::string& text, const tpsim::fuzz::Shipped& shipped) {
    tpsim::ModelCatalog c;
    std::vector<std::string> warnings;
    c.add_yaml(text, "fuzz.yaml", warnings);
    for (const auto& w : warnings) tpsim::fuzz::require(w.find('\n') == std::string::npos, "a multi-line warning");
    for (const auto& m : c.models()) {
      tpsim::fuzz::require(tpsim::parameter_count(m, 2048) > 0, "a model without parameters");
      tpsim::fuzz::check_prediction(m, shipped.h100, shipped.h100_params, 512);
    }
  });
}
