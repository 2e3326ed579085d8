// --models files: a map from model names to llm-foundry model blocks.
#include "fuzz_common.hpp"
#include "io/catalog.hpp"
#include "io/devices.hpp"
#include "io/profile_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tpsim::DeviceSpec device = tpsim::load_device("h100_80gb");
  static const tpsim::DeviceProfile profile = tpsim::load_shipped_profile("h100_80gb");
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    tpsim::ModelCatalog c;
    std::vector<std::string> warnings;
    c.add_yaml(text, "fuzz.yaml", warnings);
    for (const auto& w : warnings) tpsim::fuzz::require(w.find('\n') == std::string::npos, "a multi-line warning");
    for (const auto& m : c.models()) {
      tpsim::fuzz::require(tpsim::parameter_count(m, 2048) > 0, "a model without parameters");
      tpsim::fuzz::check_prediction(m, device, profile.params, 512);
    }
  } catch (const tpsim::Error& e) {
    tpsim::fuzz::check_error_message(e);
  }
  return 0;
}
