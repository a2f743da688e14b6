// An NCCL communicator of every rank of MPI_COMM_WORLD, rank for rank (world rank 0 makes the
// id and broadcasts it), for the CPU build's multi-rank tests that make their own communicators.
#pragma once
#include <mpi.h>
#include <nccl.h>

#include "comm/nccl_check.cuh"

inline ncclComm_t world_communicator() {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return comm;
}
