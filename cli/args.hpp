// Parsing of command-line values with errors that name the flag: counts, lists, ranges, token
// amounts. Everything here rejects zero, negative, fractional and absurd values.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "model/training.hpp"

namespace tpsim {

// A whole number in [1, max]: "8", "1024". Rejects "8.5", "-1", "0", "1e308", "2^63", "".
int64_t parse_count(const std::string& flag, const std::string& text, int64_t max);

// "512..65536" (powers of two from the first to the last, both ends included, both powers of two),
// "2048" or "512,2048,8192".
std::vector<int64_t> parse_count_list(const std::string& flag, const std::string& text, int64_t max);

// A token amount: "1048576", "4M" (4e6), "1Mi" (2^20), "1T" (1e12), "2.5B" (2.5e9).
// Suffixes K, M, G/B, T are decimal; Ki, Mi, Gi, Ti binary.
double parse_tokens(const std::string& flag, const std::string& text);

// A global batch of `tokens` in whole sequences of `seq` tokens (a count between two is rounded to
// the nearest); Error naming `what` (the flag and its value) when that is under 1 or beyond kMaxBatch.
int64_t whole_sequences(const std::string& what, double tokens, int64_t seq);

// The enums of a training configuration, by llm-foundry's spelling, with an error naming the flag
// and the values it takes.
Precision parse_precision_flag(const std::string& flag, const std::string& text);
MpMode parse_mp_mode_flag(const std::string& flag, const std::string& text);
Sharding parse_sharding_flag(const std::string& flag, const std::string& text);
// --framework's value (composer, megatron, torchtitan), case ignored; Error naming the flag otherwise.
Framework framework_flag(const std::string& value);

// A whole number of bytes in [1, 64Gi]: "65536", "64Ki", "1Mi", "4M". Suffixes K, M, G are
// decimal; Ki, Mi, Gi binary (the suffix parser parse_tokens uses).
double parse_bytes(const std::string& flag, const std::string& text);

// A comma-separated list of names; rejects empty items.
std::vector<std::string> parse_name_list(const std::string& flag, const std::string& text);

// The check for a real-valued CLI11 option: a finite number in [lo, hi]. (CLI::Range lets NaN
// through: every comparison with it is false.)
CLI::Validator finite_range(double lo, double hi);

// Device ids are matched ignoring case (H100_80GB is h100_80gb): the value is lower-cased as parsed.
CLI::Validator lower_case_ids();

}  // namespace tpsim
