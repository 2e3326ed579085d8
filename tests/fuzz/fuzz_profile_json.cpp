// Device profiles (JSON), embedded device specs and prediction intervals included.
#include "fuzz_common.hpp"
#include "io/catalog.hpp"
#include "io/devices.hpp"
#include "io/profile_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tpsim::ModelCatalog catalog = tpsim::ModelCatalog::load_default();
  static const tpsim::DeviceSpec h100 = tpsim::load_device("h100_80gb");
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tpsim::DeviceProfile p = tpsim::parse_profile_json(text, "fuzz.json");
    tpsim::prediction_interval(p);
    tpsim::fuzz::check_prediction(catalog.get("350m"), p.device_spec ? *p.device_spec : h100, p.params, 2048);
  } catch (const tpsim::Error& e) {
    tpsim::fuzz::check_error_message(e);
  }
  return 0;
}
