// What every fuzz target checks: a reader either accepts its input or throws tpsim::Error with a
// one-line message; anything else (another exception, a crash, a sanitizer report, a hang) is a
// bug. Accepted inputs are pushed through the simulator, whose every output must be finite.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/error.hpp"
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

}  // namespace tpsim::fuzz
