// The tensor-parallel collectives over the tp ranks of a stage (comm/groups.h's tensor_parallel
// communicator): the all-reduce the vocabulary-parallel embedding and loss (model/vocab_parallel.h)
// and the row and column parallel layers call, and the all-gather and reduce-scatter of sequence
// parallelism (model/sequence_parallel_linear.h). Issued in the rank's one NCCL order
// (comm/nccl_order.h), on the caller's stream.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>

#include "comm/groups.h"

// values (count) = their reduction by op (ncclSum or ncclMax) over the tensor-parallel group, in
// place, on every tp rank. ncclMax is exact in any order; a sum adds in an order fixed by the
// group's size (the CPU build's NCCL: rank order), so a run is repeatable. Nothing when tp == 1.
void allreduce_tensor_parallel(const CommGroups& groups, void* values, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, cudaStream_t stream);

// gathered (tp, count) = every tp rank's shard (count) in tp-rank order, on every tp rank: row r is
// tp rank r's shard. shard may be this rank's row of gathered (in place). A copy: exact in any order.
void allgather_tensor_parallel(const CommGroups& groups, const void* shard, void* gathered, size_t count,
                               ncclDataType_t type, cudaStream_t stream);
// shard (count) = row tp_rank of the sum over the tp ranks of their values (tp, count). Each element
// is the sum of the same tp addends as allreduce_tensor_parallel's; the CPU build's NCCL adds both in
// rank order, so a shard is bitwise that row of the all-reduce there (NCCL on a GPU promises no
// order for either). shard may be this rank's row of values (in place).
void reduce_scatter_tensor_parallel(const CommGroups& groups, const void* values, void* shard, size_t count,
                                    ncclDataType_t type, cudaStream_t stream);
