// Layer split (pipeline/layer_split.h): contiguous ranges per virtual stage, even by default
// with the remainder in the middle, or an explicit --layers-per-stage list, and one-line
// errors for splits that cannot work. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/layer_split.h"

namespace {

std::vector<int> layer_counts(const std::vector<LayerRange>& ranges) {
  std::vector<int> counts;
  for (const LayerRange& range : ranges) counts.push_back(range.end_layer - range.first_layer);
  return counts;
}

std::string error_of(int layers, int p, int v, const std::vector<int>& layers_per_stage = {}) {
  try {
    split_layers(layers, p, v, layers_per_stage);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST(LayerSplit, EvenSplitIsContiguousWithEmbeddingFirstAndHeadLast) {
  const std::vector<LayerRange> ranges = split_layers(8, 4, 1);

  ASSERT_EQ(ranges.size(), 4u);
  for (int s = 0; s < 4; s++) {
    EXPECT_EQ(ranges[s].first_layer, 2 * s);
    EXPECT_EQ(ranges[s].end_layer, 2 * s + 2);
    EXPECT_EQ(ranges[s].has_embedding, s == 0);
    EXPECT_EQ(ranges[s].has_head, s == 3);
  }
}

TEST(LayerSplit, RemainderGoesToTheMiddleStages) {
  EXPECT_EQ(layer_counts(split_layers(10, 4, 1)), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(layer_counts(split_layers(9, 4, 1)), (std::vector<int>{2, 3, 2, 2}));
  EXPECT_EQ(layer_counts(split_layers(12, 8, 1)), (std::vector<int>{1, 1, 2, 2, 2, 2, 1, 1}));
  EXPECT_EQ(layer_counts(split_layers(5, 1, 1)), (std::vector<int>{5}));
}

TEST(LayerSplit, ChunksAreVirtualStagesInModelOrder) {
  // p = 2, v = 2: virtual stage 1 is stage 1's chunk 0, virtual stage 2 stage 0's chunk 1.
  const std::vector<LayerRange> ranges = split_layers(8, 2, 2);

  ASSERT_EQ(ranges.size(), 4u);
  EXPECT_EQ(ranges[1].first_layer, 2);
  EXPECT_EQ(ranges[2].first_layer, 4);
  EXPECT_TRUE(ranges[0].has_embedding && !ranges[2].has_embedding);
  EXPECT_TRUE(ranges[3].has_head && !ranges[1].has_head);
}

TEST(LayerSplit, ExplicitListIsTakenAsGiven) {
  const std::vector<LayerRange> ranges = split_layers(10, 4, 1, {1, 4, 4, 1});

  EXPECT_EQ(layer_counts(ranges), (std::vector<int>{1, 4, 4, 1}));
  EXPECT_EQ(ranges[2].first_layer, 5);
  EXPECT_EQ(ranges[3].end_layer, 10);
}

// --pipeline-layout's "E|t*4|t*4|t*3L": the first chunk the embedding alone, the last the head
// with its layers; a range with no blocks but the embedding or the head is one model/ runs.
TEST(LayerSplit, FirstAndLastChunksMayHoldNoLayer) {
  const std::vector<LayerRange> ranges = split_layers(8, 4, 1, {0, 4, 4, 0});
  EXPECT_EQ(layer_counts(ranges), (std::vector<int>{0, 4, 4, 0}));
  EXPECT_EQ(ranges[0].end_layer, 0);
  EXPECT_TRUE(ranges[0].has_embedding);
  EXPECT_EQ(ranges[3].first_layer, 8);
  EXPECT_TRUE(ranges[3].has_head);
  EXPECT_EQ(layer_counts(split_layers(3, 2, 2, {0, 1, 2, 0})), (std::vector<int>{0, 1, 2, 0}));
}

TEST(LayerSplit, ErrorsNameTheProblem) {
  EXPECT_EQ(error_of(3, 2, 2),
            "--layers 3 is fewer than --pp 2 x --virtual-stages 2 = 4 pipeline chunks (each needs at least one layer)");
  EXPECT_EQ(error_of(10, 4, 1, {2, 3, 5}),
            "--layers-per-stage 2,3,5 has 3 entries; it needs one per chunk, --pp 4 x --virtual-stages 1 = 4");
  EXPECT_EQ(error_of(10, 4, 1, {2, 3, 3, 3}), "--layers-per-stage 2,3,3,3 adds up to 11 layers, but the model has --layers 10");
  EXPECT_EQ(error_of(10, 4, 1, {5, 0, 3, 2}),
            "--layers-per-stage 5,0,3,2: entry 1 is 0; a chunk between the first and the last needs at least one layer");
  EXPECT_EQ(error_of(10, 4, 1, {5, 3, 2, -1}),
            "--layers-per-stage 5,3,2,-1: entry 3 is -1; a chunk between the first and the last needs at least one layer");
  EXPECT_EQ(error_of(10, 0, 1), "--pp 0 must be at least 1");
}
