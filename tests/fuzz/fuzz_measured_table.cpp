// llm-foundry result tables, markdown or CSV.
#include "fuzz_common.hpp"
#include "io/measured_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tpsim::fuzz::read_one(data, size, [](const std::string& text, const tpsim::fuzz::Shipped&) {
    const tpsim::MeasuredTable t = tpsim::parse_measured_table(text, "fuzz.md");
    for (const auto& r : t.rows) {
      tpsim::fuzz::require(r.seq_len > 0 && r.n_gpus > 0 && r.micro_batch > 0 && r.global_batch > 0,
                           "a row with a non-positive count");
      tpsim::fuzz::require(std::isfinite(r.tokens_per_s) && r.tokens_per_s > 0, "a row with a bad throughput");
    }
  });
}
