// What every fuzz target checks: a reader either accepts its input or throws tpsim::Error with a
// one-line message; anything else (another exception, a crash, a sanitizer report, a hang) is a
// bug. Accepted inputs are pushed through the simulator, whose every output must be finite.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/catalog.hpp"
#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/profile_io.hpp"
#include "model/simulator.hpp"

namespace tpsim::fuzz {

inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: %s\n", what);
    std::abort();
  }
}

inline void check_error_message(const Error& e) {
  const std::string m = e.what();
  require(!m.empty(), "an Error without a message");
  require(m.find('\n') == std::string::npos, "an Error message of more than one line");
}

// Predicts a small configuration and checks every number is finite and positive.
inline void check_prediction(const ModelConfig& m, const DeviceSpec& d, const CostParams& p, int64_t seq) {
  TrainConfig c;
  c.seq_len = seq;
  c.n_gpus = 8;
  c.global_batch = 16;
  c.micro_batch = 2;
  if (!check_config(m, d, p, c).empty()) return;
  const Prediction r = predict(m, d, p, c);
  for (double v : {r.step_s, r.tokens_per_s, r.mfu, r.hfu, r.memory.peak_bytes, r.time.exposed_comm_s})
    require(std::isfinite(v) && v >= 0, "a prediction that is not finite and non-negative");
}

// The shipped data the targets predict with, loaded once.
struct Shipped {
  ModelCatalog models = ModelCatalog::load_default();
  DeviceSpec h100 = load_device("h100_80gb"), a100 = load_device("a100_80gb");
  CostParams h100_params = load_shipped_profile("h100_80gb").params;
  CostParams a100_params = load_shipped_profile("a100_80gb").params;
};

// One fuzz input, as text, through `read(text, shipped)` (a reader and the checks of what it
// returns): an Error it throws must be one line (check_error_message). The shipped data is loaded
// outside, so that an error of its own is not taken for the input's. What LLVMFuzzerTestOneInput
// returns.
template <class Read>
int read_one(const uint8_t* data, size_t size, Read read) {
  static const Shipped shipped;
  try {
    read(std::string(reinterpret_cast<const char*>(data), size), shipped);
  } catch (const Error& e) {
    check_error_message(e);
  }
  return 0;
}

}  // namespace tpsim::fuzz
