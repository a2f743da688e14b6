// What the tensor-parallel tests share: one stage's groups at a given tp for the length of a test,
// the world's ranks split into dp = world / tp replicas of tp consecutive ranks. Creation and
// destruction are collective over MPI_COMM_WORLD.
#pragma once
#include <initializer_list>
#include <vector>

#include "comm/groups.h"
#include "comm/mesh.h"
#include "tests/mpi/pipeline_harness.h"

struct TensorParallelGroups {
  explicit TensorParallelGroups(int tp)
      : groups(create_comm_groups(make_world_mesh(pipeline_harness::size_of_world() / tp, tp, 1))) {}
  ~TensorParallelGroups() { destroy_comm_groups(groups); }
  CommGroups groups;
};

// The tp sizes among `sizes` that divide the world, each a test's groups: under mpirun -np 4 all
// of 1, 2 and 4; under -np 2 (run_tests.sh's np 2 mode does not run these tests, a reader may)
// tp 4 has no ranks to run on.
inline std::vector<int> sizes_dividing_the_world(std::initializer_list<int> sizes) {
  std::vector<int> dividing;
  for (int tp : sizes)
    if (pipeline_harness::size_of_world() % tp == 0) dividing.push_back(tp);
  return dividing;
}
