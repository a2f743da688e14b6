// CUDA_CPU_NCCL_CHECK=1: before an NCCL call (or a group of them) is queued, the calling host
// thread exchanges a short signature of each call with every rank the call involves, and the
// call fails (ncclInvalidUsage, with a message naming both ranks' calls) where the two differ:
// a collective's operation, count, data type, reduction or root; a send's count and type against
// the matching receive's. Without the check such a program hangs or exchanges garbage on a GPU
// as here. Calls pair as NCCL pairs them: collectives in call order; the k-th send from rank a
// to rank b with b's k-th receive from a. A call that has no partner at all (a send without its
// receive) still waits, as it would in NCCL; the trainer's watchdog names such a hang.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cpu {

enum class NcclCall : int32_t { send, recv, all_reduce, reduce_scatter, all_gather, broadcast, reduce };

struct NcclSignature {
  int32_t call;      // NcclCall
  int32_t datatype;  // ncclDataType_t
  int32_t op;        // ncclRedOp_t, or -1
  int32_t root;      // broadcast and reduce, else -1
  int32_t peer;      // send and recv, else -1
  int32_t rank;      // the caller's rank in the communicator
  int64_t count;     // the count argument as NCCL takes it (per rank for reduce-scatter and all-gather)
  int64_t number;    // the call's number among the caller's calls on the communicator, from 1
};

// "ncclAllReduce #7 (count 100, ncclFloat32, ncclSum)".
std::string describe(const NcclSignature& call);

// One group's calls on one communicator (in call order), exchanged over `check`, a duplicate of
// the communicator's MPI communicator kept for this. Returns "" when every partner's call
// matches, else the first mismatch in one line. `gave_up()` is asked while waiting (an aborted
// communicator): then the check returns "" and leaves the rest to the abort.
std::string check_signatures(const std::vector<NcclSignature>& calls, MPI_Comm check, bool (*gave_up)(void*),
                             void* context);

}  // namespace cpu
