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
