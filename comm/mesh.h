// The process mesh: which data-parallel replica and which pipeline stage this MPI rank is,
// and who its pipeline neighbours are. Pure arithmetic on (dp, pp, world size, rank): no
// communication, so every rank validates a layout by itself and a bad one fails on all
// ranks at once, without a hang.
//
// The rank layout (the only one):
//
//   world rank = dp_rank * pp + pp_rank
//
// A pipeline's stages are consecutive world ranks, so on a multi-GPU node the activations
// and gradients, which cross between neighbouring stages every microbatch, travel between
// neighbouring GPUs; the data-parallel all-reduce, once a step, strides by pp. With
// dp = 2, pp = 2:
//
//                 pp_rank 0   pp_rank 1
//     dp_rank 0   rank 0      rank 1      <- pipeline group 0
//     dp_rank 1   rank 2      rank 3      <- pipeline group 1
//                    ^ data-parallel group of stage 0
#pragma once

struct Mesh {
  int world_size;  // dp * pp
  int world_rank;
  int dp;       // data-parallel replicas (pipelines)
  int pp;       // pipeline stages per replica
  int dp_rank;  // this rank's replica, world_rank / pp
  int pp_rank;  // this rank's stage, world_rank % pp
  // The neighbouring stages as ranks of the pipeline group (pp_rank -/+ 1), or -1 when
  // there is none (the first stage has no previous, the last no next).
  int previous_stage;
  int next_stage;

  bool is_first_stage() const { return pp_rank == 0; }
  bool is_last_stage() const { return pp_rank == pp - 1; }
};

// The mesh of dp x pp ranks as seen by world_rank. pp == 0 means world_size / dp (all
// ranks of a replica form one pipeline). Throws std::runtime_error with one line naming
// the problem: dp < 1, pp < 0, dp not dividing the world size (pp == 0), dp * pp != the
// world size, or world_rank outside [0, world_size).
Mesh make_mesh(int dp, int pp, int world_size, int world_rank);

// make_mesh for this process in MPI_COMM_WORLD (MPI is initialised).
Mesh make_world_mesh(int dp, int pp);

// The world rank of stage pp_rank of replica dp_rank.
inline int world_rank_of(const Mesh& mesh, int dp_rank, int pp_rank) { return dp_rank * mesh.pp + pp_rank; }
