// The values of the train program's options (trainer/command_line/options.cpp): numbers parsed
// whole or refused in one line naming the option, their allowed ranges, a float as --help shows it.
#pragma once
#include <charconv>
#include <stdexcept>
#include <string>

// An allowed range of a number, with the rule as the error message says it.
struct Bounds {
  double min;
  double max;
  bool min_included;
  bool max_included;
  const char* rule;
};
constexpr double kNoLimit = 1e300;
constexpr Bounds kAtLeastZero{0, kNoLimit, true, true, "at least 0"};
constexpr Bounds kAtLeastOne{1, kNoLimit, true, true, "at least 1"};
constexpr Bounds kAboveZero{0, kNoLimit, false, true, "above 0"};
constexpr Bounds kZeroToBelowOne{0, 1, true, false, "in [0, 1)"};
constexpr Bounds kZeroOrOne{0, 1, true, true, "0 or 1"};

// Throws "FLAG TEXT is out of range (must be RULE)" unless value is within bounds.
void check_bounds(const std::string& flag, const std::string& text, double value, const Bounds& bounds);

// The whole text as an integer, else throws naming flag (not an integer, too large).
template <typename Integer>
Integer parse_integer(const std::string& flag, const std::string& text) {
  Integer value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) throw std::runtime_error(flag + " " + text + " is too large");
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw std::runtime_error(flag + ": '" + text + "' is not an integer");
  }
  return value;
}

// The whole text as a finite float, else throws naming flag.
float parse_float(const std::string& flag, const std::string& text);

// "%g": how --help and the messages show a float.
std::string show_float(float value);
