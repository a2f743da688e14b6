// Replica 0's stage records on world rank 0 (trainer/step/stage_record.h).
#include "trainer/step/stage_record.h"

#include "kernels/device_memory.cuh"

StageRecord measure_stage(int stage, const ExecutorAccounting& a) {
  return {stage, a.span_ms > 0 ? 1.0 - a.busy_ms / a.span_ms : 0.0, double(a.activation_bytes),
          double(device_memory_counts().bytes_in_use)};
}

std::vector<StageRecord> gather_stage_records(const World& world, const Mesh& mesh, const StageRecord& own) {
  const double values[4] = {double(own.stage), own.idle, own.activation_bytes, own.device_bytes};
  const std::vector<double> all = gather_to_rank0(world, values, 4);
  std::vector<StageRecord> records;
  for (int stage = 0; stage < mesh.pp && size_t(4 * world_rank_of(mesh, 0, stage) + 3) < all.size(); ++stage) {
    const double* v = all.data() + 4 * world_rank_of(mesh, 0, stage);
    records.push_back({int(v[0]), v[1], v[2], v[3]});
  }
  return records;
}
