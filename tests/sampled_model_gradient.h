// The GPT tests' finite-difference check of a whole model's gradient, at sampled entries.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "model/parameters.h"
#include "tests/gradient_check.h"

// For each parameter tensor: 8 entries drawn (rng seeded with `seed`) among its first live(tensor)
// elements, and the entry of its largest analytic gradient, which also sets max_relative_error's
// floor (1e-3 of it) for entries whose gradient is almost zero. Returns each tensor's
// max_relative_error of `gradient` against central differences of loss_of (params is changed one
// entry at a time and restored). live lets a caller leave out elements whose gradient is exactly 0
// (wte's padded rows, wpe's rows past T), which it checks itself.
inline std::array<double, kNumParameterTensors> sampled_gradient_errors(
    const GPTConfig& config, std::vector<double>& params, const std::vector<double>& gradient,
    const std::function<double(const std::vector<double>&)>& loss_of, const std::function<size_t(int)>& live,
    uint64_t seed) {
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(config);
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(config);
  std::mt19937_64 rng(seed);
  std::array<double, kNumParameterTensors> errors{};
  for (int tensor = 0; tensor < kNumParameterTensors; ++tensor) {
    std::vector<size_t> entries;
    for (int i = 0; i < 8; ++i) entries.push_back(offsets[tensor] + rng() % live(tensor));
    const auto first = gradient.begin() + offsets[tensor];
    entries.push_back(offsets[tensor] + (std::max_element(first, first + sizes[tensor], [](double a, double b) {
                                           return std::fabs(a) < std::fabs(b);
                                         }) - first));
    std::vector<double> expected, numeric;
    for (size_t entry : entries) {
      std::vector<double> x = {params[entry]};
      numeric.push_back(numeric_gradient(
          [&](const std::vector<double>& v) {
            params[entry] = v[0];
            return loss_of(params);
          },
          x)[0]);
      params[entry] = x[0];
      expected.push_back(gradient[entry]);
    }
    errors[tensor] = max_relative_error(expected, numeric);
  }
  return errors;
}
