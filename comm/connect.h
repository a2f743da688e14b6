// Connects every communicator of a mesh before the first step. NCCL may connect a pair of ranks
// lazily, on the first operation that needs it (NCCL_RUNTIME_CONNECT, the default since 2.22):
// then the first step's first all-reduce on each communicator sets up its connections, which
// allocates device memory (an implicit synchronisation of the device, CUDA Programming Guide)
// while the step's other operations wait on peers, and a broken link would fail inside the
// step. So set-up runs one small operation on each communicator a step uses: an all-reduce of
// one float on the world, the pipeline (its norm gather), the data-parallel replicas when
// dp > 1, the tensor-parallel ranks when tp > 1 and the tied embedding's two stages, every rank
// in that order, then the pipeline's sends and receives with each neighbour (warm_up_neighbours,
// comm/p2p.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "comm/groups.h"
#include "comm/mesh.h"

// Collective over the mesh: every rank calls it with its groups. Allocates and frees a few bytes
// of device memory and waits for stream. Nothing on a mesh of one rank.
void connect_communicators(const CommGroups& groups, cudaStream_t stream);
// The largest of those allocations on a rank of the mesh (the all-reduce's float, the
// neighbours' exchange's three ints), for the memory plan (pipeline/memory_plan.h): 0 alone.
size_t connection_scratch_bytes(const Mesh& mesh);
