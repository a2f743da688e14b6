// How a stage's gradient allocation falls into the buckets of the data-parallel sum
// (comm/data_parallel_sum.h): one layer's 12 tensors each (the stage allocation is layer-major,
// model/parameter_layout.h), with wpe folded into the embedding chunk's first layer and lnfw, lnfb
// into the head chunk's last layer where they lie next to each other, and wte on its own.
#pragma once
#include <vector>

#include "comm/data_parallel_sum.h"
#include "model/parameter_layout.h"

// The layer buckets of a stage, in chunk and layer order (not wte: see wte_bucket). Each layer
// is in exactly one; with wte_bucket they cover the stage allocation exactly once.
std::vector<GradientBucket> gradient_buckets(const ParameterLayout& layout);
// wte's range (count 0 on a stage without it).
GradientBucket wte_bucket(const ParameterLayout& layout);
