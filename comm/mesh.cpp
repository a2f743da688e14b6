// The process mesh (comm/mesh.h): validation of a dp x tp x pp layout and this rank's place in it.
#include "comm/mesh.h"

#include <mpi.h>

#include <stdexcept>
#include <string>

Mesh make_mesh(int dp, int tp, int pp, int world_size, int world_rank) {
  using std::to_string;
  if (dp < 1) throw std::runtime_error("--dp " + to_string(dp) + " must be at least 1");
  if (tp < 1) throw std::runtime_error("--tp " + to_string(tp) + " must be at least 1");
  if (pp < 0) throw std::runtime_error("--pp " + to_string(pp) + " must be at least 1 (or 0: world size / dp)");
  // With tp = 1 the messages stay those of a dp x pp mesh, which name no tp.
  const std::string dp_tp = "--dp " + to_string(dp) + (tp > 1 ? " x --tp " + to_string(tp) : "");
  if (pp == 0) {
    if (world_size % (dp * tp) != 0)
      throw std::runtime_error(dp_tp + (tp > 1 ? " = " + to_string(dp * tp) : "") + " does not divide the world size " +
                               to_string(world_size));
    pp = world_size / (dp * tp);
  }
  if (dp * tp * pp != world_size)
    throw std::runtime_error(dp_tp + " x --pp " + to_string(pp) + " = " + to_string(dp * tp * pp) +
                             " does not equal the world size " + to_string(world_size));
  if (world_rank < 0 || world_rank >= world_size)
    throw std::runtime_error("rank " + to_string(world_rank) + " is outside the world of " + to_string(world_size));
  Mesh mesh;
  mesh.world_size = world_size;
  mesh.world_rank = world_rank;
  mesh.dp = dp;
  mesh.tp = tp;
  mesh.pp = pp;
  mesh.tp_rank = world_rank % tp;
  mesh.pp_rank = world_rank / tp % pp;
  mesh.dp_rank = world_rank / (tp * pp);
  mesh.previous_stage = mesh.pp_rank > 0 ? mesh.pp_rank - 1 : -1;
  mesh.next_stage = mesh.pp_rank < pp - 1 ? mesh.pp_rank + 1 : -1;
  return mesh;
}

Mesh make_world_mesh(int dp, int tp, int pp) {
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  return make_mesh(dp, tp, pp, world_size, world_rank);
}

void check_tensor_parallel_sizes(int tp, int heads, int channels, int padded_vocab) {
  using std::to_string;
  const std::string name = "--tp " + to_string(tp);
  if (tp < 1) throw std::runtime_error(name + " must be at least 1");
  if (heads % tp != 0) throw std::runtime_error(name + " does not divide the " + to_string(heads) + " attention heads");
  if (4 * channels % tp != 0)
    throw std::runtime_error(name + " does not divide the MLP's 4 C = " + to_string(4 * channels) + " hidden channels");
  if (padded_vocab % tp != 0)
    throw std::runtime_error(name + " does not divide the padded vocabulary of " + to_string(padded_vocab) + " rows");
}
