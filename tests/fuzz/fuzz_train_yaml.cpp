// llm-foundry training YAMLs, ${...} references included.
#include "fuzz_common.hpp"
#include "io/devices.hpp"
#include "io/profile_io.hpp"
#include "io/train_yaml.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tpsim::DeviceSpec device = tpsim::load_device("a100_80gb");
  static const tpsim::DeviceProfile profile = tpsim::load_shipped_profile("a100_80gb");
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tpsim::TrainYaml t = tpsim::parse_train_yaml(text, "fuzz.yaml");
    const int64_t seq = t.seq_len && *t.seq_len > 0 && *t.seq_len <= 65536 ? *t.seq_len : 512;
    tpsim::fuzz::check_prediction(t.model, device, profile.params, seq);
  } catch (const tpsim::Error& e) {
    tpsim::fuzz::check_error_message(e);
  }
  return 0;
}
