// AdamW's device tables of one or more launches (trainer/step/adamw_tables.h).
#include "trainer/step/adamw_tables.h"

#include <algorithm>

#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "model/parameters.h"
#include "model/tensor_parallel_linear.h"

std::vector<AdamWRegion> adamw_region_table(const std::vector<ParameterRegion>& regions, size_t first) {
  std::vector<AdamWRegion> table;
  for (const ParameterRegion& r : regions) {
    AdamWRegion entry{r.offset - first, r.count, r.full_offset, parameter_tensor_has_weight_decay(r.tensor) ? 1 : 0};
    if (r.cut) {
      const SliceRuns runs = slice_runs(*r.cut);
      entry.full_offset += runs.first;
      entry.run_length = runs.length;
      entry.run_stride = runs.stride;
    }
    table.push_back(entry);
  }
  std::sort(table.begin(), table.end(), [](const AdamWRegion& a, const AdamWRegion& b) { return a.offset < b.offset; });
  return table;
}

AdamWTables upload_adamw_tables(const std::vector<AdamWLaunch>& launches) {
  size_t region_entries = 0, block_entries = 0;
  for (const AdamWLaunch& launch : launches) {
    region_entries += launch.region_capacity;
    block_entries += adamw_region_blocks(launch.element_capacity);
  }
  AdamWTables tables;
  tables.regions = device_alloc<AdamWRegion>(region_entries);
  tables.block_regions = device_alloc<int>(block_entries);
  AdamWRegion* regions = tables.regions;
  int* block_regions = tables.block_regions;
  for (const AdamWLaunch& launch : launches) {
    const std::vector<AdamWRegion> table = adamw_region_table(launch.regions, launch.first);
    size_t n = 0;  // the launch's adamw_update_regions n
    for (const ParameterRegion& r : launch.regions) n += r.count;
    const std::vector<int> blocks = adamw_block_regions(table, n);
    CUDA_CHECK(cudaMemcpy(regions, table.data(), table.size() * sizeof(AdamWRegion), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(block_regions, blocks.data(), blocks.size() * sizeof(int), cudaMemcpyHostToDevice));
    tables.launches.push_back({regions, block_regions});
    regions += launch.region_capacity;
    block_regions += adamw_region_blocks(launch.element_capacity);
  }
  return tables;
}

void free_adamw_tables(AdamWTables& tables) {
  device_free(tables.regions);
  device_free(tables.block_regions);
  tables = AdamWTables{};
}
