// CUDA_CPU_NCCL_CHECK=1 (cpu/runtime/settings.h): before an NCCL operation exchanges any data, its stream
// sends a short signature of each of its calls to every rank the call involves and waits for
// theirs; where the two halves of one exchange differ, the operation exchanges nothing and fails
// with a message naming both ranks' calls, on both ranks, instead of hanging or exchanging garbage
// as it would on a GPU and here:
//   - a collective against the partner's collective of the same rank in the communicator's
//     order: operation, count, data type, reduction, root;
//   - a send against its receive: count and data type. Transfers pair as NCCL pairs them, the
//     k-th send from rank a to rank b with b's k-th receive from a, however the ranks group them.
// As in NCCL, the error is asynchronous (ncclCommGetAsyncError): the call returned when it was
// queued; the failed operation's message is printed on stderr, and every later call on the
// communicator fails with it. The check runs where the operation runs, on its stream, so it waits
// only where NCCL would (a check on the calling host thread would make a rank wait for calls its
// partner makes only after this one's transfers: 1F1B's stages do). What it cannot see is a
// collective against a transfer, or two sends towards each other outside a group: each side
// waits for a call of its own kind that never comes, as in NCCL; the trainer's watchdog names it.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/runtime/call_counts.h"

namespace cpu {

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

// A call's signature, before its rank and number are known.
NcclSignature nccl_signature(NcclCall call, int datatype, size_t count, int op = -1, int root = -1, int peer = -1);

// "ncclAllReduce #7 (count 100, ncclFloat32, ncclSum)".
std::string describe(const NcclSignature& call);

// One call of an operation on its way to meet its partners' counterparts.
struct NcclMeeting {
  NcclSignature call;
  std::vector<int> partners;  // the ranks whose counterpart it has not met yet
  bool met() const { return partners.empty(); }
};

// What one rank knows of its partners' calls on one communicator. Each call travels in a channel
// that both ranks of a pair name alike: the communicator's collectives, or the transfers from
// rank a to rank b; posted in call order within its channel, a call pairs with its counterpart
// in MPI as its signature does here.
class NcclMatcher {
 public:
  // `check`: a duplicate of the communicator's MPI communicator, for the signatures alone.
  explicit NcclMatcher(MPI_Comm check);
  // Sends an operation's calls on the communicator to the ranks they involve, and returns them
  // as meetings, in call order.
  std::vector<NcclMeeting> announce(const std::vector<NcclSignature>& calls);
  // Meets the counterparts that have arrived: "" unless one differs, then the problem in one line.
  std::string meet(NcclMeeting& meeting);
  // Takes in the partners' calls that have arrived; false when none had.
  bool receive();
  int64_t channel(const NcclSignature& call) const;

 private:
  struct Outgoing {
    std::vector<NcclSignature> calls;
    MPI_Request request;
  };
  MPI_Comm comm_;
  int size_ = 0;
  std::mutex mutex_;  // operations of two streams on one communicator
  std::deque<Outgoing> outgoing_;  // until sent
  std::map<int, std::deque<NcclSignature>> unmatched_;  // by partner: its calls none of ours has met yet
};

}  // namespace cpu
