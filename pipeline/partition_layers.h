// Profile-guided partitioning (--layers-per-stage auto, issue 37 item 4): the contiguous split of
// the transformer blocks over the virtual stages that balances their times, from a cost per block
// plus the embedding's (on virtual stage 0) and the head's (final LayerNorm, logits and loss, on
// the last virtual stage).
//
// The objective is the bottleneck: the largest virtual stage's time (its blocks' costs, plus the
// embedding's or the head's where it holds them). In a pipeline's steady state every stage runs
// one forward and one backward per microbatch, so the slowest stage paces all of them; the
// simulator's step time (pipeline/simulate.h) takes one cost for every chunk and cannot weigh an
// uneven split. With v chunks per stage it is the slowest chunk's time, not the slowest rank's sum
// of chunks: the two agree when the chunks are balanced, and the chunk's is what a contiguous
// dynamic program can minimise exactly (a rank's sum couples chunks far apart).
//
// Exact: a dynamic program over (chunks, layers) finds the least bottleneck; a second one, among
// the splits with no chunk above it, takes the one nearest the even split (split_layers' counts;
// the least sum of squared differences, which spreads a change over chunks rather than piling it
// on one), and among those the lexicographically smallest counts (fewer layers on earlier
// chunks). So uniform costs give the even split, and noise in measured costs that does not change
// the bottleneck does not move a layer.
#pragma once
#include <vector>

// Costs of a forward and backward of one microbatch, in any unit.
struct LayerCosts {
  std::vector<double> blocks;  // index = transformer block
  double embedding = 0;        // with virtual stage 0
  double head = 0;             // with the last virtual stage
};

// The time of each virtual stage under counts (layers per virtual stage, in order).
std::vector<double> chunk_times(const LayerCosts& costs, const std::vector<int>& counts);

// Layers per virtual stage for chunk_count virtual stages, as split_layers takes them: every
// virtual stage between the first and the last at least one layer (the first and the last may hold
// none: the embedding or the head alone), none above max_layers[i] (empty: no cap; the memory
// plan's, trainer/program/auto_layer_split.h). Throws std::runtime_error with one line when no
// split exists (fewer blocks than the even split needs, or caps too small).
std::vector<int> partition_layers(const LayerCosts& costs, int chunk_count, const std::vector<int>& max_layers = {});
