// The NCCL communicators of a dp x tp x pp mesh (comm/mesh.h): the world, this rank's pipeline,
// this stage's data-parallel replicas, the tied embedding's {first stage, last stage} of this
// rank's pipeline, and this stage's tensor-parallel ranks. All are split from one world
// communicator bootstrapped over MPI. A tp rank's pipeline, replicas and embedding pair are the
// ranks of its own tp_rank: each tensor-parallel shard travels and sums only with its kind.
#pragma once
#include <nccl.h>

#include <memory>

#include "comm/mesh.h"
#include "comm/nccl_order.h"

struct CommGroups {
  Mesh mesh;
  ncclComm_t world;          // every rank; rank = world rank
  ncclComm_t pipeline;       // the pp stages of this replica; rank = pp_rank
  ncclComm_t data_parallel;  // the dp replicas of this stage; rank = dp_rank
  // The first and last stage of this pipeline, which both hold the tied token embedding
  // (the first as the embedding, the last as the output projection): rank 0 = the first
  // stage, rank 1 = the last. nullptr on the middle stages, and on every rank when pp == 1,
  // where the one stage holds both uses and needs no communication for them.
  ncclComm_t embedding;
  // The tp ranks of this stage and replica (consecutive world ranks); rank = tp_rank. nullptr
  // when tp == 1, where a rank holds its stage's whole tensors and no collective is needed.
  ncclComm_t tensor_parallel;
  // Every NCCL operation of this rank, on any of them, in the order issued (comm/nccl_order.h);
  // shared by the copies of the groups that the trainer and the executor hold.
  std::shared_ptr<NcclOrder> order;
};

// Collective over MPI_COMM_WORLD: every rank calls it, with the mesh of the same layout.
// World rank 0 makes the world's unique id and broadcasts it with MPI_Bcast; the groups
// are ncclCommSplit's of the world (pipeline: color (dp_rank, tp_rank), key pp_rank;
// data-parallel: color (pp_rank, tp_rank), key dp_rank; embedding: color (dp_rank, tp_rank), key
// pp_rank, no color on the middle stages; tensor-parallel: color (dp_rank, pp_rank), key tp_rank).
// With tp = 1 the colors are those of the dp x pp mesh. In the GPU build the caller has selected
// this rank's device first.
CommGroups create_comm_groups(const Mesh& mesh);

// Destroys every communicator of groups and nulls them; every rank calls it, as for creation.
void destroy_comm_groups(CommGroups& groups);

// The same on an error, by this rank alone and on the thread that issues its NCCL calls (NCCL's
// "Thread safety": a blocking communicator takes no call from two threads at once). ncclCommAbort
// aborts the communicator's operations without waiting for peers (ncclCommDestroy waits for every
// operation to complete, which a failed peer never lets happen), but its clean-up waits for the
// device, so for any other communicator's operation already running there. So the communicator of
// the operation the device runs (comm/nccl_order.h) goes first, then the others. Leaves the
// communicators null.
void abort_comm_groups(CommGroups& groups);
