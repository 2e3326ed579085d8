// Hugging Face config.json files (read_hf_config): every input parses into a model or throws
// tpsim::Error with one line; accepted models are predicted like the others.
#include "fuzz_common.hpp"
#include "io/hf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tpsim::fuzz::read_one(data, size, [](const std::string& text, const tpsim::fuzz::Shipped& shipped) {
    const tpsim::HfConfig h = tpsim::read_hf_config(text, "config.json");
    for (const auto& n : h.notes) tpsim::fuzz::require(n.find('\n') == std::string::npos, "a multi-line note");
    tpsim::fuzz::require(tpsim::parameter_count(h.model, 2048) > 0, "a model without parameters");
    tpsim::fuzz::check_prediction(h.model, shipped.h100, shipped.h100_params, 512);
  });
}
