// Option values: ranges, floats (trainer/command_line/option_values.h).
#include "trainer/command_line/option_values.h"

#include <cmath>
#include <cstdio>

namespace {

bool within(double value, const Bounds& bounds) {
  const bool above_min = bounds.min_included ? value >= bounds.min : value > bounds.min;
  const bool below_max = bounds.max_included ? value <= bounds.max : value < bounds.max;
  return above_min && below_max;
}

}  // namespace

void check_bounds(const std::string& flag, const std::string& text, double value, const Bounds& bounds) {
  if (!within(value, bounds))
    throw std::runtime_error(flag + " " + text + " is out of range (must be " + bounds.rule + ")");
}

float parse_float(const std::string& flag, const std::string& text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(value) ||
      !std::isfinite(static_cast<float>(value))) {
    throw std::runtime_error(flag + ": '" + text + "' is not a finite number");
  }
  return static_cast<float>(value);
}

std::string show_float(float value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}
