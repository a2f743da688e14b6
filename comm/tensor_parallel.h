// The tensor-parallel collectives: an all-reduce over the tp ranks of a stage (comm/groups.h's
// tensor_parallel communicator), which the vocabulary-parallel embedding and loss
// (model/vocab_parallel.h) and, later, the row and column parallel layers call. Issued in the
// rank's one NCCL order (comm/nccl_order.h), on the caller's stream.
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
