// The NCCL communicators of a dp x pp mesh (comm/mesh.h): the world, this rank's pipeline,
// this stage's data-parallel replicas, and the tied embedding's {first stage, last stage}
// of this rank's pipeline. All are split from one world communicator bootstrapped over MPI.
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
  // Every NCCL operation of this rank, on any of them, in the order issued (comm/nccl_order.h);
  // shared by the copies of the groups that the trainer and the executor hold.
  std::shared_ptr<NcclOrder> order;
};

// Collective over MPI_COMM_WORLD: every rank calls it, with the mesh of the same layout.
// World rank 0 makes the world's unique id and broadcasts it with MPI_Bcast; the groups
// are ncclCommSplit's of the world (pipeline: color dp_rank, key pp_rank; data-parallel:
// color pp_rank, key dp_rank; embedding: color dp_rank, key pp_rank, no color on the
// middle stages). In the GPU build the caller has selected this rank's device first.
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
