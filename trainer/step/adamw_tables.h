// AdamW's device tables (kernels/adamw.cuh's adamw_update_regions): for each launch over a stage's
// arrays, its regions sorted by offset with their decay and rounding indices, and its block table,
// built and uploaded once at set-up. The synchronous optimizer makes one launch over its shard
// (trainer/step/optimizer.h); PipeDream two, the tied copy of wte apart from the other regions
// (trainer/step/pipedream_updates.h). One allocation of each table holds every launch's part in
// turn, so that the memory plan (pipeline/memory_plan.cpp) counts one item per table: its
// region entries and adamw_region_blocks of each launch's element capacity.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/adamw.cuh"
#include "model/parameter_layout.h"

// The regions as AdamW's one launch reads them: sorted by offset, each with its decay (GPT-2's:
// the matrices and embeddings) and its elements' indices in the whole model, the rounding key (a
// tp rank's slice as runs of the full layer, model/tensor_parallel_linear.h's slice_runs). The
// tied copy of wte on the last stage has wte's full_offset: both copies round alike and stay
// equal. Offsets count from first, the launch's first element.
std::vector<AdamWRegion> adamw_region_table(const std::vector<ParameterRegion>& regions, size_t first);

// One launch: its regions cover elements [first, first + their counts) of the stage's arrays
// exactly once. Its part of the tables has room for region_capacity regions and the blocks of
// element_capacity elements, at least what it holds: a ZeRO-1 shard's tables are as large as the
// stage's largest shard's, so that every replica allocates alike.
struct AdamWLaunch {
  std::vector<ParameterRegion> regions;
  size_t first;
  size_t region_capacity;
  size_t element_capacity;
};

// Where one launch's part of the tables starts (device).
struct AdamWLaunchTables {
  const AdamWRegion* regions;
  const int* block_regions;
};

struct AdamWTables {
  AdamWRegion* regions = nullptr;  // (the launches' region_capacity summed) each launch's table in turn
  int* block_regions = nullptr;    // (adamw_region_blocks of each one's element_capacity, summed) the same
  std::vector<AdamWLaunchTables> launches;  // launch i's parts of the two
};

// The launches' tables, allocated and uploaded.
AdamWTables upload_adamw_tables(const std::vector<AdamWLaunch>& launches);
void free_adamw_tables(AdamWTables& tables);
