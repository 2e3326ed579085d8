#include "io/names.hpp"

#include <algorithm>
#include <cctype>
#include <tuple>

namespace tpsim {

std::string to_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string to_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> nearest_names(const std::string& given, const std::vector<std::string>& known, size_t max) {
  const std::string g = to_lower(given);
  if (g.empty()) return {};
  // (rank, tie-break, name): containment ranks before distance; shorter names and nearer ones first.
  std::vector<std::tuple<int, size_t, std::string>> ranked;
  const size_t limit = std::max<size_t>(2, g.size() / 3);
  for (const auto& k : known) {
    const std::string l = to_lower(k);
    if (l.find(g) != std::string::npos || g.find(l) != std::string::npos) ranked.emplace_back(0, l.size(), k);
    else if (const size_t d = edit_distance(g, l); d <= limit) ranked.emplace_back(1, d, k);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  for (const auto& r : ranked) {
    // Names that contain the given one answer it; near spellings only when none does.
    if (out.size() == max || std::get<0>(r) > std::get<0>(ranked.front())) break;
    out.push_back(std::get<2>(r));
  }
  return out;
}

std::string did_you_mean_phrase(const std::string& given, const std::vector<std::string>& known) {
  const std::vector<std::string> near = nearest_names(given, known);
  if (near.empty()) return "";
  std::string s = " (did you mean ";
  for (size_t i = 0; i < near.size(); ++i) s += (i == 0 ? "" : i + 1 == near.size() ? " or " : ", ") + near[i];
  return s + "?)";
}

}  // namespace tpsim
