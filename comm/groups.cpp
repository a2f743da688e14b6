// The NCCL communicators of the mesh (comm/groups.h).
#include "comm/groups.h"

#include <mpi.h>

#include "comm/nccl_check.cuh"

CommGroups create_comm_groups(const Mesh& mesh) {
  CommGroups groups{mesh,    nullptr, nullptr, nullptr,
                    nullptr, nullptr, std::make_shared<NcclOrder>(create_nccl_order())};
  ncclUniqueId id;
  if (mesh.world_rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCL_CHECK(ncclCommInitRank(&groups.world, mesh.world_size, id, mesh.world_rank));

  // Every world rank takes part in every split, in the same order (NCCL requires it). A color
  // pairs an index with tp_rank as index * tp + tp_rank: with tp = 1, the index alone.
  const int pipeline_color = mesh.dp_rank * mesh.tp + mesh.tp_rank;
  NCCL_CHECK(ncclCommSplit(groups.world, pipeline_color, mesh.pp_rank, &groups.pipeline, nullptr));
  NCCL_CHECK(ncclCommSplit(groups.world, mesh.pp_rank * mesh.tp + mesh.tp_rank, mesh.dp_rank, &groups.data_parallel,
                           nullptr));
  // pp == 1 is known to all ranks alike, so all skip this split together.
  if (mesh.pp > 1) {
    const bool holds_embedding = mesh.is_first_stage() || mesh.is_last_stage();
    NCCL_CHECK(ncclCommSplit(groups.world, holds_embedding ? pipeline_color : NCCL_SPLIT_NOCOLOR, mesh.pp_rank,
                             &groups.embedding, nullptr));
  }
  // Likewise tp == 1 on all ranks, after the splits of the dp x pp mesh, whose order stays.
  if (mesh.tp > 1)
    NCCL_CHECK(ncclCommSplit(groups.world, mesh.dp_rank * mesh.pp + mesh.pp_rank, mesh.tp_rank,
                             &groups.tensor_parallel, nullptr));
  return groups;
}

void destroy_comm_groups(CommGroups& groups) {
  for (ncclComm_t* comm :
       {&groups.tensor_parallel, &groups.embedding, &groups.data_parallel, &groups.pipeline, &groups.world}) {
    if (*comm != nullptr) NCCL_CHECK(ncclCommDestroy(*comm));
    *comm = nullptr;
  }
  if (groups.order) destroy_nccl_order(*groups.order);
}

void abort_comm_groups(CommGroups& groups) {
  // Not checked: this is already the way out of an error, and an abort that fails changes
  // nothing in what follows (the job is aborted next). The order's events stay: the device
  // may still be using them.
  const ncclComm_t running = groups.order ? communicator_in_flight(*groups.order) : nullptr;
  if (running != nullptr) ncclCommAbort(running);
  for (ncclComm_t* comm : {&groups.pipeline, &groups.data_parallel, &groups.embedding, &groups.tensor_parallel,
                            &groups.world}) {
    if (*comm != nullptr && *comm != running) ncclCommAbort(*comm);
    *comm = nullptr;
  }
}
