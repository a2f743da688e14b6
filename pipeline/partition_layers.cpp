// The min-max contiguous partition of the blocks (pipeline/partition_layers.h).
#include "pipeline/partition_layers.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "pipeline/layer_split.h"

namespace {

constexpr double kInfinite = std::numeric_limits<double>::infinity();
constexpr int kUnreachable = std::numeric_limits<int>::max();

int squared(int difference) { return difference * difference; }

struct Problem {
  const LayerCosts& costs;
  int chunks, layers;
  std::vector<double> prefix;  // prefix[j]: the first j blocks' costs
  std::vector<int> max_layers;

  // Chunk i holding blocks [first, first + count); the same arithmetic wherever it is asked, so
  // that both programs compare bitwise the same values.
  double time(int i, int first, int count) const {
    return prefix[first + count] - prefix[first] + (i == 0 ? costs.embedding : 0) +
           (i == chunks - 1 ? costs.head : 0);
  }
  int least(int i) const { return i == 0 || i == chunks - 1 ? 0 : 1; }
  int most(int i, int first) const { return std::min(max_layers[i], layers - first); }
};

// best[i][j]: the least bottleneck of chunks i.. holding blocks j.. (suffix form, as the second).
double least_bottleneck(const Problem& problem) {
  std::vector<std::vector<double>> best(problem.chunks + 1, std::vector<double>(problem.layers + 1, kInfinite));
  best[problem.chunks][problem.layers] = 0;
  for (int i = problem.chunks - 1; i >= 0; --i)
    for (int j = 0; j <= problem.layers; ++j)
      for (int count = problem.least(i); count <= problem.most(i, j); ++count)
        best[i][j] = std::min(best[i][j], std::max(problem.time(i, j, count), best[i + 1][j + count]));
  return best[0][0];
}

}  // namespace

std::vector<double> chunk_times(const LayerCosts& costs, const std::vector<int>& counts) {
  std::vector<double> times;
  size_t block = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    double time = (i == 0 ? costs.embedding : 0) + (i + 1 == counts.size() ? costs.head : 0);
    for (int k = 0; k < counts[i]; ++k) time += costs.blocks[block++];
    times.push_back(time);
  }
  return times;
}

std::vector<int> partition_layers(const LayerCosts& costs, int chunk_count, const std::vector<int>& max_layers) {
  const int layers = int(costs.blocks.size());
  const std::string what = "--layers-per-stage auto: ";
  std::vector<int> even;
  try {
    for (const LayerRange& range : split_layers(layers, chunk_count, 1)) even.push_back(range.end_layer - range.first_layer);
  } catch (const std::runtime_error& error) {
    throw std::runtime_error(what + error.what());
  }
  Problem problem{costs, chunk_count, layers, {0}, max_layers.empty() ? std::vector<int>(chunk_count, layers) : max_layers};
  for (double cost : costs.blocks) problem.prefix.push_back(problem.prefix.back() + cost);
  const double bottleneck = least_bottleneck(problem);
  if (bottleneck == kInfinite)
    throw std::runtime_error(what + "no split of " + std::to_string(layers) + " layers over " +
                             std::to_string(chunk_count) + " chunks fits the memory limit's layers per chunk");
  // moved[i][j]: the least sum of squared differences from the even split of chunks i.. holding
  // blocks j.., no chunk above the bottleneck.
  std::vector<std::vector<int>> moved(chunk_count + 1, std::vector<int>(layers + 1, kUnreachable));
  moved[chunk_count][layers] = 0;
  const auto allowed = [&](int i, int j, int count) {
    return problem.time(i, j, count) <= bottleneck && moved[i + 1][j + count] != kUnreachable;
  };
  for (int i = chunk_count - 1; i >= 0; --i)
    for (int j = 0; j <= layers; ++j)
      for (int count = problem.least(i); count <= problem.most(i, j); ++count)
        if (allowed(i, j, count))
          moved[i][j] = std::min(moved[i][j], squared(count - even[i]) + moved[i + 1][j + count]);
  // Forwards, the fewest layers on each chunk in turn among the optimal continuations.
  std::vector<int> counts;
  for (int i = 0, j = 0; i < chunk_count; ++i) {
    int count = problem.least(i);
    while (!allowed(i, j, count) || squared(count - even[i]) + moved[i + 1][j + count] != moved[i][j]) ++count;
    counts.push_back(count);
    j += count;
  }
  return counts;
}
