// Tools of the kernel checks: seeded random inputs, error measures, and central
// finite differences of a scalar function of a vector (in double).
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

// n values uniform in [lo, hi), the same for the same seed.
inline std::vector<double> random_values(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// Converts between the element types the kernels are instantiated for.
template <typename T>
std::vector<T> convert(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = T(float(v[i]));
  return out;
}
template <>
inline std::vector<double> convert<double>(const std::vector<double>& v) { return v; }
template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = double(float(v[i]));
  return out;
}
template <>
inline std::vector<double> to_double<double>(const std::vector<double>& v) { return v; }

// max_i |a_i - b_i| / max(|b_i|, floor), with floor = 1e-3 of b's largest magnitude,
// so that entries near zero are judged against the tensor's scale, not their own.
// Infinite when the sizes differ or any value is not finite: an element a kernel never
// wrote holds NaN in the CPU build, and a NaN forward makes every finite difference NaN,
// which a plain std::max fold would drop.
inline double max_relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    scale = std::max(scale, std::fabs(b[i]));
  }
  const double floor = std::max(1e-3 * scale, 1e-300);
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(std::fabs(b[i]), floor));
  return worst;
}

// d loss / d x by central differences, entry by entry (x is restored afterwards).
// With h = 1e-5 in double, truncation (~h^2) and rounding (~1e-16/h) errors are
// both below 1e-9 relative for the smooth functions checked here.
inline std::vector<double> numeric_gradient(const std::function<double(const std::vector<double>&)>& loss,
                                            std::vector<double>& x, double h = 1e-5) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss(x);
    x[i] = saved - h;
    const double down = loss(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// A random projection: loss = sum_i w_i y_i, so that every output matters.
inline double project(const std::vector<double>& y, const std::vector<double>& w) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * w[i];
  return s;
}
