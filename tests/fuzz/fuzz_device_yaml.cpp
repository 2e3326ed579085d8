// Device datasheet files.
#include "fuzz_common.hpp"
#include "io/catalog.hpp"
#include "io/devices.hpp"
#include "io/profile_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tpsim::ModelCatalog catalog = tpsim::ModelCatalog::load_default();
  static const tpsim::DeviceProfile profile = tpsim::load_shipped_profile("h100_80gb");
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tpsim::DeviceSpec d = tpsim::parse_device_yaml(text, "fuzz.yaml");
    tpsim::fuzz::check_prediction(catalog.get("1b"), d, profile.params, 1024);
  } catch (const tpsim::Error& e) {
    tpsim::fuzz::check_error_message(e);
  }
  return 0;
}
