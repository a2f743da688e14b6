// Profile-guided partitioning (pipeline/partition_layers.h): the least bottleneck contiguous
// split, against splits worked out by hand, with its documented tie-breaking. Host code only;
// runs in both builds.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/partition_layers.h"

namespace {

LayerCosts uniform(int layers, double embedding, double head) {
  return {std::vector<double>(layers, 1.0), embedding, head};
}

std::string error_of(const LayerCosts& costs, int chunks, const std::vector<int>& max_layers = {}) {
  try {
    partition_layers(costs, chunks, max_layers);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST(PartitionLayers, UniformCostsGiveTheEvenSplit) {
  EXPECT_EQ(partition_layers(uniform(8, 0, 0), 4), (std::vector<int>{2, 2, 2, 2}));
  // 6 over 4: any two chunks of 2 tie at the bottleneck 2; the even split (extra layers in the
  // middle, pipeline/layer_split.h) moves none.
  EXPECT_EQ(partition_layers(uniform(6, 0, 0), 4), (std::vector<int>{1, 2, 2, 1}));
  EXPECT_EQ(partition_layers(uniform(12, 0, 0), 8), (std::vector<int>{1, 1, 2, 2, 2, 2, 1, 1}));
}

TEST(PartitionLayers, HeavyHeadMovesLayersOffTheLastStage) {
  // 8 blocks of 1 and a head of 3: 11 over 4 stages is at least 2.75, so the bottleneck is 3 (a
  // whole block); the head alone reaches it, so the last stage holds no block, and the first three
  // hold 8 with at most 3 each: 3,3,2 in some order, each 1 + 1 + 0 + 4 = 6 (squares) from
  // 2,2,2,2. Lexicographically least: 2,3,3.
  EXPECT_EQ(partition_layers(uniform(8, 0, 3), 4), (std::vector<int>{2, 3, 3, 0}));
  // A head of 1.5: bottleneck 3 (two blocks and 1.5 are 3.5): the last stage takes one block,
  // the others 7 in 3,2,2 orders, each 2 from 2,2,2,2 (one +1, the last -1); least
  // lexicographically: 2,2,3,1.
  EXPECT_EQ(partition_layers(uniform(8, 0, 1.5), 4), (std::vector<int>{2, 2, 3, 1}));
}

TEST(PartitionLayers, HeavyEmbeddingMovesLayersOffTheFirstStage) {
  // The mirror of the head's case: bottleneck 3 (one block and 1.5 on the first stage); 7 blocks
  // of the other three in 3,2,2 orders, each 2 from the even split; least lexicographically 2,2,3.
  EXPECT_EQ(partition_layers(uniform(8, 1.5, 0), 4), (std::vector<int>{1, 2, 2, 3}));
}

TEST(PartitionLayers, UnevenBlockCostsBalanceByTime) {
  // Blocks 4,1,1,1,1,4 over 3: bottleneck 4 is reached by {4},{1,1,1,1},{4}, the only split
  // within 4 (a block of 4 with anything is above it).
  EXPECT_EQ(partition_layers({{4, 1, 1, 1, 1, 4}, 0, 0}, 3), (std::vector<int>{1, 4, 1}));
}

TEST(PartitionLayers, ChunkTimesAddTheEmbeddingFirstAndTheHeadLast) {
  EXPECT_EQ(chunk_times({{1, 2, 3, 4}, 10, 100}, {1, 2, 1}), (std::vector<double>{11, 5, 104}));
  EXPECT_EQ(chunk_times({{1, 2}, 10, 100}, {2}), (std::vector<double>{113}));
}

TEST(PartitionLayers, MemoryCapsAreNeverExceeded) {
  // Without a cap the heavy head gives 2,3,3,0; with at most 2 layers on stage 1 the least
  // bottleneck is still 3 (3,2,3,0).
  EXPECT_EQ(partition_layers(uniform(8, 0, 3), 4, {8, 2, 8, 8}), (std::vector<int>{3, 2, 3, 0}));
  EXPECT_NE(error_of(uniform(8, 0, 0), 4, {2, 2, 2, 1}).find("fits the memory limit"), std::string::npos);
}

TEST(PartitionLayers, MiddleChunksKeepALayerAndTooFewLayersAreRefused) {
  // A huge embedding and head empty the first and the last stage, which may run them alone; the
  // middle two keep their layers, and of the splits of 4 over them 2,2 is nearest 1,1,1,1 (squares:
  // 1 + 1 + 1 + 1 against 0,1,3,0's 1 + 0 + 4 + 1).
  EXPECT_EQ(partition_layers(uniform(4, 100, 100), 4), (std::vector<int>{0, 2, 2, 0}));
  EXPECT_EQ(error_of(uniform(3, 0, 0), 4),
            "--layers-per-stage auto: --layers 3 is fewer than --pp 4 x --virtual-stages 1 = 4 pipeline chunks "
            "(each needs at least one layer)");
}
