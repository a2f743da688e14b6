// The process mesh (comm/mesh.h): validation of a dp x pp layout and this rank's place in it.
#include "comm/mesh.h"

#include <mpi.h>

#include <stdexcept>
#include <string>

Mesh make_mesh(int dp, int pp, int world_size, int world_rank) {
  using std::to_string;
  if (dp < 1) throw std::runtime_error("--dp " + to_string(dp) + " must be at least 1");
  if (pp < 0) throw std::runtime_error("--pp " + to_string(pp) + " must be at least 1 (or 0: world size / dp)");
  if (pp == 0) {
    if (world_size % dp != 0)
      throw std::runtime_error("--dp " + to_string(dp) + " does not divide the world size " + to_string(world_size));
    pp = world_size / dp;
  }
  if (dp * pp != world_size)
    throw std::runtime_error("--dp " + to_string(dp) + " x --pp " + to_string(pp) + " = " + to_string(dp * pp) +
                             " does not equal the world size " + to_string(world_size));
  if (world_rank < 0 || world_rank >= world_size)
    throw std::runtime_error("rank " + to_string(world_rank) + " is outside the world of " + to_string(world_size));
  Mesh mesh;
  mesh.world_size = world_size;
  mesh.world_rank = world_rank;
  mesh.dp = dp;
  mesh.pp = pp;
  mesh.dp_rank = world_rank / pp;
  mesh.pp_rank = world_rank % pp;
  mesh.previous_stage = mesh.pp_rank > 0 ? mesh.pp_rank - 1 : -1;
  mesh.next_stage = mesh.pp_rank < pp - 1 ? mesh.pp_rank + 1 : -1;
  return mesh;
}

Mesh make_world_mesh(int dp, int pp) {
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  return make_mesh(dp, pp, world_size, world_rank);
}
