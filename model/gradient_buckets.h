// How a stage's gradient allocation falls into the buckets of the data-parallel sum
// (comm/data_parallel_sum.h): one layer's 12 tensors each (the stage allocation is layer-major,
// model/parameter_layout.h), with wpe folded into the embedding chunk's first layer and lnfw, lnfb
// into the head chunk's last layer where they lie next to each other, and wte on its own; and which
// of ZeRO-1's broadcasts of those buckets each part of the next forward waits for.
#pragma once
#include <vector>

#include "comm/data_parallel_sum.h"
#include "model/parameter_layout.h"
#include "model/parameters_pending.h"

// The layer buckets of a stage, in chunk and layer order (not wte: see wte_bucket). Each layer
// is in exactly one; with wte_bucket they cover the stage allocation exactly once.
std::vector<GradientBucket> gradient_buckets(const ParameterLayout& layout);
// wte's range (count 0 on a stage without it).
GradientBucket wte_bucket(const ParameterLayout& layout);
// What the stage's forwards wait for (model/parameters_pending.h): per layer, and for the
// embedding and the head, the `gathered` event of the bucket broadcast last (buckets.gather_order)
// among those that hold its regions. Nothing to wait for without ZeRO-1's all-gather.
ParametersPending parameters_pending(const ParameterLayout& layout, const GradientBuckets& buckets, int num_layers);
