// The process mesh: which data-parallel replica, tensor-parallel rank and pipeline stage this
// MPI rank is, and who its pipeline neighbours are. Pure arithmetic on (dp, tp, pp, world size,
// rank): no communication, so every rank validates a layout by itself and a bad one fails on all
// ranks at once, without a hang.
//
// The rank layout (the only one), tp innermost:
//
//   world rank = (dp_rank * pp + pp_rank) * tp + tp_rank
//
// A tensor-parallel group is tp consecutive ranks, so it sits on one node: its all-reduces,
// several per layer and microbatch, are the mesh's most frequent and largest messages. A
// pipeline's stages are next (stride tp), so the activations and gradients that cross between
// neighbouring stages every microbatch travel between nearby GPUs; the data-parallel all-reduce,
// once a step, strides by pp * tp. With tp = 1 this is the layout of dp x pp alone. With dp = 2,
// tp = 1, pp = 2:
//
//                 pp_rank 0   pp_rank 1
//     dp_rank 0   rank 0      rank 1      <- pipeline group 0
//     dp_rank 1   rank 2      rank 3      <- pipeline group 1
//                    ^ data-parallel group of stage 0
//
// and with dp = 2, tp = 2, pp = 2 each cell holds a tensor-parallel pair:
//
//                 pp_rank 0   pp_rank 1
//     dp_rank 0   ranks 0 1   ranks 2 3   <- pipeline groups {0, 2} and {1, 3}
//     dp_rank 1   ranks 4 5   ranks 6 7
#pragma once

struct Mesh {
  int world_size;  // dp * tp * pp
  int world_rank;
  int dp;       // data-parallel replicas (pipelines)
  int pp;       // pipeline stages per replica
  int dp_rank;  // this rank's replica, world_rank / (pp * tp)
  int pp_rank;  // this rank's stage, world_rank / tp % pp
  // The neighbouring stages as ranks of the pipeline group (pp_rank -/+ 1), or -1 when
  // there is none (the first stage has no previous, the last no next).
  int previous_stage;
  int next_stage;
  int tp;       // tensor-parallel ranks per stage: each holds 1 / tp of the stage's sharded tensors
  int tp_rank;  // this rank's shard, world_rank % tp

  bool is_first_stage() const { return pp_rank == 0; }
  bool is_last_stage() const { return pp_rank == pp - 1; }
};

// The mesh of dp x tp x pp ranks as seen by world_rank. pp == 0 means world_size / (dp tp) (all
// ranks of a replica's tp slice form one pipeline). Throws std::runtime_error with one line
// naming the problem: dp < 1, tp < 1, pp < 0, dp tp not dividing the world size (pp == 0),
// dp tp pp != the world size, or world_rank outside [0, world_size).
Mesh make_mesh(int dp, int tp, int pp, int world_size, int world_rank);
// The mesh of dp x pp ranks (tp = 1).
inline Mesh make_mesh(int dp, int pp, int world_size, int world_rank) {
  return make_mesh(dp, 1, pp, world_size, world_rank);
}

// make_mesh for this process in MPI_COMM_WORLD (MPI is initialised).
Mesh make_world_mesh(int dp, int tp, int pp);
inline Mesh make_world_mesh(int dp, int pp) { return make_world_mesh(dp, 1, pp); }

// Whether tp can shard a model of `heads` attention heads, `channels` channels and a padded
// vocabulary of `padded_vocab` rows: each rank takes heads / tp heads (the QKV projection's
// columns), 4 C / tp of the MLP's hidden columns and padded_vocab / tp rows of the tied wte, so tp
// must divide all three. Throws std::runtime_error with one line naming the first that it does
// not divide, or tp < 1. Pure arithmetic: the trainer calls it on every rank before allocating.
void check_tensor_parallel_sizes(int tp, int heads, int channels, int padded_vocab);

// The world rank of tensor-parallel rank tp_rank of stage pp_rank of replica dp_rank.
inline int world_rank_of(const Mesh& mesh, int dp_rank, int pp_rank, int tp_rank = 0) {
  return (dp_rank * mesh.pp + pp_rank) * mesh.tp + tp_rank;
}
