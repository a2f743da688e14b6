// The bound of a bf16 kernel output that is a long sum accumulated in fp32 and rounded once to
// bf16: the check of the reductions over B T rows (the bias and LayerNorm parameter gradients,
// the token gradient), at row counts where bf16 accumulation would show.
//
// Derivation. The inputs are rounded to bf16 before both the kernel and the reference sees
// them, so the reference (a long double sum of the same terms; 64-bit significand, exact to
// 2^-64 of the magnitudes at these sizes) differs from the kernel only by the kernel's own
// rounding. A term that passes through at most K fp32 additions (u = 2^-24 each) and carries R
// roundings of its own (a product) leaves the fp32 sum s within
//   E = (K + R) 2^-24 (1 + 2^-16) sum |terms|
// of the exact sum S (the worst case, not the sqrt(K) statistical estimate; the factor
// 1 + 2^-16 covers the second-order terms while (K + R) 2^-24 < 2^-16). The stored value is s
// rounded once to bf16 (8 significant bits, to nearest): off s by at most half a bf16 ulp at
// |s| <= |S| + E. So |result - S| <= half_ulp(|S| + E) + E, where half_ulp is at most 2^-8
// relative (u) and E small beside it (each test states its ratio): about u |S| (1 + small).
// Partial sums kept in bf16 are rounded after every addition instead: their error grows with
// the number of terms (a random walk of steps up to u of the running sum), several ulps of S.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

// E above, for terms that pass through `additions` fp32 additions and carry `own_roundings`.
inline double fp32_sum_error_bound(int additions, int own_roundings, double sum_of_magnitudes) {
  return (additions + own_roundings) * std::ldexp(1.0, -24) * (1 + std::ldexp(1.0, -16)) * sum_of_magnitudes;
}

// Half a bf16 ulp at magnitude x, the largest error of rounding a value of magnitude at most x
// to bf16: x in [2^(k-1), 2^k) has ulp 2^(k-8).
inline double bf16_half_ulp(double x) {
  int k;
  std::frexp(x, &k);
  return std::ldexp(1.0, k - 9);
}

// The worst error of `result` against `exact` in units of the bound above, given each entry's
// E in `error`: at most 1 when every result is the bf16 rounding of a value within E of the
// exact sum. Infinite for a size mismatch or a non-finite result (an element never written).
inline double worst_error_in_bf16_sum_bounds(const std::vector<double>& result, const std::vector<double>& exact,
                                             const std::vector<double>& error) {
  if (result.size() != exact.size() || error.size() != exact.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < result.size(); ++i) {
    if (!std::isfinite(result[i])) return INFINITY;
    const double bound = bf16_half_ulp(std::fabs(exact[i]) + error[i]) + error[i];
    worst = std::max(worst, std::fabs(result[i] - exact[i]) / bound);
  }
  return worst;
}
