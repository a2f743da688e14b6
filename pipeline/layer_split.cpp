// Contiguous layer ranges for the virtual stages (pipeline/layer_split.h).
#include "pipeline/layer_split.h"

#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>

namespace {

std::string join(const std::vector<int>& counts) {
  std::string text;
  for (int count : counts) text += (text.empty() ? "" : ",") + std::to_string(count);
  return text;
}

}  // namespace

std::vector<LayerRange> split_layers(int num_layers, int p, int v, const std::vector<int>& layers_per_stage) {
  if (p < 1) throw std::runtime_error("--pp " + std::to_string(p) + " must be at least 1");
  if (v < 1) throw std::runtime_error("--virtual-stages " + std::to_string(v) + " must be at least 1");
  // In 64 bits: p * v may exceed an int, and then so does it exceed num_layers.
  const int64_t chunk_count = int64_t(p) * v;
  const std::string pipeline_chunks =
      "--pp " + std::to_string(p) + " x --virtual-stages " + std::to_string(v) + " = " + std::to_string(chunk_count);
  std::vector<int> counts = layers_per_stage;
  if (counts.empty()) {
    if (num_layers < chunk_count)
      throw std::runtime_error("--layers " + std::to_string(num_layers) + " is fewer than " + pipeline_chunks +
                               " pipeline chunks (each needs at least one layer)");
    const int chunks = int(chunk_count);
    const int extra = num_layers % chunks;
    const int first_extra = (chunks - extra) / 2;  // the extra layers sit in the middle
    for (int i = 0; i < chunks; i++)
      counts.push_back(num_layers / chunks + (i >= first_extra && i < first_extra + extra ? 1 : 0));
  } else {
    const std::string flag = "--layers-per-stage " + join(counts);
    if (int64_t(counts.size()) != chunk_count)
      throw std::runtime_error(flag + " has " + std::to_string(counts.size()) + " entries; it needs one per chunk, " +
                               pipeline_chunks);
    // The first chunk has the embedding and the last the head to run; the others need a layer.
    for (size_t i = 0; i < counts.size(); i++)
      if (counts[i] < (i == 0 || i + 1 == counts.size() ? 0 : 1))
        throw std::runtime_error(flag + ": entry " + std::to_string(i) + " is " + std::to_string(counts[i]) +
                                 "; a chunk between the first and the last needs at least one layer");
    const int64_t sum = std::accumulate(counts.begin(), counts.end(), int64_t(0));  // int entries may overflow an int
    if (sum != num_layers)
      throw std::runtime_error(flag + " adds up to " + std::to_string(sum) + " layers, but the model has --layers " +
                               std::to_string(num_layers));
  }
  std::vector<LayerRange> ranges;
  const int chunks = int(chunk_count);
  int first_layer = 0;
  for (int i = 0; i < chunks; i++) {
    ranges.push_back({first_layer, first_layer + counts[i], i == 0, i == chunks - 1});
    first_layer += counts[i];
  }
  return ranges;
}
