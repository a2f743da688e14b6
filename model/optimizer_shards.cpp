// ZeRO-1's shards of a stage (model/optimizer_shards.h).
#include "model/optimizer_shards.h"

#include <algorithm>
#include <cmath>

OptimizerShards optimizer_shards(const ParameterLayout& layout, int dp) {
  std::vector<size_t> boundaries = {0};  // every region boundary, increasing
  for (const ParameterRegion& r : layout.regions) boundaries.push_back(r.offset + r.count);
  std::sort(boundaries.begin(), boundaries.end());
  OptimizerShards shards{{0}, 0};
  for (int k = 1; k < dp; ++k) {
    const double target = double(layout.size) * k / dp;
    size_t best = shards.bounds.back();
    for (size_t b : boundaries)
      if (b >= shards.bounds.back() && std::abs(double(b) - target) < std::abs(double(best) - target)) best = b;
    shards.bounds.push_back(best);
  }
  shards.bounds.push_back(layout.size);
  for (int r = 0; r < dp; ++r) shards.largest = std::max(shards.largest, shards.bounds[r + 1] - shards.bounds[r]);
  return shards;
}
