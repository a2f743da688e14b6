// The train program's view of the MPI world: its size and this rank, the NCCL groups of its
// mesh, and the few host-side exchanges of a run (the loss, the sampled logits, the per-stage
// records, the checkpoint's pieces). A process that has not initialised MPI (the unit tests
// call the trainer directly) is a world of one, where every function here is local.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "comm/groups.h"

struct World {
  int size;
  int rank;
};

World this_world();

// create_comm_groups in a world of several ranks; in a world of one, the mesh of one stage and
// no communicators (comm/ needs none for pp = dp = 1).
CommGroups create_world_groups(const Mesh& mesh);
void destroy_world_groups(CommGroups& groups);
// abort_comm_groups, on this rank's error (nothing to abort in a world of one).
void abort_world_groups(CommGroups& groups);

// values (count) = their sum over the world, in place, on every rank.
void sum_over_world(const World& world, double* values, size_t count);
void sum_over_world(const World& world, float* values, size_t count);

// Rank 0 gets every rank's values (count each), in rank order; other ranks get nothing.
std::vector<double> gather_to_rank0(const World& world, const double* values, size_t count);

// Rank 0 gets every rank's text, in rank order; other ranks get nothing.
std::vector<std::string> gather_text_to_rank0(const World& world, const std::string& text);

// Returns when every rank of the world has called it.
void wait_for_world(const World& world);

// A range of a host array.
struct HostSpan {
  size_t offset, count;
};

// Brings the stages of replica 0 together on world rank 0 (its first stage): each stage s > 0 of
// replica 0 sends its values at spans_of_stage[s], which world rank 0 writes into its own values
// at the same places. Collective over replica 0 (blocking); the other replicas, and a mesh of one
// stage, return at once. Used for checkpoints, where every stage holds the whole model's layout
// with its own spans filled.
void gather_spans_to_first_stage(const Mesh& mesh, std::vector<float>& values,
                                 const std::vector<std::vector<HostSpan>>& spans_of_stage);

// Brings a stage's tp ranks together on its tp rank 0: each tp rank r > 0 of replica 0 sends its
// values at spans_of_tp_rank[r], which the stage's tp rank 0 writes into its own values at the same
// places. Collective over the stage's tp ranks of replica 0 (blocking); the other replicas, and a
// mesh of tp = 1, return at once. Used for checkpoints, where each tp rank holds its slices.
void gather_spans_to_first_tp_rank(const Mesh& mesh, std::vector<float>& values,
                                   const std::vector<std::vector<HostSpan>>& spans_of_tp_rank);

// Brings a stage's replicas together on its replica 0: each replica r > 0 sends its values at
// spans_of_replica[r], which the stage's replica 0 writes into its own values at the same places.
// Collective over the stage's replicas (blocking); a mesh of one replica returns at once. Used
// for checkpoints under ZeRO-1, where each replica holds its shard of the optimizer state.
void gather_spans_to_first_replica(const Mesh& mesh, std::vector<float>& values,
                                   const std::vector<std::vector<HostSpan>>& spans_of_replica);
