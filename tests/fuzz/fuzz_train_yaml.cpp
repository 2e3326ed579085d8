// llm-foundry training YAMLs, ${...} references included.
#include "fuzz_common.hpp"
#include "io/train_yaml.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tpsim::fuzz::read_one(data, size, [](const std::string& text, const tpsim::fuzz::Shipped& shipped) {
    const tpsim::TrainYaml t = tpsim::parse_train_yaml(text, "fuzz.yaml");
    const int64_t seq = t.seq_len && *t.seq_len > 0 && *t.seq_len <= 65536 ? *t.seq_len : 512;
    tpsim::fuzz::check_prediction(t.model, shipped.a100, shipped.a100_params, seq);
  });
}
