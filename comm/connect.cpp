// Every communicator connected before the first step (comm/connect.h).
#include "comm/connect.h"

#include <vector>

#include "comm/nccl_check.cuh"
#include "comm/p2p.h"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"

size_t connection_scratch_bytes(const Mesh& mesh) {
  if (mesh.world_size == 1) return 0;
  return mesh.pp > 1 ? kNeighbourExchangeBytes : sizeof(float);
}

void connect_communicators(const CommGroups& groups, cudaStream_t stream) {
  const Mesh& mesh = groups.mesh;
  if (mesh.world_size == 1) return;
  // The same list on every rank but for the embedding, which only its two stages hold and
  // which comes last: no rank waits in a communicator a peer reaches later.
  std::vector<ncclComm_t> used{groups.world};
  if (mesh.pp > 1) used.push_back(groups.pipeline);
  if (mesh.dp > 1) used.push_back(groups.data_parallel);
  if (mesh.tp > 1) used.push_back(groups.tensor_parallel);
  if (groups.embedding != nullptr) used.push_back(groups.embedding);
  float* one = device_alloc<float>(1);
  CUDA_CHECK(cudaMemsetAsync(one, 0, sizeof(float), stream));
  for (ncclComm_t comm : used)
    issue_in_order(*groups.order, comm, stream,
                   [&] { NCCL_CHECK(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm, stream)); });
  CUDA_CHECK(cudaStreamSynchronize(stream));
  device_free(one);
  warm_up_neighbours(groups, stream);
}
