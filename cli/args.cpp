#include "cli/args.hpp"

#include <cmath>
#include <initializer_list>
#include <map>
#include <sstream>

#include "io/error.hpp"
#include "io/names.hpp"
#include "io/text_format.hpp"
#include "model/units.hpp"

namespace tpsim {

int64_t parse_count(const std::string& flag, const std::string& text, int64_t max) {
  if (text.empty()) throw Error(flag + ": empty value");
  for (char c : text)
    if (c < '0' || c > '9')
      throw Error(flag + " '" + text + "': expected a whole number between 1 and " + std::to_string(max));
  if (text.size() > 18) throw Error(flag + " '" + text + "': too large (at most " + std::to_string(max) + ")");
  const int64_t v = std::stoll(text);
  if (v < 1) throw Error(flag + " '" + text + "': must be at least 1");
  if (v > max) throw Error(flag + " '" + text + "': too large (at most " + std::to_string(max) + ")");
  return v;
}

std::vector<int64_t> parse_count_list(const std::string& flag, const std::string& text, int64_t max) {
  if (text.empty()) throw Error(flag + ": empty value");
  const size_t dots = text.find("..");
  if (dots != std::string::npos) {
    const std::string a = text.substr(0, dots), b = text.substr(dots + 2);
    if (a.empty() || b.empty()) throw Error(flag + " '" + text + "': a range needs both ends, as in 512..65536");
    const int64_t lo = parse_count(flag, a, max), hi = parse_count(flag, b, max);
    if (lo > hi) throw Error(flag + " '" + text + "': reversed range (" + a + " > " + b + ")");
    if ((lo & (lo - 1)) != 0 || (hi & (hi - 1)) != 0)
      throw Error(
          flag + " '" + text +
          "': a range steps by powers of two, so both ends must be powers of two; list other values with commas");
    std::vector<int64_t> out;
    for (int64_t v = lo; v <= hi; v *= 2) out.push_back(v);
    return out;
  }
  std::vector<int64_t> out;
  for (const auto& item : parse_name_list(flag, text)) out.push_back(parse_count(flag, item, max));
  return out;
}

Precision parse_precision_flag(const std::string& flag, const std::string& text) {
  if (const auto p = parse_precision(to_lower(text))) return *p;
  throw Error(flag + " '" + text + "': expected amp_bf16, amp_fp16, amp_fp8, bf16, fp32, mxfp8 or nvfp4");
}

MpMode parse_mp_mode_flag(const std::string& flag, const std::string& text) {
  if (const auto m = parse_mp_mode(to_upper(text))) return *m;
  throw Error(flag + " '" + text + "': expected DEFAULT, PURE or FULL");
}

Sharding parse_sharding_flag(const std::string& flag, const std::string& text) {
  if (const auto s = parse_sharding(to_upper(text))) return *s;
  throw Error(flag + " '" + text + "': expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
}

Framework framework_flag(const std::string& value) {
  if (const auto f = parse_framework(to_lower(value))) return *f;
  throw Error("--framework '" + value + "': expected composer, megatron or torchtitan");
}

namespace {

// The one suffix parser of amounts: decimal K, M, G/B, T and binary Ki, Mi, Gi, Ti, of which each
// kind of amount takes those in `accepted`. 0 for a suffix it does not take.
double suffix_scale(const std::string& suffix, std::initializer_list<const char*> accepted) {
  static const std::map<std::string, double> scales = {{"", 1.0},    {"K", 1e3},           {"k", 1e3},
                                                       {"M", 1e6},   {"G", 1e9},           {"B", 1e9},
                                                       {"T", 1e12},  {"Ki", 1024.0},       {"Mi", 1024.0 * 1024.0},
                                                       {"Gi", kGiB}, {"Ti", 1024.0 * kGiB}};
  for (const char* a : accepted)
    if (suffix == a) return scales.at(suffix);
  return 0;
}

// The largest byte amount parse_bytes takes: 64 GiB, far beyond what one host or GPU holds twice.
constexpr double kMaxBytes = 64.0 * kGiB;

}  // namespace

int64_t whole_sequences(const std::string& what, double tokens, int64_t seq) {
  const double sequences = tokens / static_cast<double>(seq);
  if (sequences < 0.5 || sequences > static_cast<double>(kMaxBatch))
    throw Error(what + ": " + general(sequences, 3) + " sequences of " + std::to_string(seq) + " tokens, outside 1.." +
                std::to_string(kMaxBatch) + " (--global-batch sets the batch in sequences)");
  return round_count(sequences);
}

double parse_tokens(const std::string& flag, const std::string& text) {
  if (text.empty()) throw Error(flag + ": empty value");
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    throw Error(flag + " '" + text + "': expected a token count such as 1048576, 4M, 1Mi or 1T");
  }
  if (!std::isfinite(v)) throw Error(flag + " '" + text + "': expected a token count such as 1048576, 4M, 1Mi or 1T");
  const std::string suffix = text.substr(used);
  const double scale = suffix_scale(suffix, {"", "K", "k", "M", "G", "B", "T", "Ki", "Mi", "Gi", "Ti"});
  if (scale == 0)
    throw Error(flag + " '" + text + "': unknown suffix '" + suffix + "' (K, M, G or B, T; Ki, Mi, Gi, Ti)");
  const double tokens = v * scale;
  if (!std::isfinite(tokens) || !(tokens >= 1)) throw Error(flag + " '" + text + "': must be at least 1 token");
  if (tokens > 1e18) throw Error(flag + " '" + text + "': too large (at most 1e18 tokens)");
  return tokens;
}

double parse_bytes(const std::string& flag, const std::string& text) {
  const std::string hint = "': expected a whole number of bytes such as 65536, 64Ki or 4M";
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) throw Error(flag + " '" + text + hint);
  const double count = std::stod(text.substr(0, digits));
  const std::string suffix = text.substr(digits);
  const double scale = suffix_scale(suffix, {"", "K", "M", "G", "Ki", "Mi", "Gi"});
  if (scale == 0) throw Error(flag + " '" + text + "': unknown suffix '" + suffix + "' (K, M, G; Ki, Mi, Gi)");
  const double bytes = count * scale;
  if (!(bytes >= 1)) throw Error(flag + " '" + text + "': a size must be positive");
  if (bytes > kMaxBytes) throw Error(flag + " '" + text + "': too large (at most 64Gi)");
  return bytes;
}

std::vector<std::string> parse_name_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw Error(flag + " '" + text + "': empty item in the list");
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

CLI::Validator finite_range(double lo, double hi) {
  std::ostringstream range;
  range << lo << " to " << hi;
  return CLI::Validator(
      [lo, hi, text = range.str()](std::string& s) -> std::string {
        const std::optional<double> v = parse_number(s);
        if (!v || !std::isfinite(*v) || *v < lo || *v > hi) return "'" + s + "': expected a number from " + text;
        return {};
      },
      "FLOAT in " + range.str());
}

CLI::Validator lower_case_ids() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        s = to_lower(s);
        return {};
      },
      "");
}

}  // namespace tpsim
