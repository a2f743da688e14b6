// The collectives of a training step across the mesh (comm/collectives.h).
#include "comm/collectives.h"

#include <stdexcept>
#include <string>

#include "comm/nccl_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/global_norm.cuh"

void allreduce_data_parallel_gradients(const CommGroups& groups, void* gradients, size_t count, ncclDataType_t type,
                                       cudaStream_t stream) {
  if (groups.mesh.dp == 1) return;
  issue_in_order(*groups.order, groups.data_parallel, stream, [&] {
    NCCL_CHECK(ncclAllReduce(gradients, gradients, count, type, ncclSum, groups.data_parallel, stream));
  });
}

namespace {

// The bytes of one element of the types the trainer sums.
size_t element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat64: return 8;
    case ncclFloat32: return 4;
    case ncclBfloat16: return 2;
    default: throw std::runtime_error("collectives: NCCL data type " + std::to_string(type) + " is not summed here");
  }
}

// One NCCL group over the data-parallel group of `call` (ncclReduce or ncclBroadcast) on each
// range of buffer (in place), rooted at the range's owner.
template <typename Call>
void for_each_owned_range(const CommGroups& groups, void* buffer, const std::vector<OwnedRange>& ranges,
                          ncclDataType_t type, cudaStream_t stream, const Call& call) {
  if (groups.mesh.dp == 1 || ranges.empty()) return;
  const size_t bytes = element_bytes(type);
  issue_in_order(*groups.order, groups.data_parallel, stream, [&] {
    NCCL_CHECK(ncclGroupStart());
    for (const OwnedRange& r : ranges) NCCL_CHECK(call(static_cast<char*>(buffer) + r.offset * bytes, r));
    NCCL_CHECK(ncclGroupEnd());
  });
}

}  // namespace

void reduce_gradients_to_owners(const CommGroups& groups, void* gradients, const std::vector<OwnedRange>& ranges,
                                ncclDataType_t type, cudaStream_t stream) {
  for_each_owned_range(groups, gradients, ranges, type, stream, [&](void* range, const OwnedRange& r) {
    return ncclReduce(range, range, r.count, type, ncclSum, r.owner, groups.data_parallel, stream);
  });
}

void broadcast_parameters_from_owners(const CommGroups& groups, void* parameters,
                                      const std::vector<OwnedRange>& ranges, ncclDataType_t type,
                                      cudaStream_t stream) {
  for_each_owned_range(groups, parameters, ranges, type, stream, [&](void* range, const OwnedRange& r) {
    return ncclBroadcast(range, range, r.count, type, r.owner, groups.data_parallel, stream);
  });
}

void sum_norm_partials_over_replicas(const CommGroups& groups, float* partials, size_t count, cudaStream_t stream) {
  if (groups.mesh.dp == 1) return;
  issue_in_order(*groups.order, groups.data_parallel, stream, [&] {
    NCCL_CHECK(ncclAllReduce(partials, partials, count, ncclFloat, ncclSum, groups.data_parallel, stream));
  });
}

void allreduce_tied_embedding_gradient(const CommGroups& groups, void* grad_wte, size_t count, ncclDataType_t type,
                                       cudaStream_t stream) {
  if (groups.embedding == nullptr) return;
  issue_in_order(*groups.order, groups.embedding, stream, [&] {
    NCCL_CHECK(ncclAllReduce(grad_wte, grad_wte, count, type, ncclSum, groups.embedding, stream));
  });
}

namespace {
ncclDataType_t nccl_type(float*) { return ncclFloat32; }
ncclDataType_t nccl_type(double*) { return ncclFloat64; }
}  // namespace

void allreduce_world_sum(const CommGroups& groups, double* values, size_t count, cudaStream_t stream) {
  if (groups.mesh.world_size == 1) return;
  issue_in_order(*groups.order, groups.world, stream, [&] {
    NCCL_CHECK(ncclAllReduce(values, values, count, ncclDouble, ncclSum, groups.world, stream));
  });
}

template <typename S>
void gather_layer_norm_partials(const CommGroups& groups, S* partials, size_t num_slots, NormSlotRange own, S* total,
                                cudaStream_t stream) {
  if (own.first > own.end || own.end > num_slots)
    throw std::runtime_error("gather_layer_norm_partials: own slots [" + std::to_string(own.first) + ", " +
                             std::to_string(own.end) + ") are not within the " + std::to_string(num_slots) + " slots");
  CUDA_CHECK(cudaMemsetAsync(partials, 0, own.first * sizeof(S), stream));
  CUDA_CHECK(cudaMemsetAsync(partials + own.end, 0, (num_slots - own.end) * sizeof(S), stream));
  if (groups.mesh.pp > 1)
    issue_in_order(*groups.order, groups.pipeline, stream, [&] {
      NCCL_CHECK(ncclAllReduce(partials, partials, num_slots, nccl_type(partials), ncclSum, groups.pipeline, stream));
    });
  sum_rows_in_fixed_order(total, partials, 1, num_slots, stream);
}

template void gather_layer_norm_partials<float>(const CommGroups&, float*, size_t, NormSlotRange, float*, cudaStream_t);
template void gather_layer_norm_partials<double>(const CommGroups&, double*, size_t, NormSlotRange, double*,
                                                 cudaStream_t);
