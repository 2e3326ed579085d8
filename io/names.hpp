#pragma once
// Names a user types: device and model ids, option values, keys. Matching ignores case where the
// caller asks it to; an unknown name is answered with the nearest known ones.
#include <string>
#include <vector>

namespace tpsim {

std::string to_lower(std::string s);
std::string to_upper(std::string s);

// Insertions, deletions and substitutions that turn a into b (Levenshtein 1966).
size_t edit_distance(const std::string& a, const std::string& b);

// Up to `max` known names nearest to `given`, case ignored: first those that contain it or that it
// contains (h100 -> h100_80gb), shortest first; only when there are none, those within an edit
// distance of a third of its length (at least 2), nearest first. Empty when nothing is near.
std::vector<std::string> nearest_names(const std::string& given, const std::vector<std::string>& known, size_t max = 3);

// " (did you mean a, b or c?)", or "" when nothing is near.
std::string did_you_mean_phrase(const std::string& given, const std::vector<std::string>& known);

}  // namespace tpsim
