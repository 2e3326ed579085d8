#include "cli/args.hpp"

#include <cmath>
#include <sstream>

#include "io/error.hpp"

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
      throw Error(flag + " '" + text + "': a range steps by powers of two, so both ends must be powers of two; list other values with commas");
    std::vector<int64_t> out;
    for (int64_t v = lo; v <= hi; v *= 2) out.push_back(v);
    return out;
  }
  std::vector<int64_t> out;
  for (const auto& item : parse_name_list(flag, text)) out.push_back(parse_count(flag, item, max));
  return out;
}

Precision parse_precision_flag(const std::string& flag, const std::string& text) {
  if (const auto p = parse_precision(text)) return *p;
  throw Error(flag + " '" + text + "': expected amp_bf16, amp_fp16, amp_fp8, bf16 or fp32");
}

MpMode parse_mp_mode_flag(const std::string& flag, const std::string& text) {
  if (const auto m = parse_mp_mode(text)) return *m;
  throw Error(flag + " '" + text + "': expected DEFAULT, PURE or FULL");
}

Sharding parse_sharding_flag(const std::string& flag, const std::string& text) {
  if (const auto s = parse_sharding(text)) return *s;
  throw Error(flag + " '" + text + "': expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
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
  double scale = 1;
  if (suffix.empty()) scale = 1;
  else if (suffix == "K" || suffix == "k") scale = 1e3;
  else if (suffix == "M") scale = 1e6;
  else if (suffix == "G" || suffix == "B") scale = 1e9;
  else if (suffix == "T") scale = 1e12;
  else if (suffix == "Ki") scale = 1024.0;
  else if (suffix == "Mi") scale = 1024.0 * 1024.0;
  else if (suffix == "Gi") scale = 1024.0 * 1024.0 * 1024.0;
  else if (suffix == "Ti") scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  else throw Error(flag + " '" + text + "': unknown suffix '" + suffix + "' (K, M, G or B, T; Ki, Mi, Gi, Ti)");
  const double tokens = v * scale;
  if (!std::isfinite(tokens) || !(tokens >= 1)) throw Error(flag + " '" + text + "': must be at least 1 token");
  if (tokens > 1e18) throw Error(flag + " '" + text + "': too large (at most 1e18 tokens)");
  return tokens;
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
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(s, &used);
        } catch (...) {
          used = 0;
        }
        if (used == 0 || used != s.size() || !std::isfinite(v) || v < lo || v > hi)
          return "'" + s + "': expected a number from " + text;
        return {};
      },
      "FLOAT in " + range.str());
}

}  // namespace tpsim
