// An enum's names as one array in the order of its values (the enums are 0, 1, 2, ...), and the two
// lookups every enum's to_string and parse_* make with it.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace tpsim {

template <typename E, size_t N>
constexpr std::string_view name_of(E e, const std::array<std::string_view, N>& names) {
  const auto i = static_cast<size_t>(e);
  return i < N ? names[i] : "?";
}

template <typename E, size_t N>
constexpr std::optional<E> value_named(std::string_view s, const std::array<std::string_view, N>& names) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace tpsim
