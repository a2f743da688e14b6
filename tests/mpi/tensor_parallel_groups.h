// What the tensor-parallel tests share: one stage's groups at a given tp for the length of a test,
// the world's ranks split into dp = world / tp replicas of tp consecutive ranks. Creation and
// destruction are collective over MPI_COMM_WORLD.
#pragma once
#include "comm/groups.h"
#include "comm/mesh.h"
#include "tests/mpi/pipeline_harness.h"

struct TensorParallelGroups {
  explicit TensorParallelGroups(int tp)
      : groups(create_comm_groups(make_world_mesh(pipeline_harness::size_of_world() / tp, tp, 1))) {}
  ~TensorParallelGroups() { destroy_comm_groups(groups); }
  CommGroups groups;
};
