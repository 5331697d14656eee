#pragma once
// Integer command-line arguments of the bench binaries: the whole text must be a number in
// [min, max], or the bench stops with exit code 2 and a message naming the flag and what it
// found (std::atoi reads "abc" as 0, std::stoi throws an exception nobody catches).
#include <fmt/core.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace latentserve::bench {

inline int64_t int_arg(std::string_view flag, std::string_view text, int64_t min = 0,
                       int64_t max = std::numeric_limits<int32_t>::max()) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    fmt::print(stderr, "{}: expected an integer in [{}, {}], found '{}'\n", flag, min, max, text);
    std::exit(2);
  }
  return value;
}

inline double double_arg(std::string_view flag, std::string_view text, double min, double max) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(value >= min && value <= max)) {
    fmt::print(stderr, "{}: expected a number in [{}, {}], found '{}'\n", flag, min, max, text);
    std::exit(2);
  }
  return value;
}

// "1,16,64" -> {1, 16, 64}; each entry checked as int_arg checks one.
inline std::vector<int> int_list_arg(std::string_view flag, const std::string& text, int64_t min = 1,
                                     int64_t max = std::numeric_limits<int32_t>::max()) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(int(int_arg(flag, item, min, max)));
  if (out.empty()) int_arg(flag, text, min, max);  // "" is reported like any other bad entry
  return out;
}

}  // namespace latentserve::bench
