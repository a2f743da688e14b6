// Point-to-point transfers between neighbouring pipeline stages: activations forward to the
// next stage, gradients backward to the previous one, over the pipeline communicator.
//
// Every function below issues its sends and receives as ONE NCCL group (ncclGroupStart ..
// ncclGroupEnd), so that no ordering of the ranks' calls can deadlock. The dangerous case
// is the crossing of two neighbours in 1F1B's steady state: stage 0 sends the activation of
// microbatch m + 1 to stage 1 and wants the gradient of microbatch m back, while stage 1
// sends the gradient of m to stage 0 and wants the activation of m + 1:
//
//     stage 0: send(act m+1 -> 1); recv(grad m <- 1)
//     stage 1: send(grad m -> 0);  recv(act m+1 <- 0)
//
// As two separate calls, each stage's send waits for the matching receive (NCCL's send
// kernel spins until the peer's receive kernel runs; MPI's send of a message above the
// eager limit waits for the receiver), and each peer's receive is queued behind its own
// send: both wait for each other forever. As one group (send_forward_recv_backward on
// stage 0, send_backward_recv_forward on stage 1) a stage posts its send and its receive
// together, so each send finds its receive already posted, whatever order the two ranks
// arrive in. What remains for freedom from deadlock is that neighbouring stages name
// matching transfers in the same order, which the schedule simulator checks.
//
// Neighbours form a ring: the next stage of the last stage is stage 0, which the
// interleaved schedule uses to pass chunk c's output of the last stage to chunk c + 1 on
// stage 0; the other schedules never send past the ends. pp == 1 has no neighbour, and
// the functions throw std::runtime_error there.
//
// Buffers are device pointers of count elements of type; the transfers are enqueued on
// stream, and work enqueued on stream later sees the received data.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>

#include "comm/groups.h"

// activation (count) -> the next stage.
void send_forward(const CommGroups& groups, const void* activation, size_t count, ncclDataType_t type,
                  cudaStream_t stream);
// activation (count) <- the previous stage.
void recv_forward(const CommGroups& groups, void* activation, size_t count, ncclDataType_t type, cudaStream_t stream);
// grad_input (count), the gradient of this stage's input -> the previous stage.
void send_backward(const CommGroups& groups, const void* grad_input, size_t count, ncclDataType_t type,
                   cudaStream_t stream);
// grad_output (count), the gradient of this stage's output <- the next stage.
void recv_backward(const CommGroups& groups, void* grad_output, size_t count, ncclDataType_t type,
                   cudaStream_t stream);
// activation (count) -> the next stage and grad_output (count) <- the next stage, in one group.
void send_forward_recv_backward(const CommGroups& groups, const void* activation, void* grad_output, size_t count,
                                ncclDataType_t type, cudaStream_t stream);
// grad_input (count) -> the previous stage and activation (count) <- the previous stage, in one group.
void send_backward_recv_forward(const CommGroups& groups, const void* grad_input, void* activation, size_t count,
                                ncclDataType_t type, cudaStream_t stream);

// One transfer of a grouped call: count elements of buffer to (send) or from (receive) the
// next or the previous stage in the ring.
struct Transfer {
  bool send;
  bool with_next;  // the next stage (activations out, gradients in), else the previous
  void* buffer;
  size_t count;
  int peer = -1;   // set by exchange_group: the pipeline rank it gave ncclSend or ncclRecv
};
// The transfers in the listed order, all in one group: a schedule step of several sends and
// receives (pipeline/schedule.h), e.g. the interleaved schedule's four-way exchange. Sets each
// transfer's peer to the rank the NCCL call named, for the executor's trace to report what the
// transport was told rather than what the schedule meant.
void exchange_group(const CommGroups& groups, Transfer* transfers, size_t num_transfers, ncclDataType_t type,
                    cudaStream_t stream);

// One small exchange with each neighbour in the ring, all in one group, at start: NCCL
// connects a pair of ranks on their first transfer, so this keeps the connection set-up out
// of the first step's timings and makes a broken link fail here. Each rank sends its
// pp_rank; throws std::runtime_error if a neighbour's answer is not the neighbour's stage.
// Allocates and frees a few bytes of device memory; waits for stream. Nothing when pp == 1.
void warm_up_neighbours(const CommGroups& groups, cudaStream_t stream);
// The device memory it allocates (and frees): this rank's stage, then what each neighbour sent.
inline constexpr size_t kNeighbourExchangeBytes = 3 * sizeof(int);
