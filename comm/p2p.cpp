// Point-to-point transfers between neighbouring pipeline stages, each one NCCL group (comm/p2p.h).
#include "comm/p2p.h"

#include <stdexcept>
#include <string>

#include "comm/nccl_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"

namespace {

// The neighbours in the ring of stages, as ranks of the pipeline communicator.
int next_in_ring(const Mesh& mesh) { return (mesh.pp_rank + 1) % mesh.pp; }
int previous_in_ring(const Mesh& mesh) { return (mesh.pp_rank + mesh.pp - 1) % mesh.pp; }

void require_neighbours(const CommGroups& groups, const char* function) {
  if (groups.mesh.pp < 2)
    throw std::runtime_error(std::string(function) + " with pp = 1: a single stage has no neighbour");
}

// One group of up to one send and one receive with the same peer (a null buffer: none).
void exchange(const CommGroups& groups, const char* function, const void* send, void* receive, int peer,
              size_t count, ncclDataType_t type, cudaStream_t stream) {
  require_neighbours(groups, function);
  issue_in_order(*groups.order, groups.pipeline, stream, [&] {
    NCCL_CHECK(ncclGroupStart());
    if (send != nullptr) NCCL_CHECK(ncclSend(send, count, type, peer, groups.pipeline, stream));
    if (receive != nullptr) NCCL_CHECK(ncclRecv(receive, count, type, peer, groups.pipeline, stream));
    NCCL_CHECK(ncclGroupEnd());
  });
}

}  // namespace

void send_forward(const CommGroups& groups, const void* activation, size_t count, ncclDataType_t type,
                  cudaStream_t stream) {
  exchange(groups, "send_forward", activation, nullptr, next_in_ring(groups.mesh), count, type, stream);
}

void recv_forward(const CommGroups& groups, void* activation, size_t count, ncclDataType_t type, cudaStream_t stream) {
  exchange(groups, "recv_forward", nullptr, activation, previous_in_ring(groups.mesh), count, type, stream);
}

void send_backward(const CommGroups& groups, const void* grad_input, size_t count, ncclDataType_t type,
                   cudaStream_t stream) {
  exchange(groups, "send_backward", grad_input, nullptr, previous_in_ring(groups.mesh), count, type, stream);
}

void recv_backward(const CommGroups& groups, void* grad_output, size_t count, ncclDataType_t type,
                   cudaStream_t stream) {
  exchange(groups, "recv_backward", nullptr, grad_output, next_in_ring(groups.mesh), count, type, stream);
}

void send_forward_recv_backward(const CommGroups& groups, const void* activation, void* grad_output, size_t count,
                                ncclDataType_t type, cudaStream_t stream) {
  exchange(groups, "send_forward_recv_backward", activation, grad_output, next_in_ring(groups.mesh), count, type,
           stream);
}

void send_backward_recv_forward(const CommGroups& groups, const void* grad_input, void* activation, size_t count,
                                ncclDataType_t type, cudaStream_t stream) {
  exchange(groups, "send_backward_recv_forward", grad_input, activation, previous_in_ring(groups.mesh), count, type,
           stream);
}

void exchange_group(const CommGroups& groups, Transfer* transfers, size_t num_transfers, ncclDataType_t type,
                    cudaStream_t stream) {
  require_neighbours(groups, "exchange_group");
  const int next = next_in_ring(groups.mesh), previous = previous_in_ring(groups.mesh);
  issue_in_order(*groups.order, groups.pipeline, stream, [&] {
    NCCL_CHECK(ncclGroupStart());
    for (size_t i = 0; i < num_transfers; ++i) {
      Transfer& t = transfers[i];
      t.peer = t.with_next ? next : previous;
      if (t.send) NCCL_CHECK(ncclSend(t.buffer, t.count, type, t.peer, groups.pipeline, stream));
      else NCCL_CHECK(ncclRecv(t.buffer, t.count, type, t.peer, groups.pipeline, stream));
    }
    NCCL_CHECK(ncclGroupEnd());
  });
}

void warm_up_neighbours(const CommGroups& groups, cudaStream_t stream) {
  const Mesh& mesh = groups.mesh;
  if (mesh.pp < 2) return;
  const int next = next_in_ring(mesh), previous = previous_in_ring(mesh);
  // With pp = 2 both neighbours are the same rank: one exchange with it.
  const bool two_neighbours = next != previous;
  // This rank's stage, then what the next and the previous stage sent.
  int* device = static_cast<int*>(device_alloc_bytes(kNeighbourExchangeBytes));
  CUDA_CHECK(cudaMemcpyAsync(device, &mesh.pp_rank, sizeof(int), cudaMemcpyHostToDevice, stream));
  issue_in_order(*groups.order, groups.pipeline, stream, [&] {
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(device, 1, ncclInt32, next, groups.pipeline, stream));
    NCCL_CHECK(ncclRecv(device + 1, 1, ncclInt32, next, groups.pipeline, stream));
    if (two_neighbours) {
      NCCL_CHECK(ncclSend(device, 1, ncclInt32, previous, groups.pipeline, stream));
      NCCL_CHECK(ncclRecv(device + 2, 1, ncclInt32, previous, groups.pipeline, stream));
    }
    NCCL_CHECK(ncclGroupEnd());
  });
  int received[3] = {};
  CUDA_CHECK(cudaMemcpyAsync(received, device, sizeof(received), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  device_free(device);
  if (!two_neighbours) received[2] = received[1];
  if (received[1] != next || received[2] != previous)
    throw std::runtime_error("warm_up_neighbours: stage " + std::to_string(mesh.pp_rank) + " heard stages " +
                             std::to_string(received[1]) + " and " + std::to_string(received[2]) +
                             " from its neighbours " + std::to_string(next) + " and " + std::to_string(previous));
}
