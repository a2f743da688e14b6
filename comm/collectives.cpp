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
