// How ZeRO-1 (--zero 1) splits a stage's optimizer state over its dp replicas: each replica owns
// one contiguous range of the stage's flat parameter allocation (llm.c's choice), and updates,
// keeps the moments and master weights of, and sends the updated parameters of that range only.
// The cuts lie on region boundaries (model/parameter_layout.h: a tensor, or one layer's slice of
// one): a region's squared-norm partial is then computed whole, by one replica, over the same
// elements in the same order as without shards, so the global norm stays bitwise the same
// (trainer/step/optimizer.h). The price is balance: a shard is 1/dp of the stage to within a
// region (wte, the largest, may make one shard larger than 1/dp).
#pragma once
#include <cstddef>
#include <vector>

#include "model/parameter_layout.h"

struct OptimizerShards {
  std::vector<size_t> bounds;  // (dp + 1) replica r owns elements [bounds[r], bounds[r + 1]); bounds[dp] = size
  size_t largest;              // the largest shard's elements: what every replica allocates
};

// The cuts: for k = 1 .. dp - 1, the region boundary nearest k size / dp (the earlier of two
// equally near; never before the previous cut). dp = 1: one shard, the whole stage.
OptimizerShards optimizer_shards(const ParameterLayout& layout, int dp);
