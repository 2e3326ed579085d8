// Device profiles (JSON), embedded device specs and prediction intervals included.
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tpsim::fuzz::read_one(data, size, [](const std::string& text, const tpsim::fuzz::Shipped& shipped) {
    const tpsim::DeviceProfile p = tpsim::parse_profile_json(text, "fuzz.json");
    tpsim::prediction_interval(p);
    tpsim::fuzz::check_prediction(shipped.models.get("350m"), p.device_spec ? *p.device_spec : shipped.h100, p.params,
                                  2048);
  });
}
