// The collectives of a training step across the mesh: the gradient all-reduce over the
// data-parallel replicas, the tied embedding's gradient all-reduce between the first and
// the last stage of a pipeline, and the per-tensor squared-norm partial sums of all stages
// gathered so that every stage gets the same global gradient norm, bit for bit, for any
// layout.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <vector>

#include "comm/groups.h"

// gradients (count) = their sum over the data-parallel group (in place). A sum, not a mean:
// scale the loss by 1 / (tokens of the global batch) and each replica's gradient is its
// share of the global mean, so the sum is the mean's gradient (a caller that scales by the
// replica's own tokens divides by dp afterwards). MPI and NCCL add in an order fixed by the
// group's size, so a run is repeatable; with dp = 2 it is one commutative addition.
// Nothing when dp == 1.
void allreduce_data_parallel_gradients(const CommGroups& groups, void* gradients, size_t count, ncclDataType_t type,
                                       cudaStream_t stream);

// grad_wte (count) = the sum of the first and the last stage's copies (in place), on those
// two stages: the first holds the embedding's share, the last the output projection's
// (after sum_tied_embedding_gradient into its zero wte gradient). Two summands in one
// commutative addition: bitwise the single-stage model's wte + head sum. Nothing on the
// middle stages, nor when pp == 1 (the one stage has summed both shares itself).
void allreduce_tied_embedding_gradient(const CommGroups& groups, void* grad_wte, size_t count, ncclDataType_t type,
                                       cudaStream_t stream);

// ZeRO-1 (model/optimizer_shards.h): a range of a stage's buffer and the data-parallel rank that owns it.
struct OwnedRange {
  size_t offset, count;  // elements
  int owner;             // dp_rank
};

// ZeRO-1's reduce-scatter: each range of gradients (in place) becomes on its owner the sum over
// the replicas, as allreduce_data_parallel_gradients would make it; the other replicas' copies
// keep their own share. One ncclReduce per range, rooted at its owner, in one NCCL group:
// ncclReduceScatter gives every rank an equal part, and shards cut on region boundaries are not
// equal. Bitwise the all-reduce's sum where both add in one order: the CPU build's NCCL always,
// any NCCL at dp = 2 (docs/pipeline.md, "ZeRO-1").
void reduce_gradients_to_owners(const CommGroups& groups, void* gradients, const std::vector<OwnedRange>& ranges,
                                ncclDataType_t type, cudaStream_t stream);
// ZeRO-1's all-gather: each range of parameters (in place) broadcast from its owner, one group.
void broadcast_parameters_from_owners(const CommGroups& groups, void* parameters,
                                      const std::vector<OwnedRange>& ranges, ncclDataType_t type,
                                      cudaStream_t stream);
// partials (count) = their sum over the data-parallel group (in place), for squared-norm
// partials that each replica computed for the slots it owns (zero elsewhere): x + 0 = x exactly.
void sum_norm_partials_over_replicas(const CommGroups& groups, float* partials, size_t count, cudaStream_t stream);

// values (count) = their sum over every rank of the mesh (in place), e.g. a count of the ranks
// that found something. Nothing when the world is one rank.
void allreduce_world_sum(const CommGroups& groups, double* values, size_t count, cudaStream_t stream);

// The norm-partials table: one squared-norm partial sum per slot, a slot per parameter
// tensor and layer, in global layer order (model/parameters.h's tensor order within a layer):
//
//   slot 0, 1                  wte, wpe                   (the first stage)
//   slot 2 + 12 l + k          layer l's k-th per-layer tensor: ln1w, ln1b, qkvw, qkvb,
//                              attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb
//   slot 2 + 12 L, 2 + 12 L + 1   lnfw, lnfb              (the last stage)
//
// A stage's slots are one contiguous range: its embeddings, its layers, its head. The tied
// wte counts once, in slot 0: after allreduce_tied_embedding_gradient the last stage's copy
// is the same gradient and has no slot. The slots' numbering is the model's: model/norm_slots.h.
// The slots a stage fills: [first, end).
struct NormSlotRange {
  size_t first;
  size_t end;
};

// partials (num_slots) holds this stage's squared-norm partial sums in its slots own
// (written by the caller, e.g. global_norm_squared with its tensors in slot order); the
// rest is overwritten. Afterwards every stage of the pipeline holds the whole table, and
// total (1) = its sum over the slots in an order fixed by num_slots alone
// (sum_rows_in_fixed_order), so the global squared norm is bitwise the same for every
// layout, pp = 1 included. The gather is an all-reduce sum over the pipeline group of
// tables that are zero outside each stage's own slots: every slot has one non-zero
// summand, and x + 0 = x exactly, whatever order NCCL adds in. For float and double.
template <typename S>
void gather_layer_norm_partials(const CommGroups& groups, S* partials, size_t num_slots, NormSlotRange own, S* total,
                                cudaStream_t stream);
