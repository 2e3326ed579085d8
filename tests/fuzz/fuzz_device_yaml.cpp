// Device datasheet files.
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tpsim::fuzz::read_one(data, size, [](const std::string& text, const tpsim::fuzz::Shipped& shipped) {
    const tpsim::DeviceSpec d = tpsim::parse_device_yaml(text, "fuzz.yaml");
    tpsim::fuzz::check_prediction(shipped.models.get("1b"), d, shipped.h100_params, 1024);
  });
}
