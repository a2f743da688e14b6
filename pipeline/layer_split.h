// Which transformer layers each pipeline stage runs: contiguous ranges, one per virtual
// stage (which stage and chunk holds a virtual stage is the schedule's placement,
// pipeline/schedule.h), the embedding on virtual stage 0 and the head (final LayerNorm, tied
// output projection, loss) on the last.
#pragma once

#include <vector>

#include "model/gpt.cuh"

// Splits num_layers layers over p stages x v chunks, index = virtual stage. Without
// layers_per_stage the split is even, and the remainder (num_layers mod pv) goes one layer
// each to the middle virtual stages, since the first and last also carry the embedding and
// the head. layers_per_stage (--layers-per-stage 2,3,3,2) gives the counts in virtual-stage
// order instead (or --pipeline-layout's, pipeline/layout_string.h): pv entries adding up to
// num_layers, each at least 1 but the first and the last, which may be 0 (a chunk of the
// embedding or the head alone). Throws std::runtime_error with one line naming the problem;
// fewer layers than pv for the even split is one.
std::vector<LayerRange> split_layers(int num_layers, int p, int v, const std::vector<int>& layers_per_stage = {});
