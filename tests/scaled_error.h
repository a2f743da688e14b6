// The error measure of the reduced-precision checks: the largest difference relative
// to the reference tensor's largest magnitude. A sum of K products rounded in a p-bit
// format is off by up to about K 2^-p times the sum of its terms' magnitudes, which is
// bounded relative to the tensor's scale but not relative to an entry that cancels to
// near zero; so fp32 and bf16 results are judged against the scale.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

// max_i |a_i - b_i| / max_i |b_i|; infinite when the sizes differ or any value is not
// finite (an element a kernel never wrote holds NaN in the CPU build, and a plain
// std::max fold would drop it).
inline double max_error_relative_to_scale(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double scale = 1e-300, worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    scale = std::max(scale, std::fabs(b[i]));
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst / scale;
}
