// The tensor-parallel collectives (comm/tensor_parallel.h).
#include "comm/tensor_parallel.h"

#include "comm/nccl_check.cuh"

void allreduce_tensor_parallel(const CommGroups& groups, void* values, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, cudaStream_t stream) {
  if (groups.mesh.tp == 1) return;
  issue_in_order(*groups.order, groups.tensor_parallel, stream, [&] {
    NCCL_CHECK(ncclAllReduce(values, values, count, type, op, groups.tensor_parallel, stream));
  });
}

void allgather_tensor_parallel(const CommGroups& groups, const void* shard, void* gathered, size_t count,
                               ncclDataType_t type, cudaStream_t stream) {
  if (groups.mesh.tp == 1) return;
  issue_in_order(*groups.order, groups.tensor_parallel, stream, [&] {
    NCCL_CHECK(ncclAllGather(shard, gathered, count, type, groups.tensor_parallel, stream));
  });
}

void reduce_scatter_tensor_parallel(const CommGroups& groups, const void* values, void* shard, size_t count,
                                    ncclDataType_t type, cudaStream_t stream) {
  if (groups.mesh.tp == 1) return;
  issue_in_order(*groups.order, groups.tensor_parallel, stream, [&] {
    NCCL_CHECK(ncclReduceScatter(values, shard, count, type, ncclSum, groups.tensor_parallel, stream));
  });
}
