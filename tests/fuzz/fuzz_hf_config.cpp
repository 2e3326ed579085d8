// Hugging Face config.json files (read_hf_config): every input parses into a model or throws
// tpsim::Error with one line; accepted models are predicted like the others.
#include "fuzz_common.hpp"
#include "io/devices.hpp"
#include "io/hf_config.hpp"
#include "io/profile_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tpsim::DeviceSpec device = tpsim::load_device("h100_80gb");
  static const tpsim::DeviceProfile profile = tpsim::load_shipped_profile("h100_80gb");
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tpsim::HfConfig h = tpsim::read_hf_config(text, "config.json");
    for (const auto& n : h.notes) tpsim::fuzz::require(n.find('\n') == std::string::npos, "a multi-line note");
    tpsim::fuzz::require(tpsim::parameter_count(h.model, 2048) > 0, "a model without parameters");
    tpsim::fuzz::check_prediction(h.model, device, profile.params, 512);
  } catch (const tpsim::Error& e) {
    tpsim::fuzz::check_error_message(e);
  }
  return 0;
}
